package faultproxy

import (
	"syscall"
	"time"
)

// sleepUntil blocks the calling goroutine's thread in nanosleep(2) until
// t: the kernel wakes it within tens of microseconds, where Go's timers
// in an otherwise idle process wake about a millisecond late.
func sleepUntil(t time.Time) {
	for {
		d := time.Until(t)
		if d <= 0 {
			return
		}
		ts := syscall.NsecToTimespec(d.Nanoseconds())
		_ = syscall.Nanosleep(&ts, nil) // EINTR: sleep again for the rest
	}
}
