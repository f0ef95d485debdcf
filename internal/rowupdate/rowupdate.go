// Package rowupdate runs occ.Update over one row of a repository table, so
// that the Modify of every adapter's Table (pgcas, dynamocas, sqlcas) is
// occ.Update's loop itself and not a copy of it: one immediate retry from
// the row a conflict carried, then a backoff wait and a fresh read after
// every wait, the retry budget, the observer and every other occ.Option.
//
// The bridge is a cas.Store of one key whose "encoded value" is a marker:
// the rows themselves stay Go values held by the bridge, so nothing is
// serialised twice. It is used by one Modify call on one goroutine, as
// occ.Update calls its store.
package rowupdate

import (
	"context"
	"errors"

	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/occ"
)

// Row is one row of a table as a table's Read or Write sees it.
type Row[T any] struct {
	// Value is the row; the zero T (with its key set) when absent.
	Value T
	// Version is the row's version, 0 when absent.
	Version cas.Version
}

// Ops are a table's read and conditional write of one key.
type Ops[T any] struct {
	// Key is the key as text, for errors and observers.
	Key string
	// Absent is the row mutate sees when the key does not exist: the zero
	// T with its key field(s) set.
	Absent T
	// Read reads the row; a missing row is (Row{Value: Absent}, nil) or an
	// error matching cas.ErrNotFound.
	Read func(ctx context.Context) (Row[T], error)
	// Write writes next if the row is at version expected (0: absent) and
	// returns the row as stored. On a *cas.ConflictError with HasCurrent
	// it also returns the current row (its Version 0 when absent).
	Write func(ctx context.Context, expected cas.Version, next T) (stored Row[T], current Row[T], err error)
}

// marker stands for a row in the bridge's cas.Items: the rows stay in
// the bridge.
var marker = []byte{1}

// Modify runs occ.Update over the row ops name and returns the row as
// stored by the successful write.
func Modify[T any](ctx context.Context, ops Ops[T], mutate func(cur T, exists bool) (T, error), opts ...occ.Option) (T, error) {
	b := &bridge[T]{ops: ops}
	typed := cas.NewTyped[T](b, b)
	_, _, err := occ.Update(ctx, typed, ops.Key, func(cur T, exists bool) (T, error) {
		if !exists {
			cur = ops.Absent
		}
		return mutate(cur, exists)
	}, opts...)
	if err != nil {
		var zero T
		return zero, err
	}
	return b.stored, nil
}

// bridge is a cas.Store of the one key and the cas.Codec of its rows.
type bridge[T any] struct {
	ops    Ops[T]
	cur    T // the row the last read or conflict found
	next   T // the row mutate returned, stashed by Marshal
	stored T // the row as stored by the last successful write
}

// Marshal implements cas.Codec: it keeps v for the write that follows.
func (b *bridge[T]) Marshal(v T) ([]byte, error) {
	b.next = v
	return marker, nil
}

// Unmarshal implements cas.Codec: the row is the one last found.
func (b *bridge[T]) Unmarshal(_ []byte, v *T) error {
	*v = b.cur
	return nil
}

// Get implements cas.Store.
func (b *bridge[T]) Get(ctx context.Context, _ string) (cas.Item, error) {
	r, err := b.ops.Read(ctx)
	if errors.Is(err, cas.ErrNotFound) || (err == nil && r.Version == 0) {
		return cas.Item{}, &cas.KeyError{Op: "get", Key: b.ops.Key, Err: cas.ErrNotFound}
	}
	if err != nil {
		return cas.Item{}, err
	}
	b.cur = r.Value
	return cas.Item{Key: b.ops.Key, Value: marker, Version: r.Version}, nil
}

// CompareAndSwap implements cas.Store: it writes the row Marshal kept.
func (b *bridge[T]) CompareAndSwap(ctx context.Context, _ string, expected cas.Version, _ []byte) (cas.Version, error) {
	stored, cur, err := b.ops.Write(ctx, expected, b.next)
	if err == nil {
		b.stored = stored.Value
		return stored.Version, nil
	}
	var ce *cas.ConflictError
	if errors.As(err, &ce) && ce.HasCurrent {
		// Hand occ.Update the current row under the key it asked for,
		// so that it retries from it without reading again.
		b.cur = cur.Value
		hint := *ce
		hint.Key = b.ops.Key
		hint.Current = cas.Item{Key: b.ops.Key, Version: cur.Version}
		if cur.Version != 0 {
			hint.Current.Value = marker
		}
		return 0, &hint
	}
	return 0, err
}

// CompareAndDelete implements cas.Store; occ.Update never deletes.
func (b *bridge[T]) CompareAndDelete(context.Context, string, cas.Version) error {
	return errors.ErrUnsupported
}
