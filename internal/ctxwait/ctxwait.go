// Package ctxwait holds the adapters' context-aware waits: a sleep, and
// the poll of a writer waiting for an exclusive hold to end.
package ctxwait

import (
	"context"
	"errors"
	"time"
)

// Sleep waits d, or until ctx ends: then it returns ctx's error.
func Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// Poll is the schedule of a writer that waits for another's exclusive
// hold on a key to end, as a writer waits for a row lock: 200 µs, then
// doubling up to 10 ms between looks. The zero Poll starts at 200 µs.
type Poll struct{ next time.Duration }

// Wait sleeps the schedule's next interval, or until ctx ends: then it
// returns ctx's error.
func (p *Poll) Wait(ctx context.Context) error {
	if p.next == 0 {
		p.next = 200 * time.Microsecond
	}
	err := Sleep(ctx, p.next)
	p.next = min(2*p.next, 10*time.Millisecond)
	return err
}

// WhileHeld calls send until its error no longer matches held (a write
// that an exclusive hold refused, which applied nothing and can be sent
// again), waiting on a Poll between calls. It returns send's last result,
// or ctx's error when ctx ends first.
func WhileHeld[T any](ctx context.Context, held error, send func() (T, error)) (T, error) {
	var p Poll
	for {
		v, err := send()
		if !errors.Is(err, held) {
			return v, err
		}
		if err := p.Wait(ctx); err != nil {
			var zero T
			return zero, err
		}
	}
}

// Guard calls fn and, if fn panics, calls release before the panic goes
// on: for a holder of an exclusive hold whose fn panics, so that the hold
// ends at once rather than when it expires.
func Guard[T, U any](release func(), fn func() (T, U, error)) (T, U, error) {
	done := false
	defer func() {
		if !done {
			release()
		}
	}()
	a, b, err := fn()
	done = true
	return a, b, err
}
