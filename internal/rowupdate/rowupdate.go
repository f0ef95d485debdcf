// Package rowupdate runs occ.Update over the rows of a repository table,
// so that the Modify of every adapter's Table (pgcas, dynamocas, sqlcas)
// and gormocc.Update is occ.Update's loop itself and not a copy of it: one
// immediate retry from the row a conflict carried, then a backoff wait and
// a fresh read after every wait, the retry budget, the observer and every
// other occ.Option.
//
// A table gets one long-lived Rows: a cas.Store of the table's keys (as
// text) that the process's turns, combiner lines and version caches are
// keyed by, exactly as they are keyed by a store. So two Modify calls of
// one row in one process meet: they take turns at a hot row, share a
// combined write (occ.WithCombiner) and skip the read when a cache
// (Rows.NewCache) knows the row's version.
//
// The rows themselves stay Go values: the bridge's "encoded value" of a
// row is a handle to it, so nothing is serialised twice, and a row state
// lives as long as something (a cache entry, a combiner's state, a
// conflict being retried) still holds its handle.
package rowupdate

import (
	"context"
	"errors"
	"reflect"
	"time"

	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/occ"
)

// Row is one row of a table as a Driver's Read or Write sees it.
type Row[T any] struct {
	// Value is the row; the zero T (with its key set) when absent.
	Value T
	// Version is the row's version, 0 when absent.
	Version cas.Version
}

// Driver is a table's read and conditional write of one row. key is the
// key as the table takes it (Key.Value).
type Driver[T any] struct {
	// Read reads the row; a missing row is (Row{}, nil) with Version 0 or
	// an error matching cas.ErrNotFound.
	Read func(ctx context.Context, key any) (Row[T], error)
	// Write writes next if the row is at version expected (0: absent) and
	// returns the row as stored. On a *cas.ConflictError with HasCurrent
	// it also returns the current row (its Version 0 when absent).
	Write func(ctx context.Context, key any, expected cas.Version, next T) (stored, current Row[T], err error)
	// SetVersion sets the version field of *row.
	SetVersion func(row *T, v cas.Version) error
	// Exclusive, if set, is the table's exclusive read-modify-write of
	// one row (cas.Exclusive, occ.Update's escalation for a call that
	// keeps losing): it reads the row holding it (a row lock), calls fn,
	// and when fn says write, inserts (version 0) or updates at the
	// version read what fn returned, returning the row as stored. fn's
	// error ends it, writes nothing and is returned as is.
	Exclusive func(ctx context.Context, key any, fn func(cur Row[T]) (next T, write bool, err error)) (stored Row[T], err error)
	// ExclusiveAfter, if > 0, is the table's default for how many writes
	// in a row a call may lose before it escalates to Exclusive
	// (cas.ExclusiveAfterHint).
	ExclusiveAfter int
	// Commit, if set, writes several rows in one transaction of the
	// table (ModifyMany): each is inserted (Expected 0) or updated at
	// Expected, or none is. It returns the rows as stored, in writes'
	// order; on a *cas.ConflictError, the index of the write that met it
	// and that row's current state.
	Commit func(ctx context.Context, writes []Write[T]) (stored []Row[T], conflictAt int, current Row[T], err error)
	// ReadMany, if set, reads several rows in one round trip, in keys'
	// order (Version 0 for a key without a row): ModifyMany's reads.
	ReadMany func(ctx context.Context, keys []any) ([]Row[T], error)
	// CommitExclusive, if set (with Exclusive), is ModifyMany's attempt
	// for a transaction that keeps losing (cas.ExclusiveCommitter): in
	// one transaction of the table it reads the rows of keys holding
	// them (row locks, taken in key order), calls fn with them in keys'
	// order (Version 0: absent), and writes what fn returned as Commit
	// does, before the locks are released. fn's error ends it, writes
	// nothing and is returned as is.
	CommitExclusive func(ctx context.Context, keys []any, fn func(cur []Row[T]) ([]Write[T], error)) (stored []Row[T], conflictAt int, current Row[T], err error)
	// HotCommitFor, if set (with CommitExclusive), is the table's
	// cas.HotCommitHint: the window in which two conflicts at a row make
	// ModifyMany commit holding its rows at once.
	HotCommitFor func() time.Duration
}

// Key names one row for Modify.
type Key[T any] struct {
	// Text is the key as text: what turns, combiner lines and caches are
	// keyed by, and what errors name. Distinct keys have distinct texts.
	Text string
	// Value is the key as the Driver takes it.
	Value any
	// Absent is the row mutate sees when the key does not exist: the zero
	// T with its key field(s) set.
	Absent T
	// Check, if set, refuses a row mutate returned (a changed key); its
	// error ends that caller's call and is returned as is.
	Check func(next *T) error
}

// Rows is the bridge of one table onto occ: a cas.Store of the table's
// rows whose values are handles to rows held in memory. Make one per table
// (per table bound to a transaction: rows of two transactions must never
// share a write) and keep it for the table's life. A Rows is safe for
// concurrent use.
type Rows[T any] struct {
	d     Driver[T]
	store cas.Store // r, or r with cas.Exclusive when the driver has it
	typed *cas.Typed[T]
	held  *handles[T]
	flat  bool // T holds no references (see KeepValues)
}

// New returns the bridge of the table d reads and writes.
func New[T any](d Driver[T]) *Rows[T] {
	r := &Rows[T]{d: d, held: newHandles[T](), flat: flat(reflect.TypeFor[T]())}
	r.store = r
	switch {
	case d.Exclusive != nil && d.CommitExclusive != nil:
		r.store = exclusiveCommitRows[T]{exclusiveRows[T]{r}}
	case d.Exclusive != nil:
		r.store = exclusiveRows[T]{r}
	}
	r.typed = cas.NewTyped[T](r.store, r)
	return r
}

// KeepValues tells occ whether the state a call wrote may be kept for the
// process's next call of the row (occ's remembered states): only when T
// holds no slice, map, pointer or interface, since the row a call returns
// shares those with the state kept, and a caller that changed them in
// place would change what the next call starts from.
func (r *Rows[T]) KeepValues() bool { return r.flat }

// flat reports whether values of t hold no references.
func flat(t reflect.Type) bool {
	switch t.Kind() {
	case reflect.Slice, reflect.Map, reflect.Pointer, reflect.Interface, reflect.Chan, reflect.Func, reflect.UnsafePointer:
		return false
	case reflect.Array:
		return flat(t.Elem())
	case reflect.Struct:
		for i := range t.NumField() {
			if !flat(t.Field(i).Type) {
				return false
			}
		}
	}
	return true
}

// NewCache returns a version cache of at most maxEntries rows of the
// table, for occ.WithCache.
func (r *Rows[T]) NewCache(maxEntries int) *occ.Cache { return occ.NewCache(r.store, maxEntries) }

// keyCtx carries a Modify call's Key.Value to the bridge's reads and
// writes (a combined write runs on the context of the call that leads the
// batch: every call of the batch has the same key).
type keyCtx struct{}

// Modify runs occ.Update over the row k names and returns the row mutate
// made, with the version the write gave it.
func (r *Rows[T]) Modify(ctx context.Context, k Key[T], mutate func(cur T, exists bool) (T, error), opts ...occ.Option) (T, error) {
	var zero T
	if ctx != nil {
		ctx = context.WithValue(ctx, keyCtx{}, k.Value)
	}
	written, v, err := occ.Update(ctx, r.typed, k.Text, func(cur T, exists bool) (T, error) {
		if !exists {
			cur = k.Absent
		}
		next, err := mutate(cur, exists)
		if err == nil && k.Check != nil {
			err = k.Check(&next)
		}
		return next, err
	}, opts...)
	if err != nil {
		return zero, err
	}
	if err := r.d.SetVersion(&written, v); err != nil {
		return zero, err
	}
	return written, nil
}

// hold keeps row and returns its handle.
func (r *Rows[T]) hold(row T) []byte { return r.held.hold(row) }

// Marshal implements cas.Codec: the row's handle.
func (r *Rows[T]) Marshal(v T) ([]byte, error) { return r.hold(v), nil }

// Unmarshal implements cas.Codec: the row the handle holds.
func (r *Rows[T]) Unmarshal(b []byte, v *T) error {
	p, _, err := r.held.load(b)
	if err != nil {
		return err
	}
	*v = *p
	return nil
}

// keyOf returns the key value Modify put in ctx.
func keyOf(ctx context.Context, key string) (any, error) {
	k := ctx.Value(keyCtx{})
	if k == nil {
		return nil, &cas.KeyError{Op: "rowupdate", Key: key, Err: errors.New("rowupdate: the table's rows are read and written only through Modify")}
	}
	return k, nil
}

// Get implements cas.Store.
func (r *Rows[T]) Get(ctx context.Context, key string) (cas.Item, error) {
	k, err := keyValue(ctx, key)
	if err != nil {
		return cas.Item{}, err
	}
	row, err := r.d.Read(ctx, k)
	if errors.Is(err, cas.ErrNotFound) || (err == nil && row.Version == 0) {
		return cas.Item{}, &cas.KeyError{Op: "get", Key: key, Err: cas.ErrNotFound}
	}
	if err != nil {
		return cas.Item{}, err
	}
	return cas.Item{Key: key, Value: r.hold(row.Value), Version: row.Version}, nil
}

// CompareAndSwap implements cas.Store: it writes the row value is a handle
// of. After a successful write the handle holds the row as stored, so
// that a cache or a combiner that keeps the handle has the stored row.
func (r *Rows[T]) CompareAndSwap(ctx context.Context, key string, expected cas.Version, value []byte) (cas.Version, error) {
	k, err := keyValue(ctx, key)
	if err != nil {
		return 0, err
	}
	p, id, err := r.held.load(value)
	if err != nil {
		return 0, err
	}
	stored, cur, err := r.d.Write(ctx, k, expected, *p)
	if err == nil {
		r.held.replace(id, &stored.Value)
		return stored.Version, nil
	}
	var ce *cas.ConflictError
	if errors.As(err, &ce) && ce.HasCurrent {
		// Hand occ.Update the current row under the key it asked for,
		// so that it retries from it without reading again.
		hint := *ce
		hint.Key = key
		hint.Current = cas.Item{Key: key, Version: cur.Version}
		if cur.Version != 0 {
			hint.Current.Value = r.hold(cur.Value)
		}
		return 0, &hint
	}
	return 0, err
}

// exclusiveRows is the bridge of a table whose driver has Exclusive: a
// cas.Exclusive.
type exclusiveRows[T any] struct{ *Rows[T] }

// UpdateExclusive implements cas.Exclusive through Driver.Exclusive.
func (x exclusiveRows[T]) UpdateExclusive(ctx context.Context, key string, fn func(cur cas.Item) ([]byte, bool, error)) (cas.Version, error) {
	r := x.Rows
	k, err := keyOf(ctx, key)
	if err != nil {
		return 0, err
	}
	var (
		id    uint64
		wrote bool
	)
	stored, err := r.d.Exclusive(ctx, k, func(cur Row[T]) (T, bool, error) {
		var zero T
		it := cas.Item{Key: key, Version: cur.Version}
		if cur.Version != 0 {
			it.Value = r.hold(cur.Value)
		}
		b, write, err := fn(it)
		if err != nil || !write {
			return zero, false, err
		}
		p, pid, err := r.held.load(b)
		if err != nil {
			return zero, false, err
		}
		id, wrote = pid, true
		return *p, true, nil
	})
	if err != nil {
		return 0, err
	}
	if wrote {
		r.held.replace(id, &stored.Value)
	}
	return stored.Version, nil
}

// ExclusiveAfter implements cas.ExclusiveAfterHint with the driver's
// count (0: occ's default).
func (x exclusiveRows[T]) ExclusiveAfter() int { return x.d.ExclusiveAfter }

// HotCommitFor implements cas.HotCommitHint with the driver's window (0:
// none).
func (x exclusiveCommitRows[T]) HotCommitFor() time.Duration {
	if x.d.HotCommitFor == nil {
		return 0
	}
	return x.d.HotCommitFor()
}

// CompareAndDelete implements cas.Store; occ.Update never deletes.
func (r *Rows[T]) CompareAndDelete(context.Context, string, cas.Version) error {
	return errors.ErrUnsupported
}
