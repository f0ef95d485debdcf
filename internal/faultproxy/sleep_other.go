//go:build !linux

package faultproxy

import "time"

// sleepUntil sleeps until t (Go's timer; see sleep_linux.go).
func sleepUntil(t time.Time) { time.Sleep(time.Until(t)) }
