package hybrid_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync/atomic"
	"testing"
	"time"

	"github.com/occkit/occkit/adapters/memcas"
	"github.com/occkit/occkit/adapters/pgcas"
	"github.com/occkit/occkit/adapters/rediscas"
	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/hybrid"
	"github.com/occkit/occkit/internal/pgtest"
	"github.com/occkit/occkit/internal/redistest"
	"github.com/occkit/occkit/occ"
)

// countingLocker counts the Acquire calls made through it.
type countingLocker struct {
	hybrid.Locker
	acquires atomic.Int32
}

func (c *countingLocker) Acquire(ctx context.Context, key string) (hybrid.Lease, error) {
	c.acquires.Add(1)
	return c.Locker.Acquire(ctx, key)
}

// closedLocker fails every Acquire as a closed adapter locker does: with
// an error matching both hybrid.ErrLeaseLost and hybrid.ErrLockerClosed.
type closedLocker struct{}

func (closedLocker) Acquire(_ context.Context, key string) (hybrid.Lease, error) {
	return nil, fmt.Errorf("test: lock %q: %w: %w", key, hybrid.ErrLeaseLost, hybrid.ErrLockerClosed)
}

// wantEndedByClose checks that a call on a closed locker ended at its
// first Acquire with the locker's error, instead of retrying it as a lost
// lease until the attempts ran out.
func wantEndedByClose(t *testing.T, what string, err error, acquires int32) {
	t.Helper()
	if !errors.Is(err, hybrid.ErrLockerClosed) || !errors.Is(err, hybrid.ErrLeaseLost) {
		t.Errorf("%s: %v, want an error matching hybrid.ErrLockerClosed and hybrid.ErrLeaseLost", what, err)
	}
	if errors.Is(err, occ.ErrAttemptsExhausted) {
		t.Errorf("%s: %v: retried until the attempts ran out", what, err)
	}
	if acquires != 1 {
		t.Errorf("%s: %d Acquire calls, want 1", what, acquires)
	}
}

// TestUpdateAndTxnEndOnClosedLocker: Update and Txn do not retry an
// Acquire that fails because the locker is closed (no fresh lease will
// come from it), although the error also matches ErrLeaseLost.
func TestUpdateAndTxnEndOnClosedLocker(t *testing.T) {
	ctx := context.Background()
	counter := cas.NewTyped(newFencedMap(), cas.JSON[int]())
	l := &countingLocker{Locker: closedLocker{}}
	_, _, err := hybrid.Update(ctx, l, counter, "k", incr)
	wantEndedByClose(t, "Update", err, l.acquires.Swap(0))

	err = hybrid.Txn(ctx, l, memcas.New(), []string{"a", "b"}, func(tx *occ.Tx) error {
		t.Error("fn ran without leases")
		return nil
	})
	wantEndedByClose(t, "Txn", err, l.acquires.Swap(0))
}

// closableLockers makes, for each adapter locker with a Close, a fresh
// locker on the test servers.
var closableLockers = []struct {
	name string
	new  func(t *testing.T) hybrid.Locker
}{
	{"pgcas", func(t *testing.T) hybrid.Locker {
		l, err := pgcas.NewLocker(pgtest.Pool(t), pgcas.LockerConfig{})
		if err != nil {
			t.Fatal(err)
		}
		if err := l.CreateTokenCounter(context.Background()); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		return l
	}},
	{"rediscas", func(t *testing.T) hybrid.Locker {
		l, err := rediscas.NewLocker(redistest.Client(t), rediscas.LockerConfig{Prefix: redistest.Prefix(t), TTL: 2 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		return l
	}},
}

// TestAdapterLockerClosed: on the PostgreSQL and Redis lockers, an Update
// or Txn through a closed locker ends at its first Acquire, and an Update
// whose lease Close ends (the cause matches ErrLeaseLost) does not go
// back for another; both report the closed locker.
func TestAdapterLockerClosed(t *testing.T) {
	for _, tc := range closableLockers {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			counter := cas.NewTyped(memcas.New(), cas.JSON[int]())

			// Closed while an Update holds a lease.
			l := &countingLocker{Locker: tc.new(t)}
			_, _, err := hybrid.Update(ctx, l, counter, "k", func(n int, exists bool) (int, error) {
				if err := l.Locker.(io.Closer).Close(); err != nil {
					t.Errorf("Close: %v", err)
				}
				return n + 1, nil
			})
			wantEndedByClose(t, "Update whose lease Close ended", err, l.acquires.Swap(0))

			// Closed before.
			_, _, err = hybrid.Update(ctx, l, counter, "k", incr)
			wantEndedByClose(t, "Update on a closed locker", err, l.acquires.Swap(0))
			err = hybrid.Txn(ctx, l, memcas.New(), []string{"a", "b"}, func(tx *occ.Tx) error {
				t.Error("fn ran without leases")
				return nil
			})
			wantEndedByClose(t, "Txn on a closed locker", err, l.acquires.Swap(0))
			if _, v, err := counter.Get(ctx, "k"); !errors.Is(err, cas.ErrNotFound) {
				t.Errorf("key written (version %d, %v) through a closed locker", v, err)
			}
		})
	}
}
