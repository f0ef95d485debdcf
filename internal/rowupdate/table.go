package rowupdate

import (
	"context"
	"errors"
	"fmt"
	"math"
	"reflect"
	"strings"

	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/occ"
)

// Table is a SQL repository table (pgcas.Table, sqlcas.Table) as
// NewTable drives it: rows of struct type T with the key in the field at
// KeyIndex, read and written by the table's own methods.
type Table[T any] struct {
	// KeyIndex is the reflect index of T's key field.
	KeyIndex []int
	// Get reads the row with key, converted to the key field's type. A
	// missing row is an error matching cas.ErrNotFound.
	Get func(ctx context.Context, key any) (T, error)
	// Insert and Update are the table's version-checked writes.
	Insert, Update func(ctx context.Context, row T) (T, error)
	// VersionOf and SetVersion read and set a row's version field.
	VersionOf  func(row *T) cas.Version
	SetVersion func(row *T, v cas.Version)
	// Exclusive, if set, is Driver.Exclusive.
	Exclusive func(ctx context.Context, key any, fn func(cur Row[T]) (next T, write bool, err error)) (stored Row[T], err error)
	// RunTx, if set, runs fn with the table bound to one transaction of
	// its own (its Get, Insert and Update run in it) and commits it when
	// fn returns nil, or rolls it back: the bridge's Commit for
	// ModifyMany.
	RunTx func(ctx context.Context, fn func(in Table[T]) error) error
	// GetMany, if set, reads the rows of keys in one round trip, in any
	// order; a key without a row has none.
	GetMany func(ctx context.Context, keys []any) ([]T, error)
	// CommitMany, if set, replaces the commit built on RunTx (see
	// CommitInOrder) with the table's own, for example one that sends
	// the writes in one round trip.
	CommitMany func(ctx context.Context, writes []Write[T]) ([]Row[T], int, Row[T], error)
	// LockRow, if set, reads the row with key on a table bound to a
	// transaction, locking it for writing until the transaction ends
	// (SELECT ... FOR UPDATE); a missing row is an error matching
	// cas.ErrNotFound. It makes a Txn that keeps losing escalate.
	LockRow func(ctx context.Context, key any) (T, error)
	// LockAbsent, if set, takes on a table bound to a transaction a lock
	// of key that lasts until the transaction ends, whether or not the
	// row exists: the lock a Txn's check that a row is absent and its
	// insert of the row share (PostgreSQL: an advisory transaction lock),
	// so that two transactions that each read as absent a row the other
	// inserts cannot both commit. Tables whose locking read of a missing
	// row already locks its place (MySQL's gap locks) or whose
	// transactions are serial (SQLite) leave it nil.
	LockAbsent func(ctx context.Context, key any) error
}

// WriteAt writes next as the row at version expected: an Insert when
// expected is 0, otherwise an Update of next with its version field set to
// expected. It returns what Insert or Update returned.
func (t Table[T]) WriteAt(ctx context.Context, expected cas.Version, next T) (T, error) {
	if expected == 0 {
		return t.Insert(ctx, next)
	}
	t.SetVersion(&next, expected)
	return t.Update(ctx, next)
}

// TableRows is the bridge of a SQL repository table: Rows whose reads go
// through t.Get and whose writes go through t.Insert (absent) or t.Update
// (present, at the version read).
type TableRows[T any] struct {
	*Rows[T]
	keyIndex []int
}

// NewTable returns the bridge of t; make one per table and keep it.
func NewTable[T any](t Table[T]) *TableRows[T] {
	row := func(v T) Row[T] { return Row[T]{Value: v, Version: t.VersionOf(&v)} }
	return &TableRows[T]{keyIndex: t.KeyIndex, Rows: New(Driver[T]{
		Read: func(ctx context.Context, key any) (Row[T], error) {
			v, err := t.Get(ctx, key)
			if err != nil {
				return Row[T]{}, err
			}
			return row(v), nil
		},
		Write: func(ctx context.Context, _ any, expected cas.Version, next T) (Row[T], Row[T], error) {
			out, err := t.WriteAt(ctx, expected, next)
			if err != nil {
				return Row[T]{}, row(out), err
			}
			return row(out), Row[T]{}, nil
		},
		SetVersion:      func(r *T, v cas.Version) error { t.SetVersion(r, v); return nil },
		Exclusive:       t.Exclusive,
		Commit:          commitFor(t),
		ReadMany:        readManyFor(t),
		CommitExclusive: commitExclusiveFor(t),
	})}
}

// readManyFor is the Driver.ReadMany of t, nil when t has no GetMany: the
// rows t.GetMany found, matched to keys by their key field.
func readManyFor[T any](t Table[T]) func(ctx context.Context, keys []any) ([]Row[T], error) {
	if t.GetMany == nil {
		return nil
	}
	return func(ctx context.Context, keys []any) ([]Row[T], error) {
		rows, err := t.GetMany(ctx, keys)
		if err != nil {
			return nil, err
		}
		at := make(map[string]int, len(keys))
		for i, k := range keys {
			at[fmt.Sprint(k)] = i
		}
		out := make([]Row[T], len(keys))
		for _, r := range rows {
			k := fmt.Sprint(reflect.ValueOf(&r).Elem().FieldByIndex(t.KeyIndex).Interface())
			if i, ok := at[k]; ok {
				out[i] = Row[T]{Value: r, Version: t.VersionOf(&r)}
			}
		}
		return out, nil
	}
}

// commitFor is the Driver.Commit of t, nil when t has no RunTx.
func commitFor[T any](t Table[T]) func(ctx context.Context, writes []Write[T]) ([]Row[T], int, Row[T], error) {
	switch {
	case t.CommitMany != nil:
		return t.CommitMany
	case t.RunTx == nil:
		return nil
	}
	return func(ctx context.Context, writes []Write[T]) ([]Row[T], int, Row[T], error) {
		return CommitInOrder(ctx, t, writes)
	}
}

// Modify is the Modify of a SQL repository table: it checks that key
// fits T's key field, then runs Rows.Modify over the row. A mutate that
// changes the row's key ends its call with cas.ErrInvalidKey.
func (tr *TableRows[T]) Modify(ctx context.Context, key any, mutate func(cur T, exists bool) (T, error), opts ...occ.Option) (T, error) {
	k, err := tr.key(key, "modify")
	if err != nil {
		var zero T
		return zero, err
	}
	return tr.Rows.Modify(ctx, k, mutate, opts...)
}

// KeyFits reports whether a key of type from may stand for a key field of
// type to: it converts, and it is of the same kind or both are integers
// (a string does not silently become a number, nor a number a string).
func KeyFits(from, to reflect.Type) bool {
	if !from.ConvertibleTo(to) {
		return false
	}
	return from.Kind() == to.Kind() || (IsIntegerKind(from.Kind()) && IsIntegerKind(to.Kind()))
}

// IsIntegerKind reports whether k is a signed or unsigned integer kind.
func IsIntegerKind(k reflect.Kind) bool {
	switch k {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return true
	}
	return false
}

// Column is a struct field mapped to a table column by its `db` tag.
type Column struct {
	Name   string // unquoted
	Quoted string // as quote returned it
	Index  []int  // reflect field path
}

// Columns collects the columns of struct type rt as pgx and sqlx map them:
// each exported field is a column named by its `db` tag (required; options
// after a comma are ignored), `db:"-"` skips a field, and embedded structs
// are flattened. quote checks and quotes a column name.
func Columns(rt reflect.Type, quote func(name string) (string, error)) ([]Column, error) {
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

// Roles finds the key, version and fence columns among cols (the columns
// of struct type rt): keyCol and versionCol default to "id" and
// "version"; fenceCol empty means no fence column (fence -1). The version
// and fence fields must be integers, and the three columns distinct.
func Roles(rt reflect.Type, cols []Column, keyCol, versionCol, fenceCol string) (key, version, fence int, err error) {
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

// DeltaColumn returns the index in cols of the column named name that a
// delta (a Table's Add) may change: writable (not the key, version or
// fence column) and of a signed integer field of T. pkg and table name
// the errors ("pgcas: Add: ...").
func DeltaColumn[T any](pkg, table string, cols []Column, writable func(i int) bool, name string) (int, error) {
	for i, c := range cols {
		if c.Name != name {
			continue
		}
		if !writable(i) {
			return 0, fmt.Errorf("%s: Add: column %q of %s is the key, version or fence column", pkg, name, table)
		}
		if err := DeltaField(reflect.TypeFor[T](), c.Index); err != nil {
			return 0, fmt.Errorf("%s: Add: column %q of %s %w", pkg, name, table, err)
		}
		return i, nil
	}
	return 0, fmt.Errorf("%s: Add: %s has no column %q (columns are named by T's db tags)", pkg, table, name)
}

// DeltaField checks that the field at index of struct type rt can take a
// column delta (Table.Add): a signed integer, or a pointer to one (NULL
// in the database). The error names the field's type.
func DeltaField(rt reflect.Type, index []int) error {
	ft := rt.FieldByIndex(index).Type
	if ft.Kind() == reflect.Pointer {
		ft = ft.Elem()
	}
	switch ft.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return nil
	}
	return fmt.Errorf("maps to a %v, not a signed integer", ft)
}

// DeltaRange validates a column delta (Table.Add) of n within b on the
// row with key (as text): a context that is not nil or done. It returns
// the range of current values the delta accepts, and a *cas.BoundError
// when there is none, so that nothing is sent for it.
func DeltaRange(ctx context.Context, key string, n int64, b cas.Bounds) (lo, hi int64, err error) {
	if ctx == nil {
		return 0, 0, &cas.KeyError{Op: "add", Key: key, Err: cas.ErrNilContext}
	}
	if err := ctx.Err(); err != nil {
		return 0, 0, err
	}
	if lo, hi = b.Before(n); lo > hi {
		return 0, 0, &cas.BoundError{Key: key, Add: n, Bounds: b}
	}
	return lo, hi, nil
}

// DeltaRefused is the error of a column delta the database refused, from
// the row as it is now: a *cas.BoundError with the column's current value
// (without it when the value allows the delta: it changed since), or an
// error matching cas.ErrNotInteger for a NULL column.
func DeltaRefused[T any](cur *T, index []int, key string, column string, n int64, b cas.Bounds) error {
	f := reflect.ValueOf(cur).Elem().FieldByIndex(index)
	if f.Kind() == reflect.Pointer {
		if f.IsNil() {
			return &cas.KeyError{Op: "add", Key: key, Err: fmt.Errorf("%w: column %s is NULL", cas.ErrNotInteger, column)}
		}
		f = f.Elem()
	}
	if b.Allows(f.Int(), n) {
		return &cas.BoundError{Key: key, Add: n, Bounds: b}
	}
	return &cas.BoundError{Key: key, Add: n, Bounds: b, Current: f.Int(), HasCurrent: true}
}

// CheckDelete refuses the expected version of a table's Delete that no
// row can have, before anything is sent: 0 (ZeroVersion) and a version
// past a bigint column (a *cas.ConflictError, as a stale version is).
func CheckDelete(key any, expected cas.Version) error {
	switch {
	case expected == 0:
		return ZeroVersion("delete", key)
	case expected > math.MaxInt64:
		return &cas.ConflictError{Key: fmt.Sprint(key), Expected: expected}
	}
	return nil
}

// ZeroVersion is the error of a table's Update of a row whose version
// field is 0 (op "update": a row never read) or of a Delete expecting
// version 0 (op "delete"), refused before anything is sent.
func ZeroVersion(op string, key any) error {
	why := "the row's version field is 0: Update writes a row read before; use Insert for a new one"
	if op == "delete" {
		why = "expected version 0 names a row that does not exist"
	}
	return &cas.KeyError{Op: op, Key: fmt.Sprint(key), Err: fmt.Errorf("%w: %s", cas.ErrInvalidVersion, why)}
}

// Layout checks that T is a struct, collects its columns (Columns) and
// finds the key, version and fence among them (Roles): what NewTable of
// every SQL adapter does first.
func Layout[T any](quote func(name string) (string, error), keyCol, versionCol, fenceCol string) (cols []Column, key, version, fence int, err error) {
	rt := reflect.TypeFor[T]()
	if rt.Kind() != reflect.Struct {
		return nil, -1, -1, -1, fmt.Errorf("%v is not a struct", rt)
	}
	if cols, err = Columns(rt, quote); err != nil {
		return nil, -1, -1, -1, err
	}
	key, version, fence, err = Roles(rt, cols, keyCol, versionCol, fenceCol)
	return cols, key, version, fence, err
}

// Targets returns pointers to the fields of *row, in the order of cols:
// scan targets for a row read whole.
func Targets[T any](row *T, cols []Column) []any {
	rv := reflect.ValueOf(row).Elem()
	out := make([]any, len(cols))
	for i, c := range cols {
		out[i] = rv.FieldByIndex(c.Index).Addr().Interface()
	}
	return out
}

// VersionAt returns the version in the field of column c of *row (an
// integer field; a negative value reads as 0).
func VersionAt[T any](row *T, c Column) cas.Version {
	return ToVersion(reflect.ValueOf(row).Elem().FieldByIndex(c.Index))
}

// SetVersionAt sets the field of column c of *row (an integer field) to v.
func SetVersionAt[T any](row *T, c Column, v cas.Version) {
	f := reflect.ValueOf(row).Elem().FieldByIndex(c.Index)
	if f.CanInt() {
		f.SetInt(int64(v))
	} else {
		f.SetUint(uint64(v))
	}
}

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
