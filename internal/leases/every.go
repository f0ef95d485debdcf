package leases

import (
	"context"
	"time"
)

// Every runs the periodic checks of a lease whose lock lives in a
// database session (pgcas's advisory locks, sqlcas's MySQL named locks):
// such a lock has no TTL and is lost only with its session, so its holder
// asks now and then whether it still holds it.
//
// Every calls check every interval, each call with a context that ends
// after timeout, until stop is closed (then it returns nil) or a check
// fails (then it returns the check's error). A check in progress when stop
// is closed finishes first.
func Every(stop <-chan struct{}, interval, timeout time.Duration, check func(ctx context.Context) error) error {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return nil
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		err := check(ctx)
		cancel()
		if err != nil {
			return err
		}
	}
}
