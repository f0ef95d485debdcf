package pgcas_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/occkit/occkit/adapters/pgcas"
	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/internal/pgtest"
	"github.com/occkit/occkit/occ"
)

// rivalWrite starts write on its own goroutine, as a writer in another
// process getting in between a call's read and its write, and gives it
// 200 ms: enough unless the row is held (then it writes once the holder
// commits, after the call's mutate returned).
func rivalWrite(wg *sync.WaitGroup, write func()) {
	done := make(chan struct{})
	wg.Go(func() {
		defer close(done)
		write()
	})
	select {
	case <-done:
	case <-time.After(200 * time.Millisecond):
	}
}

// exclusiveAttempt returns an observer that records the number of the
// attempt that ran exclusively (Attempt.Exclusive), and that number.
func exclusiveAttempt(t *testing.T) (occ.Observer, *atomic.Int64) {
	var at atomic.Int64
	return occ.ObserverFuncs{Attempt: func(_ context.Context, a occ.Attempt) {
		if a.Exclusive && !at.CompareAndSwap(0, int64(a.Number)) {
			t.Errorf("attempts %d and %d both ran exclusively", at.Load(), a.Number)
		}
	}}, &at
}

// TestEscalatesAfterTheStoresCount: a Store and a Table tell occ to
// escalate sooner than occ.DefaultExclusiveAfter (cas.ExclusiveAfterHint),
// since an exclusive attempt on PostgreSQL costs what an optimistic one
// does. A call whose every optimistic write loses to a writer elsewhere
// runs its attempt after Store.ExclusiveAfter() lost writes exclusively,
// and wins it; occ.WithExclusiveAfter still overrides the store.
func TestEscalatesAfterTheStoresCount(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.Pool(t)
	s := storeOn(t, pool, pgcas.Config{})
	n := s.ExclusiveAfter()
	if n <= 0 || n >= occ.DefaultExclusiveAfter {
		t.Fatalf("Store.ExclusiveAfter() = %d, want a count below occ.DefaultExclusiveAfter (%d)", n, occ.DefaultExclusiveAfter)
	}
	var _ cas.ExclusiveAfterHint = s

	t.Run("store", func(t *testing.T) {
		counters := cas.NewTyped(cas.Store(s), cas.JSON[int]())
		for _, tc := range []struct {
			name string
			opts []occ.Option
			want int // the exclusive attempt's number
		}{{"hint", nil, n + 1}, {"option-wins", []occ.Option{occ.WithExclusiveAfter(2)}, 3}} {
			t.Run(tc.name, func(t *testing.T) {
				key := "esc-" + tc.name
				var wg sync.WaitGroup
				var rivals atomic.Int64
				obs, at := exclusiveAttempt(t)
				_, _, err := occ.Update(ctx, counters, key, func(v int, _ bool) (int, error) {
					rivalWrite(&wg, func() {
						if _, _, err := occ.Update(ctx, counters, key, func(v int, _ bool) (int, error) { return v + 1, nil },
							occ.WithTurns(false), occ.WithExclusiveAfter(0), occ.WithMaxAttempts(1000)); err != nil {
							t.Errorf("the writer elsewhere: %v", err)
							return
						}
						rivals.Add(1)
					})
					return v + 1, nil
				}, append([]occ.Option{occ.WithObserver(obs)}, tc.opts...)...)
				wg.Wait()
				if err != nil || at.Load() != int64(tc.want) {
					t.Fatalf("Update: %v, exclusive attempt %d; want success at exclusive attempt %d", err, at.Load(), tc.want)
				}
				got, _, err := counters.Get(ctx, key)
				if err != nil || got != int(rivals.Load())+1 {
					t.Fatalf("counter %d (%v), want the writer elsewhere's %d + 1", got, err, rivals.Load())
				}
			})
		}
	})

	t.Run("table", func(t *testing.T) {
		tbl := inventory(t, pool)
		if _, err := tbl.Insert(ctx, item{SKU: "hot", Name: "lamp", Stock: 1_000}); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		var rivals atomic.Int64
		obs, at := exclusiveAttempt(t)
		_, err := tbl.Modify(ctx, "hot", func(cur item, _ bool) (item, error) {
			rivalWrite(&wg, func() {
				if _, err := tbl.Modify(ctx, "hot", func(cur item, _ bool) (item, error) { cur.Stock--; return cur, nil },
					occ.WithTurns(false), occ.WithExclusiveAfter(0), occ.WithMaxAttempts(1000)); err != nil {
					t.Errorf("the writer elsewhere: %v", err)
					return
				}
				rivals.Add(1)
			})
			cur.Stock--
			return cur, nil
		}, occ.WithObserver(obs))
		wg.Wait()
		if err != nil || at.Load() != int64(n+1) {
			t.Fatalf("Modify: %v, exclusive attempt %d; want success at exclusive attempt %d", err, at.Load(), n+1)
		}
		got, err := tbl.Get(ctx, "hot")
		if err != nil || got.Stock != 1_000-int(rivals.Load())-1 {
			t.Fatalf("stock %d (%v), want 1000 - the writer elsewhere's %d - 1", got.Stock, err, rivals.Load())
		}
	})
}
