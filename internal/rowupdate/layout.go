package rowupdate

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"

	"github.com/occkit/occkit/cas"
)

// Layout is how the rows of a SQL repository table (pgcas.Table,
// sqlcas.Table) map to T: the columns of T's fields and which of them
// are the key, the version and the fence. It reads and sets those fields
// of a row, so that both adapters' Tables share one copy of the
// reflection. Make it with NewLayout (a zero Layout names column 0 as
// its fence); it is not changed after that and is safe for concurrent
// use.
type Layout[T any] struct {
	Columns []Column
	Key     int // index into Columns
	Version int // index into Columns
	Fence   int // index into Columns; -1: no fence column
}

// NewLayout checks that T is a struct, collects its columns and finds
// the key, version and fence among them (see columns and roles): what
// NewTable of every SQL adapter does first. quote checks and quotes a
// column name.
func NewLayout[T any](quote func(name string) (string, error), keyCol, versionCol, fenceCol string) (Layout[T], error) {
	rt := reflect.TypeFor[T]()
	if rt.Kind() != reflect.Struct {
		return Layout[T]{}, fmt.Errorf("%v is not a struct", rt)
	}
	cols, err := columns(rt, quote)
	if err != nil {
		return Layout[T]{}, err
	}
	key, version, fence, err := roles(rt, cols, keyCol, versionCol, fenceCol)
	if err != nil {
		return Layout[T]{}, err
	}
	return Layout[T]{Columns: cols, Key: key, Version: version, Fence: fence}, nil
}

// KeyColumn is the key's column.
func (l Layout[T]) KeyColumn() Column { return l.Columns[l.Key] }

// VersionColumn is the version's column.
func (l Layout[T]) VersionColumn() Column { return l.Columns[l.Version] }

// Writable reports whether Update sets column i from the row: not the
// key, the version or the fence column (which only UpdateFenced changes,
// to its token).
func (l Layout[T]) Writable(i int) bool { return i != l.Key && i != l.Version && i != l.Fence }

// WritableValues returns the fields of *row that Update writes (Writable),
// in column order: the SET list's arguments.
func (l Layout[T]) WritableValues(row *T) []any {
	rv := reflect.ValueOf(row).Elem()
	var out []any
	for i, c := range l.Columns {
		if l.Writable(i) {
			out = append(out, rv.FieldByIndex(c.Index).Interface())
		}
	}
	return out
}

// SelectList is the quoted columns, comma separated, in column order: what
// a SELECT or RETURNING of a row read whole names.
func (l Layout[T]) SelectList() string {
	names := make([]string, len(l.Columns))
	for i, c := range l.Columns {
		names[i] = c.Quoted
	}
	return strings.Join(names, ", ")
}

// Targets returns pointers to the fields of *row, in column order: scan
// targets for a row read whole.
func (l Layout[T]) Targets(row *T) []any {
	rv := reflect.ValueOf(row).Elem()
	out := make([]any, len(l.Columns))
	for i, c := range l.Columns {
		out[i] = rv.FieldByIndex(c.Index).Addr().Interface()
	}
	return out
}

// BindKey returns key converted to the key field's type, for a statement
// to bind (see ConvertKey), or a *cas.KeyError matching cas.ErrInvalidKey.
// A key that is not of the field's kind is refused when both are strings,
// numbers or booleans (a number for a text key: the comparison MySQL
// makes across them matches other rows); any other key goes to the
// driver as given, which converts what it can (a UUID's text for a
// [16]byte or pgtype.UUID field, a pointer to the key) and refuses the
// rest, as Get, Delete and Add always let it.
func (l Layout[T]) BindKey(op string, key any) (any, error) {
	ft := reflect.TypeFor[T]().FieldByIndex(l.KeyColumn().Index).Type
	if kv := reflect.ValueOf(key); kv.IsValid() && !KeyFits(kv.Type(), ft) && !(isBasic(kv.Kind()) && isBasic(ft.Kind())) {
		return key, nil
	}
	kv, err := ConvertKey(op, key, ft)
	if err != nil {
		return nil, err
	}
	return kv.Interface(), nil
}

// isBasic reports whether k is a string, number or boolean kind.
func isBasic(k reflect.Kind) bool {
	return k == reflect.String || k == reflect.Bool || k == reflect.Float32 || k == reflect.Float64 || IsIntegerKind(k)
}

// KeyOf returns the key field of *row.
func (l Layout[T]) KeyOf(row *T) any {
	return reflect.ValueOf(row).Elem().FieldByIndex(l.KeyColumn().Index).Interface()
}

// VersionOf returns the version in the version field of *row (a negative
// value reads as 0).
func (l Layout[T]) VersionOf(row *T) cas.Version {
	return ToVersion(reflect.ValueOf(row).Elem().FieldByIndex(l.VersionColumn().Index))
}

// SetVersion sets the version field of *row to v.
func (l Layout[T]) SetVersion(row *T, v cas.Version) {
	f := reflect.ValueOf(row).Elem().FieldByIndex(l.VersionColumn().Index)
	if f.CanInt() {
		f.SetInt(int64(v))
	} else {
		f.SetUint(uint64(v))
	}
}

// Row is row with the version its version field holds.
func (l Layout[T]) Row(row T) Row[T] { return Row[T]{Value: row, Version: l.VersionOf(&row)} }

// ToVersion reads an integer field as a version (a negative value as 0).
func ToVersion(v reflect.Value) cas.Version {
	switch {
	case v.CanInt():
		return cas.Version(max(v.Int(), 0))
	case v.CanUint():
		return cas.Version(v.Uint())
	}
	return 0
}

// Delta checks a column delta (a Table's Add) of n within b on the row
// with key, before anything is sent: the context (DeltaRange) and the
// column (DeltaColumn). It returns the column's index and the range of
// current values the delta accepts. pkg and table name the errors
// ("pgcas: Add: ...").
func (l Layout[T]) Delta(ctx context.Context, pkg, table string, key any, column string, n int64, b cas.Bounds) (col int, lo, hi int64, err error) {
	if col, err = l.DeltaColumn(pkg, table, column); err != nil {
		if _, _, cerr := DeltaRange(ctx, fmt.Sprint(key), n, b); cerr != nil {
			return 0, 0, 0, cerr
		}
		return 0, 0, 0, err
	}
	if lo, hi, err = DeltaRange(ctx, fmt.Sprint(key), n, l.fieldBounds(col, b)); err != nil {
		return 0, 0, 0, err
	}
	return col, lo, hi, nil
}

// fieldBounds is b narrowed to the range of column col's field: a delta
// whose result the field cannot hold (an int8 field over a BIGINT column)
// is refused as one outside b, before anything is written that no read
// could then scan.
func (l Layout[T]) fieldBounds(col int, b cas.Bounds) cas.Bounds {
	ft := reflect.TypeFor[T]().FieldByIndex(l.Columns[col].Index).Type
	if ft.Kind() == reflect.Pointer {
		ft = ft.Elem()
	}
	bits := ft.Bits()
	if bits >= 64 {
		return b
	}
	lo, hi := int64(-1)<<(bits-1), int64(1)<<(bits-1)-1
	if m, ok := b.Min(); ok {
		lo = max(lo, m)
	}
	if m, ok := b.Max(); ok {
		hi = min(hi, m)
	}
	return cas.Between(lo, hi)
}

// DeltaColumn returns the index of the column named name that a delta (a
// Table's Add) may change: writable (not the key, version or fence
// column) and of a signed integer field of T. pkg and table name the
// errors ("pgcas: Add: ...").
func (l Layout[T]) DeltaColumn(pkg, table, name string) (int, error) {
	for i, c := range l.Columns {
		if c.Name != name {
			continue
		}
		if !l.Writable(i) {
			return 0, fmt.Errorf("%s: Add: column %q of %s is the key, version or fence column", pkg, name, table)
		}
		if err := DeltaField(reflect.TypeFor[T](), c.Index); err != nil {
			return 0, fmt.Errorf("%s: Add: column %q of %s %w", pkg, name, table, err)
		}
		return i, nil
	}
	return 0, fmt.Errorf("%s: Add: %s has no column %q (columns are named by T's db tags)", pkg, table, name)
}

// DeltaRefused is the error of a delta of n within b of column col of the
// row with key that the database refused, from the row as it is now: a
// *cas.BoundError with the column's current value (without it when the
// value allows the delta: it changed since), or an error matching
// cas.ErrNotInteger for a NULL column.
func (l Layout[T]) DeltaRefused(cur *T, col int, key any, n int64, b cas.Bounds) error {
	b = l.fieldBounds(col, b)
	c := l.Columns[col]
	k := fmt.Sprint(key)
	f := reflect.ValueOf(cur).Elem().FieldByIndex(c.Index)
	if f.Kind() == reflect.Pointer {
		if f.IsNil() {
			return &cas.KeyError{Op: "add", Key: k, Err: fmt.Errorf("%w: column %s is NULL", cas.ErrNotInteger, c.Name)}
		}
		f = f.Elem()
	}
	if b.Allows(f.Int(), n) {
		return &cas.BoundError{Key: k, Add: n, Bounds: b}
	}
	return &cas.BoundError{Key: k, Add: n, Bounds: b, Current: f.Int(), HasCurrent: true}
}

// Column is a struct field mapped to a table column by its `db` tag.
type Column struct {
	Name   string // unquoted
	Quoted string // as quote returned it
	Index  []int  // reflect field path
}

// columns collects the columns of struct type rt as pgx and sqlx map them:
// each exported field is a column named by its `db` tag (required; options
// after a comma are ignored), `db:"-"` skips a field, and embedded structs
// are flattened. quote checks and quotes a column name.
func columns(rt reflect.Type, quote func(name string) (string, error)) ([]Column, error) {
	var cols []Column
	var walk func(rt reflect.Type, path []int) error
	walk = func(rt reflect.Type, path []int) error {
		for i := range rt.NumField() {
			sf := rt.Field(i)
			index := append(append([]int(nil), path...), i)
			if sf.Anonymous && sf.Type.Kind() == reflect.Struct {
				if err := walk(sf.Type, index); err != nil {
					return err
				}
				continue
			}
			if !sf.IsExported() {
				continue
			}
			tag, ok := sf.Tag.Lookup("db")
			tag, _, _ = strings.Cut(tag, ",")
			if tag == "-" {
				continue
			}
			if !ok || tag == "" {
				return fmt.Errorf("field %s has no `db` tag naming its column", sf.Name)
			}
			q, err := quote(tag)
			if err != nil {
				return fmt.Errorf("field %s: %w", sf.Name, err)
			}
			for _, c := range cols {
				if c.Name == tag {
					return fmt.Errorf("two fields map to column %q", tag)
				}
			}
			cols = append(cols, Column{Name: tag, Quoted: q, Index: index})
		}
		return nil
	}
	return cols, walk(rt, nil)
}

// roles finds the key, version and fence columns among cols (the columns
// of struct type rt): keyCol and versionCol default to "id" and
// "version"; fenceCol empty means no fence column (fence -1). The version
// and fence fields must be integers, and the three columns distinct.
func roles(rt reflect.Type, cols []Column, keyCol, versionCol, fenceCol string) (key, version, fence int, err error) {
	find := func(col, def, what string) (int, error) {
		if col == "" {
			col = def
		}
		for i, c := range cols {
			if c.Name == col {
				return i, nil
			}
		}
		return -1, fmt.Errorf("no field for the %s column %q", what, col)
	}
	integer := func(i int) bool { return IsIntegerKind(rt.FieldByIndex(cols[i].Index).Type.Kind()) }
	fence = -1
	if key, err = find(keyCol, "id", "key"); err != nil {
		return -1, -1, -1, err
	}
	if version, err = find(versionCol, "version", "version"); err != nil {
		return -1, -1, -1, err
	}
	if !integer(version) {
		return -1, -1, -1, errors.New("the version field is not an integer")
	}
	if fenceCol != "" {
		if fence, err = find(fenceCol, "", "fence"); err != nil {
			return -1, -1, -1, err
		}
		if !integer(fence) {
			return -1, -1, -1, errors.New("the fence field is not an integer")
		}
	}
	if key == version || key == fence || (fence >= 0 && fence == version) {
		return -1, -1, -1, errors.New("key, version and fence must be distinct columns")
	}
	return key, version, fence, nil
}
