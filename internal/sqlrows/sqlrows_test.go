package sqlrows

import (
	"database/sql"
	"errors"
	"fmt"
	"reflect"
	"testing"

	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/internal/writeid"
)

// table is a result set held in memory, as a driver hands one over:
// Scan assigns each column to its destination's type.
type table struct {
	rows [][]any
	at   int
	err  error
}

func (t *table) Next() bool { t.at++; return t.at <= len(t.rows) }
func (t *table) Err() error { return t.err }
func (t *table) Scan(dest ...any) error {
	row := t.rows[t.at-1]
	if len(dest) != len(row) {
		return fmt.Errorf("%d destinations for %d columns", len(dest), len(row))
	}
	for i, d := range dest {
		reflect.ValueOf(d).Elem().Set(reflect.ValueOf(row[i]))
	}
	return nil
}

func TestItems(t *testing.T) {
	rows := &table{rows: [][]any{
		{"b", []byte("2"), int64(7)},
		{"B", []byte("x"), int64(9)}, // another spelling a collation matched
		{"a", []byte(nil), int64(3)},
	}}
	got, err := Items([]string{"a", "b", "c"}, rows)
	if err != nil {
		t.Fatal(err)
	}
	want := []cas.Item{{Key: "a", Value: []byte{}, Version: 3}, {Key: "b", Value: []byte("2"), Version: 7}, {Key: "c"}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Items = %v, want %v", got, want)
	}
	broken := errors.New("broken")
	if _, err := Items([]string{"a"}, &table{err: broken}); !errors.Is(err, broken) {
		t.Fatalf("Items of a failed read: %v", err)
	}
}

func TestResolve(t *testing.T) {
	id := writeid.NewSource().Next()
	other := writeid.NewSource().Next()
	ops := []cas.Op{cas.Check("c", 4), cas.Put("p", 1, []byte("v")), cas.Delete("d", 2)}
	for _, tc := range []struct {
		name string
		rows [][]any
		want []cas.Version
	}{
		{"uuid ids", [][]any{{"p", int64(5), false, any([writeid.Len]byte(id))}, {"d", int64(3), true, any([writeid.Len]byte(id))}}, []cas.Version{4, 5, 0}},
		{"byte ids", [][]any{{"p", int64(5), false, any(id[:])}, {"d", int64(3), true, any(id[:])}}, []cas.Version{4, 5, 0}},
		{"written since", [][]any{{"p", int64(6), false, any(other[:])}, {"d", int64(3), true, any(id[:])}}, nil},
		{"not a tombstone", [][]any{{"p", int64(5), false, any(id[:])}, {"d", int64(4), false, any(id[:])}}, nil},
		{"key missing", [][]any{{"p", int64(5), false, any(id[:])}}, nil},
		{"short id", [][]any{{"p", int64(5), false, any(id[:8])}, {"d", int64(3), true, any(id[:])}}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := Resolve(ops, id, &table{rows: tc.rows})
			if ok != (tc.want != nil) || !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("Resolve = %v, %v; want %v", got, ok, tc.want)
			}
		})
	}
}

func TestResolveOne(t *testing.T) {
	id := writeid.NewSource().Next()
	other := writeid.NewSource().Next()
	one := func(version int64, deleted bool, raw any) row {
		return row{t: &table{rows: [][]any{{version, deleted, raw}}}}
	}
	for _, tc := range []struct {
		name string
		row  row
		del  bool
		want cas.Version
		ok   bool
	}{
		{"uuid id", one(5, false, any([writeid.Len]byte(id))), false, 5, true},
		{"byte id", one(5, false, any(id[:])), false, 5, true},
		{"delete", one(5, true, any(id[:])), true, 0, true},
		{"written since", one(6, false, any(other[:])), false, 0, false},
		{"a put found a tombstone", one(5, true, any(id[:])), false, 0, false},
		{"a delete found a live row", one(5, false, any(id[:])), true, 0, false},
		{"short id", one(5, false, any(id[:8])), false, 0, false},
		{"no id", one(5, false, any([]byte(nil))), false, 0, false},
		{"no row", row{t: &table{}}, false, 0, false},
		{"read failed", row{err: errors.New("broken")}, false, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := ResolveOne(tc.row, id, tc.del)
			if got != tc.want || ok != tc.ok {
				t.Fatalf("ResolveOne = %v, %v; want %v, %v", got, ok, tc.want, tc.ok)
			}
		})
	}
}

func TestWrittenKeys(t *testing.T) {
	got := WrittenKeys([]cas.Op{cas.Check("c", 1), cas.Put("p", 0, nil), cas.Delete("d", 1)})
	if !reflect.DeepEqual(got, []string{"p", "d"}) {
		t.Fatalf("WrittenKeys = %v", got)
	}
}

// row is one row of a table, or the error its read failed with.
type row struct {
	t   *table
	err error
}

func (r row) Scan(dest ...any) error {
	if r.err != nil {
		return r.err
	}
	if !r.t.Next() {
		return sql.ErrNoRows
	}
	return r.t.Scan(dest...)
}

func TestItem(t *testing.T) {
	wrap := func(err error) error { return fmt.Errorf("wrapped: %w", err) }
	got, err := Item("k", row{t: &table{rows: [][]any{{[]byte(nil), int64(5)}}}}, wrap)
	if want := (cas.Item{Key: "k", Value: []byte{}, Version: 5}); err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("Item = %v, %v, want %v", got, err, want)
	}
	if _, err := Item("k", row{t: &table{}}, wrap); !errors.Is(err, cas.ErrNotFound) {
		t.Fatalf("Item of no row: %v, want cas.ErrNotFound", err)
	}
	broken := errors.New("broken")
	if _, err := Item("k", row{err: broken}, wrap); !errors.Is(err, broken) || err.Error() != "wrapped: broken" {
		t.Fatalf("Item of a failed read: %v", err)
	}
}

func TestAll(t *testing.T) {
	type pair struct {
		K string
		V int64
	}
	targets := func(p *pair) []any { return []any{&p.K, &p.V} }
	got, err := All(&table{rows: [][]any{{"a", int64(1)}, {"b", int64(2)}}}, targets)
	if want := []pair{{"a", 1}, {"b", 2}}; err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("All = %v, %v, want %v", got, err, want)
	}
	broken := errors.New("broken")
	if _, err := All(&table{err: broken}, targets); !errors.Is(err, broken) {
		t.Fatalf("All of a failed read: %v", err)
	}
}
