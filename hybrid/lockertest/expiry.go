package lockertest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/occkit/occkit/hybrid"
)

var expiryTests = []test{
	{"ExpiresReported", func(t *testing.T, h *Harness) {
		ls := h.lockers(t, 1)
		asked := time.Now()
		g := h.acquire(t, ls[0], "k")
		granted := time.Now()
		e, ok := g.(hybrid.ExpiringLease)
		if !ok {
			t.Skipf("skipped: %T is not a hybrid.ExpiringLease", g)
		}
		// The expiry is after the request, and at most a TTL after the
		// grant.
		if exp := e.Expires(); !exp.After(asked) || exp.After(granted.Add(h.TTL)) {
			t.Fatalf("a new lease expires %v after it was asked for and %v after its grant, want after the request and at most %v after the grant",
				exp.Sub(asked), exp.Sub(granted), h.TTL)
		}
		release(t, g)
	}},
	{"HeldPastTTL", func(t *testing.T, h *Harness) {
		if !h.Renews {
			t.Skip("skipped: the locker does not renew its leases (see LostLease for their expiry)")
		}
		ls := h.lockers(t, 2)
		rc, counts := ls[0].(hybrid.RenewalCounter)
		var renewed uint64
		if counts {
			renewed = rc.Renewals()
		}
		g := h.acquire(t, ls[0], "k")
		// Another process waits three TTLs for the lease in vain: the
		// holder keeps it.
		hold := max(3*h.TTL, time.Second)
		ctx, cancel := context.WithTimeout(context.Background(), hold)
		defer cancel()
		if o, err := ls[1].Acquire(ctx, "k"); err == nil {
			releaseStale(t, o)
			t.Fatalf("another holder got %q (token %d) while lease %d was held for %v", "k", o.Token(), g.Token(), hold)
		} else if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("acquire of a held key: %v, want context.DeadlineExceeded", err)
		}
		if err := g.Context().Err(); err != nil {
			t.Fatalf("a held lease ended after %v: %v", hold, context.Cause(g.Context()))
		}
		if e, ok := g.(hybrid.ExpiringLease); ok {
			if left := time.Until(e.Expires()); left <= 0 || left > h.TTL {
				t.Fatalf("a lease held for %v expires in %v, want within (0, %v]: renewals move its expiry", hold, left, h.TTL)
			}
		}
		// A locker that counts its renewals counted those that kept the
		// lease.
		if counts {
			if n := rc.Renewals(); n <= renewed {
				t.Fatalf("Renewals() = %d after a lease was held for %v, %d before: want more", n, hold, renewed)
			}
		}
		release(t, g)
	}},
	{"LostLease", func(t *testing.T, h *Harness) {
		ls := h.lockers(t, 2)
		g := h.acquire(t, ls[0], "k")
		// Lost behind its holder's back (or, without renewals, expired):
		// its Context ends with hybrid.ErrLeaseLost.
		h.lose(t, g)
		if e, ok := g.(hybrid.ExpiringLease); ok && !h.Renews {
			if now := time.Now(); now.Before(e.Expires()) {
				t.Fatalf("lease ended %v before its expiry", e.Expires().Sub(now))
			}
		}
		next := h.acquire(t, ls[1], "k")
		if next.Token() <= g.Token() {
			t.Fatalf("token %d after the lost lease's %d", next.Token(), g.Token())
		}
		// The lost lease's release frees nothing of the new holder.
		releaseStale(t, g)
		if err := next.Context().Err(); err != nil {
			t.Fatalf("the release of a lost lease ended the new holder's: %v", context.Cause(next.Context()))
		}
		h.wantHeld(t, next, ls[0], "k")
		release(t, next)
	}},
}
