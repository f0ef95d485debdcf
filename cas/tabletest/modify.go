package tabletest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/occ"
)

// modifyHot runs Workers goroutines of Ops increments of one row through
// Modify with opts: every call must succeed (a queueing lock would have
// served each), the row must end at the number of calls, and each call
// must get back the row after its own change (distinct values 1..calls).
func (h Harness[K]) modifyHot(t *testing.T, opts ...occ.Option) {
	ctx := ctxFor(t)
	tbl := h.New(t)
	total := h.Workers * h.Ops
	seen := make([]atomic.Bool, total+1)
	var failed atomic.Int64
	var firstErr sync.Once
	var wg sync.WaitGroup
	for range h.Workers {
		wg.Go(func() {
			for range h.Ops {
				row, err := tbl.Modify(ctx, h.Key("hot"), func(cur Row, _ bool) (Row, error) {
					cur.N++
					return cur, nil
				}, opts...)
				if err != nil {
					failed.Add(1)
					firstErr.Do(func() { t.Errorf("Modify of the hot row: %v", err) })
					continue
				}
				if row.N < 1 || row.N > int64(total) || seen[row.N].Swap(true) {
					t.Errorf("a call got back n = %d: not its own increment (out of range or handed to two calls)", row.N)
				}
				if row.Version == 0 {
					t.Errorf("a call got back version 0")
				}
			}
		})
	}
	wg.Wait()
	if n := failed.Load(); n > 0 {
		t.Fatalf("%d of %d calls failed", n, total)
	}
	h.wantCount(ctx, t, tbl, "hot", int64(total), fmt.Sprintf("after %d increments", total))
}

// wantCount checks that the row with key id holds n, after what. With
// StaleReads, a lower count (or no row) is read again; a higher one is
// wrong at once.
func (h Harness[K]) wantCount(ctx context.Context, t *testing.T, tbl Table[K], id string, n int64, after string) {
	t.Helper()
	h.settle(t, func() error {
		got, err := tbl.Get(ctx, h.Key(id))
		switch {
		case errors.Is(err, cas.ErrNotFound):
			return fmt.Errorf("the row %s is missing (%v) %s", id, err, after)
		case err != nil:
			return wrong("the row %s: %w", id, err)
		case got.N != n:
			// Either way may be a stale read: counters grow, stock
			// shrinks. A value that never catches up fails after the
			// poll.
			return fmt.Errorf("the row %s is %+v %s, want n %d", id, got, after, n)
		}
		return nil
	})
}

// modifyAcrossProcesses: Workers goroutines spread over four tables of
// the same rows (four processes, as far as turns know) increment one row
// at default options. No call may give up: a call that keeps losing to
// the other processes escalates to the table's exclusive path (a row
// lock) where the backend has one.
func (h Harness[K]) modifyAcrossProcesses(t *testing.T) {
	if h.Reopen == nil {
		t.Skip("skipped: Harness.Reopen is not set (no second table of the same rows)")
	}
	ctx := ctxFor(t)
	first := h.New(t)
	tables := []Table[K]{first}
	for range 3 {
		tables = append(tables, h.Reopen(t, first))
	}
	per := max(h.Ops/2, 1)
	var failed atomic.Int64
	var wg sync.WaitGroup
	for i := range h.Workers {
		tbl := tables[i%len(tables)]
		wg.Go(func() {
			for range per {
				if _, err := tbl.Modify(ctx, h.Key("hot"), func(cur Row, _ bool) (Row, error) {
					cur.N++
					return cur, nil
				}); err != nil {
					if failed.Add(1) == 1 {
						t.Errorf("Modify: %v", err)
					}
				}
			}
		})
	}
	wg.Wait()
	total := h.Workers * per
	h.wantCount(ctx, t, first, "hot", int64(total)-failed.Load(), fmt.Sprintf("after %d increments of which %d failed", total, failed.Load()))
	if n := failed.Load(); n > 0 {
		t.Fatalf("%d of %d calls failed", n, total)
	}
}

// modifyCached: with a cache, a row this process wrote is updated
// without a read; a write behind the cache's back costs a conflict, never
// a lost update.
func (h Harness[K]) modifyCached(t *testing.T) {
	ctx := ctxFor(t)
	tbl := h.New(t)
	cache := tbl.NewCache(100)
	inc := func(cur Row, _ bool) (Row, error) { cur.N++; return cur, nil }
	const calls = 20
	for range calls {
		if _, err := tbl.Modify(ctx, h.Key("c"), inc, occ.WithCache(cache)); err != nil {
			t.Fatal(err)
		}
	}
	st := cache.Stats()
	if st.Hits < calls-1 {
		t.Fatalf("cache %+v after %d calls of one row: the calls after the first read the row", st, calls)
	}
	// Behind the cache's back.
	h.behindCache(ctx, t, tbl, "c", 100)
	row, err := tbl.Modify(ctx, h.Key("c"), inc, occ.WithCache(cache))
	if err != nil || row.N != calls+101 {
		t.Fatalf("Modify through a stale cache = %+v, %v; want n %d", row, err, calls+101)
	}
	h.wantRow(ctx, t, tbl, "c", row, "as Modify returned it")
}

// behindCache adds n to the row with key id with Get and Update, as code
// that knows no cache would. With StaleReads, an Update of a stale row
// conflicts and is made again from the current row the conflict carried
// (or from a new read when it carried none).
func (h Harness[K]) behindCache(ctx context.Context, t *testing.T, tbl Table[K], id string, n int64) {
	t.Helper()
	var cur Row
	read := func() {
		t.Helper()
		h.settle(t, func() error {
			var err error
			cur, err = tbl.Get(ctx, h.Key(id))
			switch {
			case errors.Is(err, cas.ErrNotFound):
				return fmt.Errorf("Get(%s): %w", id, err) // or a stale read
			case err != nil:
				return wrong("Get(%s): %w", id, err)
			}
			return nil
		})
	}
	read()
	deadline := time.Now().Add(staleReadWait)
	for {
		next := cur
		next.N += n
		latest, err := tbl.Update(ctx, next)
		var ce *cas.ConflictError
		switch {
		case err == nil:
			return
		case !h.StaleReads || !errors.As(err, &ce) || time.Now().After(deadline):
			t.Fatal(err)
		case ce.HasCurrent && tbl.VersionOf(latest) != 0:
			cur = latest
		default:
			read()
		}
	}
}

// modifyCancelled: callers whose contexts end at random moments while
// others combine writes of the same row. A call that failed other than
// ambiguously was not applied: the row ends between the successes and the
// successes plus the ambiguous calls.
func (h Harness[K]) modifyCancelled(t *testing.T) {
	ctx := ctxFor(t)
	tbl := h.New(t)
	cb := occ.NewCombiner()
	var ok, ambiguous, cancelled atomic.Int64
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := range 25 {
				cctx, cancel := context.WithTimeout(ctx, time.Duration((w*25+i)%7)*300*time.Microsecond)
				_, err := tbl.Modify(cctx, h.Key("x"), func(cur Row, _ bool) (Row, error) {
					cur.N++
					return cur, nil
				}, occ.WithCombiner(cb))
				cancel()
				switch {
				case err == nil:
					ok.Add(1)
				case errors.Is(err, cas.ErrAmbiguous):
					ambiguous.Add(1)
				case errors.Is(err, context.DeadlineExceeded) || cctx.Err() != nil:
					// Ended by its context (a driver may report that as
					// its own error, a dial or read timeout): not applied.
					cancelled.Add(1)
				default:
					t.Errorf("Modify: %v", err)
				}
			}
		})
	}
	wg.Wait()
	h.settle(t, func() error {
		got, err := tbl.Get(ctx, h.Key("x"))
		if errors.Is(err, cas.ErrNotFound) {
			got, err = Row{}, nil
		}
		switch {
		case err != nil:
			return wrong("Get: %w", err)
		case got.N > ok.Load()+ambiguous.Load():
			return wrong("the row is %d after %d successes, %d ambiguous and %d cancelled calls: a cancelled call was applied", got.N, ok.Load(), ambiguous.Load(), cancelled.Load())
		case got.N < ok.Load():
			// Or a stale read.
			return fmt.Errorf("the row is %d after %d successes, %d ambiguous and %d cancelled calls: a success lost", got.N, ok.Load(), ambiguous.Load(), cancelled.Load())
		}
		return nil
	})
	if cancelled.Load() == 0 {
		t.Logf("no call was cancelled (%d ok, %d ambiguous): the check was weak this run", ok.Load(), ambiguous.Load())
	}
}

// rolledBack: Insert and Modify inside the caller's own transaction,
// rolled back, leave nothing.
func (h Harness[K]) rolledBack(t *testing.T) {
	if h.InTx == nil {
		t.Skip("the table has no caller's transaction to run in")
	}
	ctx := ctxFor(t)
	tbl := h.New(t)
	before, err := tbl.Insert(ctx, Row{ID: "kept", N: 1})
	if err != nil {
		t.Fatal(err)
	}
	errRollback := errors.New("roll back")
	err = h.InTx(t, tbl, func(tx Table[K]) error {
		if _, err := tx.Insert(ctx, Row{ID: "new", N: 1}); err != nil {
			return err
		}
		for _, id := range []string{"new", "kept"} {
			if _, err := tx.Modify(ctx, h.Key(id), func(cur Row, _ bool) (Row, error) {
				cur.N += 10
				return cur, nil
			}); err != nil {
				return err
			}
		}
		return errRollback
	})
	if err != errRollback {
		t.Fatalf("the transaction's work: %v", err)
	}
	if _, err := tbl.Get(ctx, h.Key("new")); !errors.Is(err, cas.ErrNotFound) {
		t.Fatalf("a row inserted in a rolled-back transaction: %v, want cas.ErrNotFound", err)
	}
	h.wantRow(ctx, t, tbl, "kept", before, "after a rolled-back transaction")
}
