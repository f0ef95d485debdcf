// Package lockertest is the conformance suite every hybrid.Locker runs, as
// cas/castest is for stores: fencing tokens that grow with every grant of a
// key, release by grant (a stale release frees nothing of a newer holder),
// expiry and renewal (counted, by a locker that is a
// hybrid.RenewalCounter), a lost lease's Context cancelled with a cause
// matching hybrid.ErrLeaseLost, nil and cancelled contexts refused without
// a panic, mutual exclusion under concurrent acquirers, waiters woken by a
// release, Close, and fencing: a superseded holder's fenced write refused
// with cas.ErrFenced, and hybrid.Update through the locker.
//
// A locker's test calls [Run] with a [Harness] that makes fresh lockers on
// a real backend:
//
//	func TestLockerConformance(t *testing.T) {
//		lockertest.Run(t, lockertest.Harness{
//			NewLockers: func(t *testing.T, n int) []hybrid.Locker { return lockersOnFreshPrefix(t, n) },
//			TTL:        time.Second,
//			Renews:     true,
//			LoseLease:  func(t *testing.T, g hybrid.Lease) { revokeItsSession(t, g) },
//			NewStore:   func(t *testing.T) cas.FencedStore { return storeOnFreshPrefix(t) },
//		})
//	}
//
// Capabilities the harness does not give (LoseLease, NewStore, a Close
// method, an ExpiringLease) skip their tests with t.Skip and the reason,
// so they show in go test -v output.
//
// No test passes or fails on a tight time bound: a waiter woken by a
// release must get the lease before the released lease would have expired
// (or within seconds, for a locker that renews), and checks that a lease
// that expired on a slow machine would make wrong are reported as
// inconclusive instead.
package lockertest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/hybrid"
)

// Harness describes the locker under test.
type Harness struct {
	// NewLockers returns n lockers (n ≥ 1) over one keyspace private to
	// this test (a fresh prefix, sequence or process): a lease granted by
	// one excludes the others on its key, and the tokens of a key grow
	// across all of them. Where the backend allows, each stands for a
	// process of its own (its own client, session or connection pool); a
	// locker that only excludes within itself (hybrid.NewLocalLocker) is
	// returned n times. It is called once per subtest and releases what it
	// made with t.Cleanup.
	NewLockers func(t *testing.T, n int) []hybrid.Locker

	// TTL is how long a lease lasts unless renewed. For a locker whose
	// leases have no TTL (PostgreSQL session locks, which last as long as
	// their connection), it is the period of the checks that find a lease
	// lost. The expiry tests wait a few TTLs.
	TTL time.Duration

	// Renews says that a held lease is kept past its TTL (renewed, or
	// checked alive) until it is released or lost. False: a lease ends TTL
	// after its grant unless released (hybrid.NewLocalLocker).
	Renews bool

	// LoseLease, when set, makes the backend drop g behind its holder's
	// back, as the expiry of a lease whose holder was paused past its TTL
	// would: revoke its session, delete its lock key, end its connection's
	// session. Without it, the loss tests of a locker that Renews skip, and
	// those of one that does not wait for the lease to expire.
	LoseLease func(t *testing.T, g hybrid.Lease)

	// NewStore, when set, returns an empty fenced store private to this
	// test for the fencing tests, which write with the leases' tokens and
	// run hybrid.Update through the lockers. Nil skips them.
	NewStore func(t *testing.T) cas.FencedStore

	// Workers and Rounds size the mutual exclusion and Update tests
	// (defaults 6 and 10). Slow backends may lower them.
	Workers, Rounds int
}

func (h *Harness) workers() int {
	if h.Workers > 0 {
		return h.Workers
	}
	return 6
}

func (h *Harness) rounds() int {
	if h.Rounds > 0 {
		return h.Rounds
	}
	return 10
}

type test struct {
	name string
	run  func(t *testing.T, h *Harness)
}

// Run runs the whole suite against the lockers h makes.
func Run(t *testing.T, h Harness) {
	t.Helper()
	if h.NewLockers == nil {
		t.Fatal("lockertest: Harness.NewLockers is nil")
	}
	if h.TTL <= 0 {
		t.Fatal("lockertest: Harness.TTL must be positive")
	}
	groups := []struct {
		name  string
		tests []test
	}{
		{"Basic", basicTests},
		{"Contexts", contextTests},
		{"Expiry", expiryTests},
		{"Concurrency", concurrencyTests},
		{"Fencing", fencingTests},
	}
	for _, g := range groups {
		t.Run(g.name, func(t *testing.T) {
			for _, tc := range g.tests {
				t.Run(tc.name, func(t *testing.T) { tc.run(t, &h) })
			}
		})
	}
}

// lockers returns n lockers of a fresh keyspace, checking the harness.
func (h *Harness) lockers(t *testing.T, n int) []hybrid.Locker {
	t.Helper()
	ls := h.NewLockers(t, n)
	if len(ls) != n {
		t.Fatalf("lockertest: NewLockers(t, %d) returned %d lockers", n, len(ls))
	}
	for i, l := range ls {
		if l == nil {
			t.Fatalf("lockertest: NewLockers returned a nil locker at %d", i)
		}
	}
	return ls
}

// waitLimit bounds every wait the suite expects to end: long enough for a
// loaded machine, short enough to fail a hang.
func (h *Harness) waitLimit() time.Duration { return 20*time.Second + 10*h.TTL }

// ctx returns a context that ends after the suite's wait limit or when the
// test ends.
func (h *Harness) ctx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), h.waitLimit())
	t.Cleanup(cancel)
	return ctx
}

// acquire takes a lease on key or fails the test; the lease is released
// when the test ends (a no-op if the test released it).
func (h *Harness) acquire(t *testing.T, l hybrid.Locker, key string) hybrid.Lease {
	t.Helper()
	g, err := l.Acquire(h.ctx(t), key)
	if err != nil {
		t.Fatalf("acquire %q: %v", key, err)
	}
	if g == nil {
		t.Fatalf("acquire %q returned a nil lease and no error", key)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = g.Release(ctx)
	})
	return g
}

// release releases g and checks the result and the lease's Context.
func release(t *testing.T, g hybrid.Lease) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := g.Release(ctx); err != nil {
		t.Fatalf("release of lease %d: %v", g.Token(), err)
	}
	if g.Context().Err() == nil {
		t.Fatalf("the Context of released lease %d is not cancelled", g.Token())
	}
	if cause := context.Cause(g.Context()); !errors.Is(cause, hybrid.ErrLeaseReleased) && !errors.Is(cause, hybrid.ErrLeaseLost) {
		t.Fatalf("the Context of released lease %d ended with %v, want hybrid.ErrLeaseReleased", g.Token(), cause)
	}
}

// releaseStale releases a lease that was lost or already released: it
// must return nil or an error matching hybrid.ErrLeaseLost.
func releaseStale(t *testing.T, g hybrid.Lease) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := g.Release(ctx); err != nil && !errors.Is(err, hybrid.ErrLeaseLost) {
		t.Fatalf("release of stale lease %d: %v, want nil or hybrid.ErrLeaseLost", g.Token(), err)
	}
}

// wantHeld checks that l cannot acquire key while g holds it: an Acquire
// with a short deadline must end with context.DeadlineExceeded. For a
// locker that does not renew, a grant that succeeds because g expired in
// the meantime (a slow machine) is inconclusive, not a failure.
func (h *Harness) wantHeld(t *testing.T, g hybrid.Lease, l hybrid.Locker, key string) {
	t.Helper()
	wait := 300 * time.Millisecond
	if !h.Renews {
		wait = min(wait, h.TTL/4)
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	o, err := l.Acquire(ctx, key)
	if err == nil {
		releaseStale(t, o)
		if !h.Renews && g.Context().Err() != nil {
			t.Logf("inconclusive: lease %d on %q expired before the check could see it held (%v)", g.Token(), key, context.Cause(g.Context()))
			return
		}
		t.Fatalf("acquired %q (token %d) while lease %d holds it", key, o.Token(), g.Token())
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("acquire of held %q with a deadline: %v, want context.DeadlineExceeded", key, err)
	}
}

// lose makes g lost: through LoseLease, or by waiting for its expiry when
// the locker does not renew. It skips the test when neither can be done,
// and returns once g's Context has ended with a cause matching
// hybrid.ErrLeaseLost.
func (h *Harness) lose(t *testing.T, g hybrid.Lease) {
	t.Helper()
	switch {
	case h.LoseLease != nil:
		h.LoseLease(t, g)
	case h.Renews:
		t.Skip("skipped: the locker renews its leases and the harness has no LoseLease")
	}
	h.wantLost(t, g)
}

// wantLost waits for g's Context to end and checks its cause.
func (h *Harness) wantLost(t *testing.T, g hybrid.Lease) {
	t.Helper()
	select {
	case <-g.Context().Done():
	case <-time.After(h.waitLimit()):
		t.Fatalf("the Context of lost lease %d is not cancelled after %v", g.Token(), h.waitLimit())
	}
	if cause := context.Cause(g.Context()); !errors.Is(cause, hybrid.ErrLeaseLost) {
		t.Fatalf("the Context of lost lease %d ended with %v, want a cause matching hybrid.ErrLeaseLost", g.Token(), cause)
	}
}

// notPanics runs f and fails the test if it panics.
func notPanics(t *testing.T, what string, f func()) {
	t.Helper()
	defer func() {
		if r := recover(); r != nil {
			t.Fatalf("%s panicked: %v", what, r)
		}
	}()
	f()
}
