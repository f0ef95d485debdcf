package lockertest

import (
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/hybrid"
)

var basicTests = []test{
	{"TokensGrow", func(t *testing.T, h *Harness) {
		ls := h.lockers(t, 2)
		var last uint64
		for i := range 6 {
			g := h.acquire(t, ls[i%2], "k")
			if i > 0 && g.Token() <= last {
				t.Fatalf("grant %d of %q has token %d after %d: tokens must grow with every grant of a key", i, "k", g.Token(), last)
			}
			last = g.Token()
			if err := g.Context().Err(); err != nil {
				t.Fatalf("the Context of a new lease has ended: %v", context.Cause(g.Context()))
			}
			release(t, g)
		}
	}},
	{"KeysIndependent", func(t *testing.T, h *Harness) {
		ls := h.lockers(t, 2)
		a := h.acquire(t, ls[0], "a")
		// Another key is free while "a" is held, on either locker.
		b := h.acquire(t, ls[1], "b")
		c := h.acquire(t, ls[0], "c")
		h.wantHeld(t, a, ls[1], "a")
		h.wantHeld(t, b, ls[0], "b")
		release(t, a)
		release(t, b)
		release(t, c)
		// And they stay usable: grants of "a" still grow.
		a2 := h.acquire(t, ls[1], "a")
		if a2.Token() <= a.Token() {
			t.Fatalf("token %d of %q after %d", a2.Token(), "a", a.Token())
		}
		release(t, a2)
	}},
	{"StaleReleaseKeepsNewerHolder", func(t *testing.T, h *Harness) {
		ls := h.lockers(t, 2)
		a := h.acquire(t, ls[0], "k")
		release(t, a)
		b := h.acquire(t, ls[1], "k")
		if b.Token() <= a.Token() {
			t.Fatalf("token %d after %d", b.Token(), a.Token())
		}
		// A repeated (late, retried) release of the first grant must free
		// nothing of the second.
		ctx := h.ctx(t)
		if err := a.Release(ctx); err != nil {
			t.Fatalf("second release of lease %d: %v, want nil", a.Token(), err)
		}
		h.wantHeld(t, b, ls[0], "k")
		if h.Renews {
			// A renewal cycle or check after the stale release still finds
			// the lease held.
			time.Sleep(h.TTL)
			if err := b.Context().Err(); err != nil {
				t.Fatalf("a stale release of lease %d ended lease %d: %v", a.Token(), b.Token(), context.Cause(b.Context()))
			}
			h.wantHeld(t, b, ls[0], "k")
		}
		release(t, b)
		// The acquirers that gave up waiting leave no trace.
		c := h.acquire(t, ls[0], "k")
		if c.Token() <= b.Token() {
			t.Fatalf("token %d after %d", c.Token(), b.Token())
		}
		release(t, c)
	}},
	{"Close", func(t *testing.T, h *Harness) {
		ls := h.lockers(t, 1)
		c, ok := ls[0].(io.Closer)
		if !ok {
			t.Skipf("skipped: %T has no Close method (it holds no resources of its own)", ls[0])
		}
		g := h.acquire(t, ls[0], "k")
		if err := c.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
		// The leases of a closed locker are lost.
		h.wantLost(t, g)
		releaseStale(t, g)
		var err error
		notPanics(t, "Acquire on a closed locker", func() {
			var o hybrid.Lease
			if o, err = ls[0].Acquire(h.ctx(t), "k"); err == nil {
				releaseStale(t, o)
			}
		})
		if err == nil {
			t.Fatal("Acquire on a closed locker succeeded")
		}
		if !errors.Is(err, hybrid.ErrLockerClosed) {
			t.Fatalf("Acquire on a closed locker: %v, want an error matching hybrid.ErrLockerClosed (hybrid.Update would retry it)", err)
		}
		if err := c.Close(); err != nil {
			t.Fatalf("second Close: %v, want nil", err)
		}
	}},
}

var contextTests = []test{
	{"NilContext", func(t *testing.T, h *Harness) {
		ls := h.lockers(t, 2)
		var (
			err    error
			nilCtx context.Context
		)
		notPanics(t, "Acquire(nil)", func() {
			var g hybrid.Lease
			g, err = ls[0].Acquire(nilCtx, "k")
			if g != nil {
				t.Errorf("Acquire(nil) returned a lease (token %d)", g.Token())
			}
		})
		if !errors.Is(err, cas.ErrNilContext) {
			t.Fatalf("Acquire(nil) = %v, want cas.ErrNilContext", err)
		}
		// The refused call left no grant behind.
		g := h.acquire(t, ls[1], "k")
		notPanics(t, "Release(nil)", func() {
			err = g.Release(nilCtx)
		})
		if !errors.Is(err, cas.ErrNilContext) {
			t.Fatalf("Release(nil) = %v, want cas.ErrNilContext", err)
		}
		// The refused release left the lease held.
		if err := g.Context().Err(); err != nil {
			t.Fatalf("Release(nil) ended the lease: %v", context.Cause(g.Context()))
		}
		h.wantHeld(t, g, ls[0], "k")
		release(t, g)
	}},
	{"CancelledContext", func(t *testing.T, h *Harness) {
		ls := h.lockers(t, 2)
		cancelled, cancel := context.WithCancel(context.Background())
		cancel()
		g, err := ls[0].Acquire(cancelled, "k")
		if err == nil {
			releaseStale(t, g)
			t.Fatal("Acquire with a cancelled context succeeded")
		}
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Acquire with a cancelled context: %v, want context.Canceled", err)
		}
		held := h.acquire(t, ls[1], "k")
		// A waiter whose context ends gets its error.
		h.wantHeld(t, held, ls[0], "k")
		if err := held.Release(cancelled); err != nil && !errors.Is(err, context.Canceled) {
			t.Fatalf("Release with a cancelled context: %v, want nil or context.Canceled", err)
		}
		// A release with a live context finishes the job.
		if err := held.Release(h.ctx(t)); err != nil {
			t.Fatalf("Release after a Release with a cancelled context: %v", err)
		}
		next := h.acquire(t, ls[0], "k")
		if next.Token() <= held.Token() {
			t.Fatalf("token %d after %d", next.Token(), held.Token())
		}
		release(t, next)
	}},
}
