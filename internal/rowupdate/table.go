package rowupdate

import (
	"context"
	"fmt"
	"math"
	"reflect"
	"time"

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
	// ExclusiveAfter is Driver.ExclusiveAfter.
	ExclusiveAfter int
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
	// CommitManyExclusive, if set, replaces the exclusive commit built on
	// RunTx and LockRow (CommitExclusiveFor) with the table's own, for
	// example one that reads the rows in one statement and writes and
	// commits in another; it may fall back to CommitExclusiveFor.
	CommitManyExclusive func(ctx context.Context, keys []any, fn func(cur []Row[T]) ([]Write[T], error)) ([]Row[T], int, Row[T], error)
	// HotCommitFor, if set, is Driver.HotCommitFor.
	HotCommitFor func() time.Duration
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
		ExclusiveAfter:  t.ExclusiveAfter,
		Commit:          commitFor(t),
		ReadMany:        readManyFor(t),
		CommitExclusive: commitExclusiveOf(t),
		HotCommitFor:    t.HotCommitFor,
	})}
}

// commitExclusiveOf is the Driver.CommitExclusive of t: its own when it
// has one, else CommitExclusiveFor's.
func commitExclusiveOf[T any](t Table[T]) func(ctx context.Context, keys []any, fn func(cur []Row[T]) ([]Write[T], error)) ([]Row[T], int, Row[T], error) {
	if t.CommitManyExclusive != nil {
		return t.CommitManyExclusive
	}
	return CommitExclusiveFor(t)
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
	if reflect.ValueOf(k.Value).IsZero() {
		// Refused only when the row is absent (zeroKeyError): before an
		// insert, not mutate's to see.
		inner := mutate
		mutate = func(cur T, exists bool) (T, error) {
			if !exists {
				return cur, occ.Permanent(zeroKeyError("modify", k.Text))
			}
			return inner(cur, exists)
		}
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

// ConvertKey returns key converted to to, the type of a table's key
// field, or a *cas.KeyError matching cas.ErrInvalidKey naming op when it
// does not fit: not KeyFits, or an integer outside to's range (a
// conversion would wrap it onto another key: 1<<32 + 7 into an int32 is
// 7). Every call that binds a key converts it so, because servers
// compare across types: MySQL compares a text key with the number 0 as
// numbers, which matches every key that does not start with a digit.
func ConvertKey(op string, key any, to reflect.Type) (reflect.Value, error) {
	kv := reflect.ValueOf(key)
	if !kv.IsValid() || !KeyFits(kv.Type(), to) {
		return reflect.Value{}, &cas.KeyError{Op: op, Key: fmt.Sprint(key), Err: fmt.Errorf("%w: a %T does not fit the key field's type %v", cas.ErrInvalidKey, key, to)}
	}
	if overflows(kv, to) {
		return reflect.Value{}, &cas.KeyError{Op: op, Key: fmt.Sprint(key), Err: fmt.Errorf("%w: %v is outside the range of the key field's type %v", cas.ErrInvalidKey, key, to)}
	}
	return kv.Convert(to), nil
}

// overflows reports whether integer v does not fit integer type to.
func overflows(v reflect.Value, to reflect.Type) bool {
	if !IsIntegerKind(v.Kind()) || !IsIntegerKind(to.Kind()) {
		return false
	}
	z := reflect.Zero(to)
	if v.CanInt() {
		i := v.Int()
		if z.CanInt() {
			return z.OverflowInt(i)
		}
		return i < 0 || z.OverflowUint(uint64(i))
	}
	u := v.Uint()
	if z.CanInt() {
		return u > math.MaxInt64 || z.OverflowInt(int64(u))
	}
	return z.OverflowUint(u)
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
