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
	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/internal/pgtest"
)

func locker(t *testing.T, pool *pgxpool.Pool, cfg pgcas.LockerConfig) *pgcas.AdvisoryLocker {
	t.Helper()
	l, err := pgcas.NewAdvisoryLocker(pool, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.CreateSequence(context.Background()); err != nil {
		t.Fatal(err)
	}
	return l
}

func TestAdvisoryLockerExcludes(t *testing.T) {
	for _, xact := range []bool{false, true} {
		t.Run(map[bool]string{false: "Session", true: "Transaction"}[xact], func(t *testing.T) {
			ctx := context.Background()
			pool := pgtest.Pool(t, func(c *pgxpool.Config) { c.MaxConns = 8 })
			l := locker(t, pool, pgcas.LockerConfig{Transaction: xact, CheckInterval: 50 * time.Millisecond})
			const workers, rounds = 4, 10
			var (
				mu      sync.Mutex
				holders int
				last    uint64
				wg      sync.WaitGroup
			)
			for range workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range rounds {
						lease, err := l.Acquire(ctx, "k")
						if err != nil {
							t.Error(err)
							return
						}
						mu.Lock()
						holders++
						if holders != 1 || lease.Token() <= last {
							t.Errorf("holders = %d, token %d after %d", holders, lease.Token(), last)
						}
						last = lease.Token()
						mu.Unlock()
						time.Sleep(time.Millisecond)
						mu.Lock()
						holders--
						mu.Unlock()
						if err := lease.Release(ctx); err != nil {
							t.Error(err)
						}
						if lease.Context().Err() == nil {
							t.Error("context not cancelled by Release")
						}
					}
				}()
			}
			wg.Wait()
			// Other keys are independent.
			a, err := l.Acquire(ctx, "a")
			if err != nil {
				t.Fatal(err)
			}
			b, err := l.Acquire(ctx, "b")
			if err != nil {
				t.Fatal(err)
			}
			a.Release(ctx)
			b.Release(ctx)
		})
	}
}

func TestAdvisoryLockerCancelAndLoss(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.Pool(t)
	l := locker(t, pool, pgcas.LockerConfig{CheckInterval: 20 * time.Millisecond})
	var key string // unique to this test: the server may be shared
	if err := pool.QueryRow(ctx, `SELECT current_schema()`).Scan(&key); err != nil {
		t.Fatal(err)
	}
	held, err := l.Acquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if _, err := l.Acquire(wctx, key); err == nil {
		t.Fatalf("acquire of a held lock with a deadline: %v", err)
	}

	// Fault: the session holding the lock is killed. The lease's context
	// says so, and another holder gets the lock with a larger token.
	if _, err := pool.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_locks
		WHERE locktype = 'advisory' AND granted AND objsubid = 1
		AND (classid::bigint << 32 | objid::bigint) = hashtextextended($1, 0)`, key); err != nil {
		t.Fatal(err)
	}
	select {
	case <-held.Context().Done():
	case <-time.After(5 * time.Second):
		t.Fatal("lease context not cancelled after its session was killed")
	}
	if !errors.Is(context.Cause(held.Context()), pgcas.ErrLeaseLost) {
		t.Fatalf("cause = %v", context.Cause(held.Context()))
	}
	next, err := l.Acquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if next.Token() <= held.Token() {
		t.Fatalf("token %d after %d", next.Token(), held.Token())
	}
	if err := held.Release(ctx); !errors.Is(err, pgcas.ErrLeaseLost) {
		t.Fatalf("release of a lost lease: %v", err)
	}
	if err := next.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := next.Release(ctx); err == nil {
		t.Fatal("second release succeeded")
	}
}

// The fencing token of a lease, checked by the store, stops a holder that
// lost its lock from overwriting the next holder's write.
func TestAdvisoryLeaseFencesStore(t *testing.T) {
	ctx := context.Background()
	s := newStore(t, pgcas.Config{})
	l := locker(t, s.Pool(), pgcas.LockerConfig{})
	first, _ := l.Acquire(ctx, "k")
	first.Release(ctx) // pretend it paused and lost the lock
	second, _ := l.Acquire(ctx, "k")
	defer second.Release(ctx)
	v, err := s.CompareAndSwapFenced(ctx, "k", 0, second.Token(), []byte("second"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.CompareAndSwapFenced(ctx, "k", v, first.Token(), []byte("first, late")); !errors.Is(err, cas.ErrFenced) {
		t.Fatalf("late write of the old holder: %v, want ErrFenced", err)
	}
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
