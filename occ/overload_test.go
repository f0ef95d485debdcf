package occ

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/occkit/occkit/adapters/memcas"
	"github.com/occkit/occkit/cas"
)

// TestConflictStormWithinBudget: 64 goroutines hammer one key, with work
// inside the read-modify-write so that most attempts conflict. With a
// shared retry budget, retries stay within burst + ratio × calls, the
// counter still moves (every success is counted exactly once), and calls
// refused by the budget give up with ErrBudgetExhausted instead of
// multiplying the load. The calls take no turns, as if each came from a
// process of its own (turns would queue the goroutines of one process and
// leave almost nothing to retry).
func TestConflictStormWithinBudget(t *testing.T) {
	const (
		workers = 64
		calls   = 30 // per worker
		ratio   = 0.2
		burst   = 20
	)
	ctx := context.Background()
	store := memcas.New()
	counter := cas.NewTyped(store, cas.JSON[int]())
	budget, err := NewBudget(ratio, burst)
	if err != nil {
		t.Fatal(err)
	}
	var attempts, ok, refused atomic.Int64
	obs := ObserverFuncs{Call: func(_ context.Context, c Call) { attempts.Add(int64(c.Attempts)) }}
	slow := func(n int, _ bool) (int, error) {
		time.Sleep(50 * time.Microsecond) // the critical section's work
		return n + 1, nil
	}
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range calls {
				_, _, err := Update(ctx, counter, "hot", slow, WithBudget(budget), WithObserver(obs),
					WithMaxAttempts(1000), noSleep(), WithTurns(false))
				switch {
				case err == nil:
					ok.Add(1)
				case errors.Is(err, ErrBudgetExhausted) && errors.Is(err, cas.ErrConflict):
					refused.Add(1)
				default:
					t.Errorf("update: %v", err)
					return
				}
			}
		}()
	}
	wg.Wait()
	total := int64(workers * calls)
	retries := attempts.Load() - total
	bound := float64(burst) + ratio*float64(total)
	n, _, err := counter.Get(ctx, "hot")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d calls: %d succeeded, %d refused by the budget; %d retries (bound %.0f); counter %d",
		total, ok.Load(), refused.Load(), retries, bound, n)
	if float64(retries) > bound {
		t.Fatalf("%d retries exceed the budget's bound %.0f", retries, bound)
	}
	if int64(n) != ok.Load() {
		t.Fatalf("counter %d, successes %d: lost or doubled updates", n, ok.Load())
	}
	if ok.Load() < workers {
		t.Fatalf("only %d of %d calls succeeded: no progress under the storm", ok.Load(), total)
	}
	if refused.Load() == 0 {
		t.Fatalf("the budget refused nothing: the storm did not test it")
	}
}
