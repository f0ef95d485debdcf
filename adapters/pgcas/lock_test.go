package pgcas_test

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/occkit/occkit/adapters/pgcas"
	"github.com/occkit/occkit/hybrid"
	"github.com/occkit/occkit/internal/pgtest"
)

func locker(t *testing.T, pool *pgxpool.Pool, cfg pgcas.LockerConfig) *pgcas.Locker {
	t.Helper()
	l, err := pgcas.NewLocker(pool, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.CreateTokenCounter(context.Background()); err != nil {
		t.Fatal(err)
	}
	return l
}

func TestUpdateLocked(t *testing.T) {
	ctx := context.Background()
	s := newStore(t, pgcas.Config{})
	incr := func(cur []byte, exists bool) ([]byte, error) {
		n := 0
		if exists {
			n, _ = strconv.Atoi(string(cur))
		}
		return []byte(strconv.Itoa(n + 1)), nil
	}
	var wg sync.WaitGroup
	if _, err := s.UpdateLocked(ctx, "n", incr); err != nil {
		t.Fatal(err)
	}
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 10 {
				if _, err := s.UpdateLocked(ctx, "n", incr); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	it, err := s.Get(ctx, "n")
	if err != nil || string(it.Value) != "41" {
		t.Fatalf("get = %q, %v; want 41", it.Value, err)
	}
}

// killHolder terminates the backend holding the advisory lock of key
// (taken by a locker on the default sequence).
func killHolder(t *testing.T, pool *pgxpool.Pool, key string) {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), `SELECT count(pg_terminate_backend(pid)) FROM pg_locks
		WHERE locktype = 'advisory' AND granted AND objsubid = 1
		AND (classid::bigint << 32 | objid::bigint) = hashtextextended($1, 'occkit_lock_token'::regclass::oid::bigint)`,
		key).Scan(&n); err != nil || n != 1 {
		t.Fatalf("terminated %d holders of %q, %v; want 1", n, key, err)
	}
}

// uniqueKey returns a lock key unique to the test: the server may be
// shared.
func uniqueKey(t *testing.T, pool *pgxpool.Pool) string {
	t.Helper()
	var key string
	if err := pool.QueryRow(context.Background(), `SELECT current_schema()`).Scan(&key); err != nil {
		t.Fatal(err)
	}
	return key
}

// Regression: a transaction lease never cancelled its Context when it
// lost its lock; only session leases were checked.
func TestLockerTransactionLeaseLoss(t *testing.T) {
	ctx := context.Background()
	const interval = 20 * time.Millisecond
	pool := pgtest.Pool(t)
	l := locker(t, pool, pgcas.LockerConfig{Transaction: true, CheckInterval: interval})
	key := uniqueKey(t, pool)
	held, err := l.Acquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = held.Release(ctx) }) // on failure; a no-op after the Release below
	// While held, work under the lock and the checks do not disturb
	// each other.
	tx := held.(*pgcas.Lease).Tx()
	for deadline := time.Now().Add(10 * interval); time.Now().Before(deadline); {
		var one int
		if err := tx.QueryRow(ctx, `SELECT 1`).Scan(&one); err != nil {
			t.Fatalf("work under the lock: %v", err)
		}
	}
	if err := held.Context().Err(); err != nil {
		t.Fatalf("context of a held lease: %v (%v)", err, context.Cause(held.Context()))
	}

	// Fault: the backend holding the lock is killed.
	killed := time.Now()
	killHolder(t, pool, key)
	select {
	case <-held.Context().Done():
		t.Logf("context cancelled %v after the kill", time.Since(killed))
	case <-time.After(5 * time.Second):
		t.Fatal("transaction lease context not cancelled after its backend was killed")
	}
	if !errors.Is(context.Cause(held.Context()), hybrid.ErrLeaseLost) {
		t.Fatalf("cause = %v", context.Cause(held.Context()))
	}
	next, err := l.Acquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = next.Release(ctx) })
	if next.Token() <= held.Token() {
		t.Fatalf("token %d after %d", next.Token(), held.Token())
	}
	if err := held.Release(ctx); !errors.Is(err, hybrid.ErrLeaseLost) {
		t.Fatalf("release of a lost lease: %v", err)
	}
	// A transaction ended through Tx ends the lock too.
	if err := next.(*pgcas.Lease).Tx().Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-next.Context().Done():
	case <-time.After(5 * time.Second):
		t.Fatal("context not cancelled after the lease's transaction was rolled back")
	}
	if err := next.Release(ctx); !errors.Is(err, hybrid.ErrLeaseLost) {
		t.Fatalf("release after the rollback: %v", err)
	}
}

// Regression: a check timed out after CheckInterval, so a short interval
// reported held locks lost.
func TestLockerShortCheckInterval(t *testing.T) {
	ctx := context.Background()
	for _, xact := range []bool{false, true} {
		t.Run(map[bool]string{false: "Session", true: "Transaction"}[xact], func(t *testing.T) {
			pool := pgtest.Pool(t)
			l := locker(t, pool, pgcas.LockerConfig{Transaction: xact, CheckInterval: 50 * time.Microsecond})
			lease, err := l.Acquire(ctx, "k")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = lease.Release(ctx) })
			time.Sleep(300 * time.Millisecond)
			if err := lease.Context().Err(); err != nil {
				t.Fatalf("held lease cancelled: %v", context.Cause(lease.Context()))
			}
			if err := lease.Release(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// Regression: the lock key ignored the token sequence, so lockers with
// different sequences shared locks while drawing tokens from different
// sequences: the tokens of a lock's grants did not grow. The sequence
// (LockerConfig.TokenCounter) is now the lock's namespace.
func TestLockerTokenCounterIsNamespace(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.Pool(t)
	schema := uniqueKey(t, pool)
	a := locker(t, pool, pgcas.LockerConfig{TokenCounter: "a_tokens"})
	b := locker(t, pool, pgcas.LockerConfig{TokenCounter: "b_tokens"})
	sameAsA := locker(t, pool, pgcas.LockerConfig{Schema: schema, TokenCounter: "a_tokens"})
	key := schema // unique to this test

	held, err := a.Acquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	other, err := b.Acquire(wctx, key)
	if err != nil {
		t.Fatalf("a locker with another sequence waits for the lock: %v", err)
	}
	if err := other.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// The same sequence, named with its schema: the same lock.
	wctx, cancel = context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if _, err := sameAsA.Acquire(wctx, key); err == nil {
		t.Fatal("the same sequence named another way does not share the lock")
	}
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	next, err := sameAsA.Acquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	defer next.Release(ctx)
	if next.Token() <= held.Token() {
		t.Fatalf("token %d after %d", next.Token(), held.Token())
	}
}

// TestCloseFreesLocks: Close ends the leases still held, of both kinds,
// and frees their locks at once (another locker gets the key without
// waiting for a check), and ends an Acquire waiting for a lock. A
// transaction lease's Tx fails after Close; its Release still gives the
// connection back (the pool's Close, in the cleanup, would wait for it).
func TestCloseFreesLocks(t *testing.T) {
	ctx := context.Background()
	for _, xact := range []bool{false, true} {
		t.Run(map[bool]string{false: "session", true: "transaction"}[xact], func(t *testing.T) {
			pool := pgtest.Pool(t)
			key := uniqueKey(t, pool)
			l := locker(t, pool, pgcas.LockerConfig{Transaction: xact, CheckInterval: time.Hour})
			other := locker(t, pool, pgcas.LockerConfig{})
			held, err := l.Acquire(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			held2, err := other.Acquire(ctx, key+"-2")
			if err != nil {
				t.Fatal(err)
			}
			waiting := make(chan error, 1)
			go func() {
				g, err := l.Acquire(ctx, key+"-2")
				if err == nil {
					_ = g.Release(ctx)
				}
				waiting <- err
			}()
			time.Sleep(100 * time.Millisecond) // the Acquire waits for key-2
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			if err := <-waiting; !errors.Is(err, hybrid.ErrLeaseLost) {
				t.Errorf("a waiting Acquire ended with %v, want an error matching hybrid.ErrLeaseLost (locker closed)", err)
			}
			if cause := context.Cause(held.Context()); !errors.Is(cause, hybrid.ErrLeaseLost) {
				t.Fatalf("a lease of the closed locker ended with %v", cause)
			}
			if xact {
				if _, err := held.(*pgcas.Lease).Tx().Exec(ctx, `SELECT 1`); err == nil {
					t.Error("the Tx of a lease ended by Close still works")
				}
			}
			wctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			defer cancel()
			next, err := other.Acquire(wctx, key)
			if err != nil {
				t.Fatalf("the lock of a closed locker's lease is still held: %v", err)
			}
			if err := next.Release(ctx); err != nil {
				t.Fatal(err)
			}
			if err := held.Release(ctx); !errors.Is(err, hybrid.ErrLeaseLost) {
				t.Fatalf("Release after Close: %v, want hybrid.ErrLeaseLost", err)
			}
			if err := held.Release(ctx); err != nil {
				t.Fatalf("second Release after Close: %v, want nil", err)
			}
			if err := held2.Release(ctx); err != nil {
				t.Fatal(err)
			}
			if err := l.Close(); err != nil {
				t.Fatalf("second Close: %v", err)
			}
		})
	}
}
