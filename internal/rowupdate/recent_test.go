package rowupdate

import (
	"context"
	"errors"
	"reflect"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/occkit/occkit/cas"
)

// listRow holds a slice: the row a Modify returns shares it with the
// state the bridge holds.
type listRow struct {
	ID    string
	Items []int
	V     cas.Version
}

// flatRow holds no references.
type flatRow struct {
	ID string
	N  int
	V  cas.Version
}

// fakeTable is one row behind a Driver: its first writes are beaten by a
// writer elsewhere (bumps, each adding 1000 to the row), so that calls
// conflict, and it counts its reads. Its round trips take 100 µs, enough
// for occ's turns to open a line.
type fakeTable[T any] struct {
	mu    sync.Mutex
	row   T
	ver   cas.Version
	bumps int
	bump  func(*T)
	clone func(T) T
	reads atomic.Int64
}

func (db *fakeTable[T]) driver(setV func(*T, cas.Version)) Driver[T] {
	return Driver[T]{
		Read: func(ctx context.Context, key any) (Row[T], error) {
			time.Sleep(100 * time.Microsecond)
			db.reads.Add(1)
			db.mu.Lock()
			defer db.mu.Unlock()
			return Row[T]{Value: db.clone(db.row), Version: db.ver}, nil
		},
		Write: func(ctx context.Context, key any, expected cas.Version, next T) (Row[T], Row[T], error) {
			time.Sleep(100 * time.Microsecond)
			db.mu.Lock()
			defer db.mu.Unlock()
			if db.bumps > 0 {
				db.bumps--
				db.ver++
				db.bump(&db.row)
			}
			if expected != db.ver {
				return Row[T]{}, Row[T]{Value: db.clone(db.row), Version: db.ver}, &cas.ConflictError{Key: "a", Expected: expected, HasCurrent: true}
			}
			db.ver++
			db.row = db.clone(next)
			setV(&next, db.ver)
			return Row[T]{Value: next, Version: db.ver}, Row[T]{}, nil // the row given, as the SQL tables return it
		},
		SetVersion: func(r *T, v cas.Version) error { setV(r, v); return nil },
	}
}

// TestRowsWithReferencesKeepNoState: occ keeps the state a hot row's
// last write left for the process's next Modify only when the row type
// holds no references. A row with a slice shares it with the row Modify
// returned, and with a cur that mutate changed in place before failing:
// kept, either would be what the next Modify starts from.
func TestRowsWithReferencesKeepNoState(t *testing.T) {
	ctx := context.Background()
	db := &fakeTable[listRow]{row: listRow{ID: "a", Items: []int{0}}, ver: 1, bumps: 2,
		bump:  func(r *listRow) { r.Items = []int{r.Items[0] + 1000} },
		clone: func(r listRow) listRow { r.Items = append([]int(nil), r.Items...); return r }}
	rows := New(db.driver(func(r *listRow, v cas.Version) { r.V = v }))
	if rows.KeepValues() {
		t.Error("a row with a slice: KeepValues true")
	}
	k := Key[listRow]{Text: "a", Value: "a"}
	add := func(a listRow, _ bool) (listRow, error) {
		a.Items = []int{a.Items[0] + 1}
		return a, nil
	}
	got, err := rows.Modify(ctx, k, add) // two conflicts: a line
	if err != nil {
		t.Fatal(err)
	}
	got.Items[0] = -7 // the caller changes its row
	refused := errors.New("refused")
	if _, err := rows.Modify(ctx, k, func(a listRow, _ bool) (listRow, error) {
		a.Items[0] -= 50 // in place, then refuses
		return a, refused
	}); !errors.Is(err, refused) {
		t.Fatal(err)
	}
	if _, err := rows.Modify(ctx, k, add); err != nil {
		t.Fatal(err)
	}
	if db.row.Items[0] != 2002 {
		t.Fatalf("row %d, want 2002", db.row.Items[0])
	}
}

// TestFlatRowsKeepState: a flat row's last write serves the process's
// next Modify of it, which reads nothing.
func TestFlatRowsKeepState(t *testing.T) {
	ctx := context.Background()
	db := &fakeTable[flatRow]{row: flatRow{ID: "a"}, ver: 1, bumps: 2,
		bump:  func(r *flatRow) { r.N += 1000 },
		clone: func(r flatRow) flatRow { return r }}
	rows := New(db.driver(func(r *flatRow, v cas.Version) { r.V = v }))
	if !rows.KeepValues() {
		t.Fatal("a flat row: KeepValues false")
	}
	k := Key[flatRow]{Text: "a", Value: "a"}
	add := func(a flatRow, _ bool) (flatRow, error) {
		a.N++
		return a, nil
	}
	if _, err := rows.Modify(ctx, k, add); err != nil { // two conflicts: a line
		t.Fatal(err)
	}
	r0 := db.reads.Load()
	got, err := rows.Modify(ctx, k, add)
	if err != nil || got.N != 2002 {
		t.Fatalf("Modify: %+v, %v; want N 2002", got, err)
	}
	if n := db.reads.Load() - r0; n != 0 {
		t.Fatalf("the Modify after a line read the row %d times, want 0", n)
	}
}

func TestFlat(t *testing.T) {
	type inner struct{ A [3]int }
	for _, c := range []struct {
		v    any
		want bool
	}{
		{flatRow{}, true}, {inner{}, true}, {struct{ S string }{}, true},
		{listRow{}, false}, {struct{ M map[string]int }{}, false}, {struct{ P *int }{}, false},
		{struct{ A [2][]byte }{}, false}, {struct{ I any }{}, false},
	} {
		if got := flat(reflect.TypeOf(c.v)); got != c.want {
			t.Errorf("flat(%T) = %v, want %v", c.v, got, c.want)
		}
	}
}
