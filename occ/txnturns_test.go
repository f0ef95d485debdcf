package occ

import (
	"context"
	"errors"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/occkit/occkit/adapters/memcas"
	"github.com/occkit/occkit/cas"
)

// slowCommitter is memcas with a round trip's latency on every call, as
// a networked store with Commit and GetMany has.
type slowCommitter struct {
	*memcas.Store
	rtt time.Duration
}

func (s slowCommitter) Get(ctx context.Context, key string) (cas.Item, error) {
	time.Sleep(s.rtt)
	return s.Store.Get(ctx, key)
}

func (s slowCommitter) GetMany(ctx context.Context, keys []string) ([]cas.Item, error) {
	time.Sleep(s.rtt)
	return s.Store.GetMany(ctx, keys)
}

func (s slowCommitter) Commit(ctx context.Context, ops []cas.Op) ([]cas.Version, error) {
	time.Sleep(s.rtt)
	return s.Store.Commit(ctx, ops)
}

// attemptCounter counts the attempts and the calls that failed.
type attemptCounter struct {
	attempts, calls, failed atomic.Int64
}

func (a *attemptCounter) ObserveAttempt(context.Context, Attempt) { a.attempts.Add(1) }
func (a *attemptCounter) ObserveCall(_ context.Context, c Call) {
	a.calls.Add(1)
	if c.Err != nil {
		a.failed.Add(1)
	}
}

// runTransfers runs workers × per transfers of 1 between two hot accounts
// (either way) and returns the attempts per call; it fails the test if a
// call failed or the total changed.
func runTransfers(t *testing.T, workers, per int, opts ...Option) float64 {
	t.Helper()
	ctx := context.Background()
	s := slowCommitter{Store: memcas.New(), rtt: 200 * time.Microsecond}
	for _, k := range []string{"a", "b"} {
		if _, err := s.CompareAndSwap(ctx, k, 0, []byte("1000")); err != nil {
			t.Fatal(err)
		}
	}
	var obs attemptCounter
	opts = append(opts, WithObserver(&obs))
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 1))
			for range per {
				from, to := "a", "b"
				if rng.IntN(2) == 0 {
					from, to = to, from
				}
				err := Txn(ctx, s, func(tx *Tx) error {
					if err := tx.Prefetch(from, to); err != nil {
						return err
					}
					fv, _, err := tx.Get(from)
					if err != nil {
						return err
					}
					tv, _, err := tx.Get(to)
					if err != nil {
						return err
					}
					f, _ := strconv.Atoi(string(fv))
					g, _ := strconv.Atoi(string(tv))
					tx.Put(from, []byte(strconv.Itoa(f-1)))
					tx.Put(to, []byte(strconv.Itoa(g+1)))
					return nil
				}, opts...)
				if err != nil {
					t.Errorf("transfer: %v", err)
					return
				}
			}
		})
	}
	wg.Wait()
	items, err := s.GetMany(ctx, []string{"a", "b"})
	if err != nil {
		t.Fatal(err)
	}
	a, _ := strconv.Atoi(string(items[0].Value))
	b, _ := strconv.Atoi(string(items[1].Value))
	if a+b != 2000 {
		t.Fatalf("a=%d b=%d: the total moved", a, b)
	}
	if n := obs.failed.Load(); n > 0 {
		t.Fatalf("%d of %d calls failed", n, obs.calls.Load())
	}
	return float64(obs.attempts.Load()) / float64(obs.calls.Load())
}

// TestTxnTurns: 8 workers transfer between two hot keys on a store with
// round trips, at default options. With turns (the default), the calls of
// the process queue for the keys instead of racing for their versions:
// no call gives up, and an attempt is rarely wasted, where the same calls
// without turns (WithTurns(false)) lose several attempts each.
func TestTxnTurns(t *testing.T) {
	with := runTransfers(t, 8, 30)
	without := runTransfers(t, 8, 30, WithTurns(false), WithMaxAttempts(1000))
	t.Logf("attempts per transfer: %.2f with turns, %.2f without", with, without)
	if with > 1.5 {
		t.Errorf("%.2f attempts per transfer with turns: the process's calls still race for the keys", with)
	}
	if without < with {
		t.Errorf("without turns %.2f attempts per transfer, with %.2f: the test no longer shows what turns do", without, with)
	}
}

// TestTxnTurnsMixed: transactions over overlapping key sets ({a,b},
// {b,c}, {a,c}) and single-key Updates of b run together on a store with
// round trips: turns taken in key order never deadlock (every call ends
// well before the deadline, no line waits out its bound), and nothing is
// lost.
func TestTxnTurnsMixed(t *testing.T) {
	// A wait leaves a line that has not moved for 5 s, not the default
	// 100 ms: a holder descheduled that long on a loaded machine is not a
	// deadlock, while calls waiting for each other still leave stuck
	// lines well before the deadline.
	holdLimit = 5 * time.Second
	t.Cleanup(func() { holdLimit = 0 })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s := slowCommitter{Store: memcas.New(), rtt: 200 * time.Microsecond}
	keys := []string{"a", "b", "c"}
	for _, k := range keys {
		if _, err := s.CompareAndSwap(ctx, k, 0, []byte("1000")); err != nil {
			t.Fatal(err)
		}
	}
	pairs := [][2]string{{"a", "b"}, {"b", "c"}, {"c", "a"}, {"b", "a"}}
	counter := cas.NewTyped[int](s, cas.JSON[int]())
	var wg sync.WaitGroup
	start := time.Now()
	stuck := linesLeftStuck.Load()
	for w := range 8 {
		wg.Go(func() {
			for i := range 30 {
				if w%4 == 3 {
					// Deposits of 1 into b.
					if _, _, err := Update(ctx, counter, "b", func(n int, _ bool) (int, error) { return n + 1, nil }); err != nil {
						t.Errorf("update: %v", err)
						return
					}
					continue
				}
				p := pairs[(w+i)%len(pairs)]
				if err := Txn(ctx, s, func(tx *Tx) error {
					if err := tx.Prefetch(p[0], p[1]); err != nil {
						return err
					}
					fv, _, _ := tx.Get(p[0])
					tv, _, _ := tx.Get(p[1])
					f, _ := strconv.Atoi(string(fv))
					g, _ := strconv.Atoi(string(tv))
					tx.Put(p[0], []byte(strconv.Itoa(f-1)))
					tx.Put(p[1], []byte(strconv.Itoa(g+1)))
					return nil
				}); err != nil {
					t.Errorf("transfer %v: %v", p, err)
					return
				}
			}
		})
	}
	wg.Wait()
	if ctx.Err() != nil {
		t.Fatalf("the calls did not end within 30 s: a deadlock")
	}
	if n := linesLeftStuck.Load() - stuck; n > 0 {
		t.Fatalf("%d waits left a line that did not move: calls waited for each other", n)
	}
	total := 0
	for _, k := range keys {
		it, err := s.Get(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		n, _ := strconv.Atoi(string(it.Value))
		total += n
	}
	if want := 3000 + 2*30; total != want {
		t.Fatalf("total %d, want %d (3000 and 60 deposits)", total, want)
	}
	t.Logf("%d transfers and %d deposits in %v", 6*30, 2*30, time.Since(start).Round(time.Millisecond))
}

// rivalled is memcas whose plain commits always lose to a writer
// elsewhere (each bumps the first key it writes just before the commit
// lands), and whose CommitExclusive holds the keys (nothing can bump them
// then): a transaction that keeps losing must escalate to succeed.
type rivalled struct {
	*memcas.Store
	exclusive atomic.Int64
}

func (r *rivalled) Commit(ctx context.Context, ops []cas.Op) ([]cas.Version, error) {
	for _, op := range ops {
		if op.Kind == cas.OpPut {
			// The rival's write: same value, new version.
			if it, err := r.Store.Get(ctx, op.Key); err == nil {
				if _, err := r.Store.CompareAndSwap(ctx, op.Key, it.Version, it.Value); err != nil {
					return nil, err
				}
			}
			break
		}
	}
	return r.Store.Commit(ctx, ops)
}

func (r *rivalled) CommitExclusive(ctx context.Context, keys []string, fn func(cur []cas.Item) ([]cas.Op, error)) ([]cas.Version, error) {
	r.exclusive.Add(1)
	cur, err := r.Store.GetMany(ctx, keys)
	if err != nil {
		return nil, err
	}
	ops, err := fn(cur)
	if err != nil || len(ops) == 0 {
		return nil, err
	}
	return r.Store.Commit(ctx, ops)
}

// moveOneAB is a transaction's function that moves 1 from key a to key b.
func moveOneAB(tx *Tx) error {
	if err := tx.Prefetch("a", "b"); err != nil {
		return err
	}
	av, _, _ := tx.Get("a")
	bv, _, _ := tx.Get("b")
	a, _ := strconv.Atoi(string(av))
	b, _ := strconv.Atoi(string(bv))
	tx.Put("a", []byte(strconv.Itoa(a-1)))
	tx.Put("b", []byte(strconv.Itoa(b+1)))
	return nil
}

// TestTxnEscalates: a transaction whose commits keep losing to writers
// elsewhere runs its next attempt through cas.ExclusiveCommitter after
// DefaultTxnExclusiveAfter losses, and succeeds within the default attempt
// limit; with WithExclusiveAfter(0) it gives up.
func TestTxnEscalates(t *testing.T) {
	ctx := context.Background()
	transfer := func(s cas.Store, opts ...Option) error {
		return Txn(ctx, s, moveOneAB, opts...)
	}
	setup := func() *rivalled {
		r := &rivalled{Store: memcas.New()}
		for _, k := range []string{"a", "b"} {
			if _, err := r.Store.CompareAndSwap(ctx, k, 0, []byte("10")); err != nil {
				t.Fatal(err)
			}
		}
		return r
	}
	r := setup()
	var exclusiveAt []int
	obs := WithObserver(ObserverFuncs{Attempt: func(_ context.Context, a Attempt) {
		if a.Exclusive {
			exclusiveAt = append(exclusiveAt, a.Number)
		}
	}})
	if err := transfer(r, obs, withSleep(func(context.Context, time.Duration) error { return nil })); err != nil {
		t.Fatalf("transfer: %v", err)
	}
	if r.exclusive.Load() != 1 {
		t.Fatalf("%d exclusive commits, want 1", r.exclusive.Load())
	}
	if len(exclusiveAt) != 1 || exclusiveAt[0] != DefaultTxnExclusiveAfter+1 {
		t.Fatalf("attempts observed as exclusive: %v, want [%d] (Attempt.Exclusive)", exclusiveAt, DefaultTxnExclusiveAfter+1)
	}
	items, _ := r.Store.GetMany(ctx, []string{"a", "b"})
	if string(items[0].Value) != "9" || string(items[1].Value) != "11" {
		t.Fatalf("a=%s b=%s, want 9 and 11", items[0].Value, items[1].Value)
	}
	r = setup()
	if err := transfer(r, WithExclusiveAfter(0), withSleep(func(context.Context, time.Duration) error { return nil })); !errors.Is(err, ErrAttemptsExhausted) {
		t.Fatalf("without escalation: %v, want ErrAttemptsExhausted", err)
	}
	if r.exclusive.Load() != 0 {
		t.Fatalf("%d exclusive commits with escalation off", r.exclusive.Load())
	}
}
