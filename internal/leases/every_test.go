package leases

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

func TestEveryStops(t *testing.T) {
	stop := make(chan struct{})
	var n atomic.Int32
	done := make(chan error, 1)
	go func() {
		done <- Every(stop, time.Millisecond, time.Second, func(ctx context.Context) error {
			if _, ok := ctx.Deadline(); !ok {
				t.Error("a check's context has no deadline")
			}
			n.Add(1)
			return nil
		})
	}()
	for n.Load() < 3 {
		time.Sleep(time.Millisecond)
	}
	close(stop)
	if err := <-done; err != nil {
		t.Fatalf("Every after stop: %v, want nil", err)
	}
}

func TestEveryReturnsFailedCheck(t *testing.T) {
	lost := errors.New("lost")
	var n int
	err := Every(make(chan struct{}), time.Millisecond, time.Second, func(context.Context) error {
		if n++; n == 3 {
			return lost
		}
		return nil
	})
	if !errors.Is(err, lost) || n != 3 {
		t.Fatalf("Every = %v after %d checks, want %v after 3", err, n, lost)
	}
}
