package tabletest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/occ"
)

// ManyModifier is a table that modifies several rows as one optimistic
// transaction (pgcas.Table, sqlcas.Table): ModifyMany.
type ManyModifier[K any] interface {
	ModifyMany(ctx context.Context, keys []K, mutate func(cur []Row, exists []bool) ([]Row, error), opts ...occ.Option) ([]Row, error)
}

// many returns tbl as a ManyModifier, or skips the test, visibly.
func many[K any](t *testing.T, tbl Table[K]) ManyModifier[K] {
	t.Helper()
	m, ok := tbl.(ManyModifier[K])
	if !ok {
		t.Skipf("skipped: %T has no ModifyMany", tbl)
	}
	return m
}

var errRefused = errors.New("tabletest: refused by mutate")

// modifyMany: ModifyMany creates absent rows and updates present ones in
// one transaction, returns the rows as stored with new versions, and
// writes nothing when mutate refuses, changes a key, or when the keys
// repeat.
func (h Harness[K]) modifyMany(t *testing.T) {
	ctx := ctxFor(t)
	tbl := h.New(t)
	m := many(t, tbl)
	a, err := tbl.Insert(ctx, Row{ID: "a", N: 10})
	if err != nil {
		t.Fatal(err)
	}
	keys := []K{h.Key("a"), h.Key("b")}
	out, err := m.ModifyMany(ctx, keys, func(cur []Row, exists []bool) ([]Row, error) {
		if !exists[0] || exists[1] || cur[0].N != 10 || cur[1].ID != "b" {
			return nil, h.stale(!exists[0] && !exists[1] && cur[1].ID == "b", func() error {
				return fmt.Errorf("read %+v %v, want a at 10 and b absent with its key set", cur, exists)
			})
		}
		cur[0].N -= 3
		cur[1].N += 3
		return cur, nil
	}, h.retryStale()...)
	if err != nil {
		t.Fatalf("ModifyMany: %v", err)
	}
	if out[0].ID != "a" || out[0].N != 7 || tbl.VersionOf(out[0]) <= a.Version || out[1].ID != "b" || out[1].N != 3 || tbl.VersionOf(out[1]) == 0 {
		t.Fatalf("ModifyMany returned %+v", out)
	}
	for i, id := range []string{"a", "b"} {
		h.wantRow(ctx, t, tbl, id, out[i], "as ModifyMany returned it")
	}
	unchanged := func(when string) {
		t.Helper()
		for i, id := range []string{"a", "b"} {
			h.wantRow(ctx, t, tbl, id, out[i], when)
		}
	}
	if _, err := m.ModifyMany(ctx, keys, func(cur []Row, _ []bool) ([]Row, error) {
		return nil, errRefused
	}); !errors.Is(err, errRefused) {
		t.Fatalf("a refusing mutate: %v, want its error as is", err)
	}
	unchanged("after a refusal")
	if _, err := m.ModifyMany(ctx, keys, func(cur []Row, _ []bool) ([]Row, error) {
		cur[0].N = 1000 // would be written first, in key order
		cur[1].ID = "c"
		return cur, nil
	}); !errors.Is(err, cas.ErrInvalidKey) {
		t.Fatalf("a mutate that changes a key: %v, want cas.ErrInvalidKey", err)
	}
	unchanged("after a changed key")
	if _, err := m.ModifyMany(ctx, []K{h.Key("a"), h.Key("a")}, func(cur []Row, _ []bool) ([]Row, error) {
		return cur, nil
	}); !errors.Is(err, cas.ErrInvalidKey) {
		t.Fatalf("repeated keys: %v, want cas.ErrInvalidKey", err)
	}
	unchanged("after repeated keys")
}

// modifyManyTransfers: Workers goroutines move units between three rows
// (every pair, both ways) at default options: none gives up, and the
// total never changes. With StaleReads a transfer may give up after
// losing every attempt (each retry after a wait reads again, and may
// read a stale row again, or not find a row the replica has not replayed
// yet): that is logged, and it must have written nothing.
// transfer is the ModifyMany mutate of the transfer tests: one unit from
// the first row to the second.
func (h Harness[K]) transfer(cur []Row, exists []bool) ([]Row, error) {
	if !exists[0] || !exists[1] {
		return nil, h.stale(true, func() error { return fmt.Errorf("read %+v %v: a row is missing", cur, exists) })
	}
	cur[0].N--
	cur[1].N++
	return cur, nil
}

func (h Harness[K]) modifyManyTransfers(t *testing.T) {
	ctx := ctxFor(t)
	tbl := h.New(t)
	m := many(t, tbl)
	ids := []string{"x", "y", "z"}
	for _, id := range ids {
		if _, err := tbl.Insert(ctx, Row{ID: id, N: 1000}); err != nil {
			t.Fatal(err)
		}
	}
	per := max(h.Ops/2, 1)
	var failed, gaveUp atomic.Int64
	var wg sync.WaitGroup
	for w := range h.Workers {
		wg.Go(func() {
			for i := range per {
				from, to := ids[(w+i)%3], ids[(w+i+1+w%2)%3]
				if _, err := m.ModifyMany(ctx, []K{h.Key(from), h.Key(to)}, h.transfer, h.retryStale()...); err != nil {
					if h.StaleReads && errors.Is(err, occ.ErrAttemptsExhausted) && (errors.Is(err, cas.ErrConflict) || errors.Is(err, errStale)) {
						gaveUp.Add(1)
						continue
					}
					if failed.Add(1) == 1 {
						t.Errorf("transfer %s→%s: %v", from, to, err)
					}
				}
			}
		})
	}
	wg.Wait()
	h.settle(t, func() error {
		total := int64(0)
		for _, id := range ids {
			r, err := tbl.Get(ctx, h.Key(id))
			if err != nil {
				return wrong("Get(%s): %w", id, err)
			}
			total += r.N
		}
		if total != 3000 {
			// Or stale reads of the rows, from different moments.
			return fmt.Errorf("the rows hold %d in all after transfers, want 3000", total)
		}
		return nil
	})
	if n := failed.Load(); n > 0 {
		t.Fatalf("%d of %d transfers failed", n, h.Workers*per)
	}
	if n := gaveUp.Load(); n > 0 {
		t.Logf("%d of %d transfers gave up on conflicts after stale reads", n, h.Workers*per)
	}
}

// modifyManyAcrossProcesses: transfers between two hot rows through four
// tables of the same rows, as four processes whose calls take no turns
// with each other's: at default options every transfer succeeds (a
// transaction that keeps losing commits holding its rows) and the total
// holds.
func (h Harness[K]) modifyManyAcrossProcesses(t *testing.T) {
	switch {
	case h.Reopen == nil:
		t.Skip("skipped: Harness.Reopen is not set (no second table of the same rows)")
	case !h.EscalatesMany:
		t.Skip("skipped: Harness.EscalatesMany is not set (the table's ModifyMany is not escalated across processes)")
	}
	ctx := ctxFor(t)
	first := h.New(t)
	many(t, first)
	tables := []Table[K]{first}
	for range 3 {
		tables = append(tables, h.Reopen(t, first))
	}
	for _, id := range []string{"x", "y"} {
		if _, err := first.Insert(ctx, Row{ID: id, N: 1000}); err != nil {
			t.Fatal(err)
		}
	}
	per := max(h.Ops/2, 1)
	var failed atomic.Int64
	var wg sync.WaitGroup
	for w := range h.Workers {
		m := many(t, tables[w%len(tables)])
		wg.Go(func() {
			for i := range per {
				from, to := "x", "y"
				if (w+i)%2 == 1 {
					from, to = to, from
				}
				if _, err := m.ModifyMany(ctx, []K{h.Key(from), h.Key(to)}, h.transfer, h.retryStale()...); err != nil && failed.Add(1) == 1 {
					t.Errorf("transfer %s→%s: %v", from, to, err)
				}
			}
		})
	}
	wg.Wait()
	h.settle(t, func() error {
		x, err := first.Get(ctx, h.Key("x"))
		if err != nil {
			return wrong("Get(x): %w", err)
		}
		y, err := first.Get(ctx, h.Key("y"))
		if err != nil {
			return wrong("Get(y): %w", err)
		}
		if x.N+y.N != 2000 {
			return fmt.Errorf("the rows hold %d in all after transfers, want 2000", x.N+y.N)
		}
		return nil
	})
	if n := failed.Load(); n > 0 {
		t.Fatalf("%d of %d transfers failed", n, h.Workers*per)
	}
}
