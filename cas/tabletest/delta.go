package tabletest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/occ"
)

// adder is the bounded delta of a column that tables may offer.
type adder[K any] interface {
	Add(ctx context.Context, key K, column string, n int64, b cas.Bounds) (Row, error)
}

// add checks a table's column deltas: the result, the new version, a
// refusal with the current value, a missing row, a column that cannot
// take a delta, and concurrent sales of more than the stock, mixed with
// Modify, of which exactly the stock succeeds.
func (h Harness[K]) add(t *testing.T) {
	ctx := ctxFor(t)
	tbl := h.New(t)
	a, ok := tbl.(adder[K])
	if !ok {
		t.Skipf("skipped: %T has no Add(ctx, key, column, n, bounds)", tbl)
	}
	in, err := tbl.Insert(ctx, Row{ID: "item", N: 5})
	if err != nil {
		t.Fatal(err)
	}
	got, err := a.Add(ctx, h.Key("item"), "n", -3, cas.AtLeast(0))
	if err != nil || got.N != 2 || tbl.VersionOf(got) <= tbl.VersionOf(in) {
		t.Fatalf("add -3 to 5 = %+v, %v; want n 2 at a version above %d", got, err, tbl.VersionOf(in))
	}
	h.wantRow(ctx, t, tbl, "item", got, "after a delta")
	// Versions are never reused: a write after a delta (and a delta after
	// a write) gets a version above the one before.
	up, err := tbl.Update(ctx, Row{ID: "item", N: got.N, Version: got.Version})
	if err != nil || tbl.VersionOf(up) <= tbl.VersionOf(got) {
		t.Fatalf("update after a delta = %+v, %v; want a version above the delta's %d", up, err, tbl.VersionOf(got))
	}
	got, err = a.Add(ctx, h.Key("item"), "n", 0, cas.Bounds{})
	if err != nil || tbl.VersionOf(got) <= tbl.VersionOf(up) || got.N != 2 {
		t.Fatalf("add 0 after an update = %+v, %v; want n 2 at a version above %d", got, err, tbl.VersionOf(up))
	}
	// A Modify that read the row before the delta conflicts: Update with
	// the old version is refused.
	if _, err := tbl.Update(ctx, Row{ID: "item", N: 100, Version: in.Version}); !errors.Is(err, cas.ErrConflict) {
		t.Fatalf("update at the version before the delta: %v, want a conflict", err)
	}
	_, err = a.Add(ctx, h.Key("item"), "n", -3, cas.AtLeast(0))
	var be *cas.BoundError
	if !errors.As(err, &be) || (be.HasCurrent && be.Current != 2) {
		t.Fatalf("add -3 to 2 within [0, +inf): %v, want a *cas.BoundError with current 2", err)
	}
	h.wantRow(ctx, t, tbl, "item", got, "after a refused delta")
	if _, err := a.Add(ctx, h.Key("none"), "n", 1, cas.Bounds{}); !errors.Is(err, cas.ErrNotFound) {
		t.Fatalf("add to a missing row: %v, want ErrNotFound", err)
	}
	for _, col := range []string{"id", "version", "nope"} {
		if _, err := a.Add(ctx, h.Key("item"), col, 1, cas.Bounds{}); err == nil {
			t.Fatalf("add to column %q succeeded", col)
		}
	}

	const stock = 100
	if _, err := tbl.Insert(ctx, Row{ID: "hot", N: stock}); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	sold, refused := 0, 0
	var wg sync.WaitGroup
	for w := range h.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range max(h.Ops/5, 10) {
				var err error
				if w%4 == 3 {
					_, err = tbl.Modify(ctx, h.Key("hot"), func(cur Row, exists bool) (Row, error) {
						if !exists {
							// The row exists: a stale read (a sale
							// refused on it would be refused wrongly).
							return cur, h.stale(true, func() error { return fmt.Errorf("the row is missing") })
						}
						if cur.N <= 0 {
							return cur, cas.ErrBound
						}
						cur.N--
						return cur, nil
					}, h.retryStale(occ.WithMaxAttempts(1000))...)
				} else {
					var r Row
					r, err = a.Add(ctx, h.Key("hot"), "n", -1, cas.AtLeast(0))
					if err == nil && r.N < 0 {
						t.Errorf("a sale left %d", r.N)
					}
				}
				mu.Lock()
				switch {
				case err == nil:
					sold++
				case errors.Is(err, cas.ErrBound):
					refused++
				default:
					t.Errorf("sale: %v", err)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if sold != min(stock, sold+refused) {
		t.Fatalf("sold %d, refused %d of %d", sold, refused, stock)
	}
	h.wantCount(ctx, t, tbl, "hot", int64(stock-sold), fmt.Sprintf("after %d sales and %d refusals of %d", sold, refused, stock))
}
