package hybrid_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/occkit/occkit/adapters/memcas"
	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/hybrid"
	"github.com/occkit/occkit/hybrid/lockertest"
	"github.com/occkit/occkit/occ"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// localHarness runs lockertest on one local locker per test (a local
// locker excludes only within itself: it is every "process" at once).
func localHarness(ttl time.Duration) lockertest.Harness {
	return lockertest.Harness{
		NewLockers: func(t *testing.T, n int) []hybrid.Locker {
			l := hybrid.NewLocalLocker(ttl)
			ls := make([]hybrid.Locker, n)
			for i := range ls {
				ls[i] = l
			}
			return ls
		},
		TTL:      ttl,
		NewStore: func(*testing.T) cas.FencedStore { return newFencedMap() },
	}
}

func TestLocalLockerConformance(t *testing.T) {
	lockertest.Run(t, localHarness(2*time.Second))
}

// TestLocalLockerConformanceShortTTL: a lease whose TTL is the default
// safety margin works, hybrid.Update included (it used to refuse every
// write: "lease about to expire: 100ms left, margin 100ms").
func TestLocalLockerConformanceShortTTL(t *testing.T) {
	lockertest.Run(t, localHarness(100*time.Millisecond))
}

// TestLocalLockerAfterRestart: a local locker made after another gave
// many grants (a process restarted) gives tokens above all of them, so
// that a store keeping its fence tokens takes the new process's writes.
func TestLocalLockerAfterRestart(t *testing.T) {
	ctx := context.Background()
	store := memcas.New()
	old := hybrid.NewLocalLocker(time.Second)
	var last uint64
	for range 1000 {
		l, err := old.Acquire(ctx, "other")
		if err != nil {
			t.Fatal(err)
		}
		last = l.Token()
		_ = l.Release(ctx)
	}
	l, err := old.Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.CompareAndSwapFenced(ctx, "k", 0, l.Token(), []byte("1")); err != nil {
		t.Fatal(err)
	}
	_ = l.Release(ctx)
	restarted := hybrid.NewLocalLocker(time.Second)
	if _, _, err := hybrid.Update(ctx, restarted, cas.NewTyped(store, cas.JSON[int]()), "k", func(n int, _ bool) (int, error) {
		return n + 1, nil
	}); err != nil {
		t.Fatalf("update through the new locker (the old one's last token %d): %v", last, err)
	}
}

// TestUpdateShortLease: hybrid.Update on a 100 ms local lease succeeds
// (with a fixed margin every call would fail after 10 attempts, each
// refused as "about to expire"): the default safety margin scales down
// with the lease's TTL.
func TestUpdateShortLease(t *testing.T) {
	ctx := context.Background()
	counter := cas.NewTyped(newFencedMap(), cas.JSON[int]())
	locker := hybrid.NewLocalLocker(100 * time.Millisecond)
	var attempts, expiring int
	for i := range 10 {
		n, _, err := hybrid.Update(ctx, locker, counter, "k", func(n int, _ bool) (int, error) { return n + 1, nil },
			occ.WithObserver(occ.ObserverFuncs{
				Attempt: func(_ context.Context, a occ.Attempt) {
					attempts++
					if errors.Is(a.Err, hybrid.ErrLeaseExpiring) {
						expiring++
					}
				},
			}))
		if err != nil {
			t.Fatalf("update %d on a 100ms lease: %v", i, err)
		}
		if n != i+1 {
			t.Fatalf("update %d wrote %d, want %d", i, n, i+1)
		}
	}
	t.Logf("10 updates in %d attempts, %d refused as about to expire", attempts, expiring)
}

// TestLeaseLostBeforeWrite: a holder paused inside its critical section
// (before the lease check) finds its lease gone and retries with a new one
// without sending the stale write.
func TestLeaseLostBeforeWrite(t *testing.T) {
	locker := hybrid.NewLocalLocker(400 * time.Millisecond)
	stock := cas.NewTyped(newFencedMap(), cas.JSON[int]())
	ctx := context.Background()
	calls := 0
	n, _, err := hybrid.Update(ctx, locker, stock, "k", func(n int, _ bool) (int, error) {
		calls++
		if calls == 1 {
			time.Sleep(600 * time.Millisecond) // past the TTL
		}
		return n + 1, nil
	})
	if err != nil || n != 1 || calls != 2 {
		t.Fatalf("Update = %d, %v after %d calls; want 1 after 2 (the first refused for a lost lease)", n, err, calls)
	}
}

func TestSafetyMargin(t *testing.T) {
	store := newFencedMap()
	// A margin larger than the TTL: every write must be refused.
	locker := hybrid.WithSafetyMargin(hybrid.NewLocalLocker(time.Second), 2*time.Second)
	stock := cas.NewTyped(store, cas.JSON[int]())
	_, _, err := hybrid.Update(context.Background(), locker, stock, "k", func(n int, _ bool) (int, error) { return n + 1, nil },
		occ.WithMaxAttempts(2))
	if !errors.Is(err, hybrid.ErrLeaseExpiring) || !errors.Is(err, occ.ErrAttemptsExhausted) {
		t.Fatalf("Update with margin > TTL: %v, want ErrLeaseExpiring after 2 attempts", err)
	}
	if _, err := store.Get(context.Background(), "k"); !errors.Is(err, cas.ErrNotFound) {
		t.Fatalf("a refused write was sent: %v", err)
	}
}

// untimedLocker grants leases that do not report their expiry.
type untimedLocker struct{ hybrid.Locker }

type untimedLease struct{ l hybrid.Lease }

func (u untimedLease) Token() uint64                     { return u.l.Token() }
func (u untimedLease) Context() context.Context          { return u.l.Context() }
func (u untimedLease) Release(ctx context.Context) error { return u.l.Release(ctx) }

func (u untimedLocker) Acquire(ctx context.Context, key string) (hybrid.Lease, error) {
	g, err := u.Locker.Acquire(ctx, key)
	if err != nil {
		return nil, err
	}
	return untimedLease{g}, nil
}

// TestNoExpiryNoMarginCheck: a lease that does not say when it expires is
// not refused for time, whatever the margin (no expiry is invented for it).
func TestNoExpiryNoMarginCheck(t *testing.T) {
	locker := hybrid.WithSafetyMargin(untimedLocker{hybrid.NewLocalLocker(time.Second)}, time.Hour)
	stock := cas.NewTyped(newFencedMap(), cas.JSON[int]())
	g, err := locker.Acquire(context.Background(), "other")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := g.(hybrid.ExpiringLease); ok {
		t.Fatal("WithSafetyMargin made a lease without an expiry an ExpiringLease")
	}
	g.Release(context.Background())
	n, _, err := hybrid.Update(context.Background(), locker, stock, "k", func(n int, _ bool) (int, error) { return n + 1, nil },
		occ.WithMaxAttempts(1))
	if err != nil || n != 1 {
		t.Fatalf("Update with an untimed lease and a margin of an hour = %d, %v; want 1, nil", n, err)
	}
}

func TestNotFenced(t *testing.T) {
	type plain struct{ cas.Store }
	stock := cas.NewTyped[int](plain{newFencedMap()}, cas.JSON[int]())
	_, _, err := hybrid.Update(context.Background(), hybrid.NewLocalLocker(time.Second), stock, "k",
		func(n int, _ bool) (int, error) { return n + 1, nil })
	if !errors.Is(err, hybrid.ErrNotFenced) {
		t.Fatalf("Update on an unfenced store: %v, want ErrNotFenced", err)
	}
}

// ambiguousWhenCancelled applies its first fenced write, then waits until
// the write's context ends and reports the outcome unknown: what an
// adapter does when a write's context ends while its answer is on the way.
type ambiguousWhenCancelled struct {
	*fencedMap
	armed atomic.Bool
}

func (s *ambiguousWhenCancelled) CompareAndSwapFenced(ctx context.Context, key string, expected cas.Version, token uint64, value []byte) (cas.Version, error) {
	v, err := s.fencedMap.CompareAndSwapFenced(ctx, key, expected, token, value)
	if err != nil || !s.armed.CompareAndSwap(true, false) {
		return v, err
	}
	select {
	case <-ctx.Done():
		return 0, &cas.AmbiguousError{Op: "compare-and-swap", Key: key, Err: ctx.Err()}
	case <-time.After(400 * time.Millisecond): // past the lease's TTL
		return v, nil
	}
}

// TestLeaseLostDuringWriteAppliesOnce: the lease ends while the fenced
// write is on its way. The write must not be cancelled into an ambiguous
// outcome and then retried with a new lease (found by the lease-fault run:
// one reported increment applied twice); exactly one increment lands.
func TestLeaseLostDuringWriteAppliesOnce(t *testing.T) {
	s := &ambiguousWhenCancelled{fencedMap: newFencedMap()}
	s.armed.Store(true)
	counter := cas.NewTyped[int64](s, cas.JSON[int64]())
	locker := hybrid.NewLocalLocker(200 * time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, _, err := hybrid.Update(ctx, locker, counter, "k", func(n int64, _ bool) (int64, error) { return n + 1, nil })
	n, _, gerr := counter.Get(ctx, "k")
	if gerr != nil {
		t.Fatal(gerr)
	}
	switch {
	case err == nil && n != 1:
		t.Errorf("one successful increment left the counter at %d: the write was applied twice", n)
	case err != nil && !errors.Is(err, cas.ErrAmbiguous):
		t.Errorf("hybrid.Update: %v, want success or cas.ErrAmbiguous", err)
	case err != nil && n > 1:
		t.Errorf("ambiguous increment left the counter at %d", n)
	}
}
