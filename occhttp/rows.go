package occhttp

import (
	"context"
	"fmt"

	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/occ"
)

// Rows is a repository table as this package serves it: pgcas.Table,
// sqlcas.Table and dynamocas.Table satisfy it as they are, K being the
// table's key type (any for pgcas and sqlcas, dynamocas.Key for
// dynamocas) and T its row type. The version a row carries in its version
// field is its ETag. docs/tables.md describes the methods.
//
// Pass a pgcas or sqlcas table's keys to UpdateRow and DeleteRow as any:
// from a key of type string Go infers K = string, which such a table does
// not satisfy.
type Rows[K, T any] interface {
	// Get returns the row with key; an error matching cas.ErrNotFound when
	// there is none.
	Get(ctx context.Context, key K) (T, error)
	// Modify is the table's optimistic read-modify-write of the row with
	// key (exists false and cur the row with only its key set when
	// absent); mutate's error ends it and is returned as is.
	Modify(ctx context.Context, key K, mutate func(cur T, exists bool) (T, error), opts ...occ.Option) (T, error)
	// Delete deletes the row with key if it is at version expected, and
	// fails with a *cas.ConflictError otherwise.
	Delete(ctx context.Context, key K, expected cas.Version) error
	// VersionOf returns the version in row's version field.
	VersionOf(row T) cas.Version
}

// UpdateRow is Update over a repository table: it edits the row with key
// under precondition p, read from the request with ReadPrecondition, and
// returns the row as stored and its version, the new ETag. It runs in
// rows.Modify, whose mutate checks p on every row it is given. edit gets
// the current row (exists is false, cur the row with only its key set,
// when there is none, which only CreateOnly and allowed unconditional
// writes let through) and returns the row to write, with the same key; its
// version field is ignored. cur may share maps, slices and pointers with
// rows that other calls hold: edit replaces them rather than writing into
// them.
//
// A row not at a version If-Match names (MatchVersion) or an existing row
// (CreateOnly) fails with a *PreconditionError carrying the current
// version (412), a missing one (MatchAny) with a *PreconditionError
// (412), and nothing is written; no
// precondition is ErrPreconditionRequired (428) unless AllowUnconditional
// is given. An error from edit is returned as is; a changed key fails with
// an error matching cas.ErrInvalidKey (400). RowHandler serves PUT and
// PATCH with it; docs/tables.md#serving-rows-over-http has each
// precondition's retries and a PATCH handler.
func UpdateRow[K, T any](ctx context.Context, rows Rows[K, T], key K, p Precondition, edit func(cur T, exists bool) (T, error), opts ...Option) (T, cas.Version, error) {
	var c config
	c.apply(opts)
	var zero T
	name := fmt.Sprint(key)
	var retry []occ.Option
	switch p.Kind {
	case Unconditional:
		if !c.unconditional {
			return zero, 0, required(name)
		}
		retry = c.retry
	case MatchAny:
		retry = c.retry
	case MatchVersion, CreateOnly:
		retry = []occ.Option{occ.WithTurns(false)}
	default:
		return zero, 0, fmt.Errorf("%w: unknown precondition kind %d", ErrBadPrecondition, p.Kind)
	}
	row, err := rows.Modify(ctx, key, func(cur T, exists bool) (T, error) {
		var v cas.Version
		if exists {
			v = rows.VersionOf(cur)
		}
		if !p.matches(v) {
			// Permanent: a *PreconditionError matches cas.ErrConflict,
			// which the loop would otherwise retry.
			return cur, occ.Permanent(&PreconditionError{Key: name, Precondition: p, Current: v})
		}
		return edit(cur, exists)
	}, retry...)
	if err != nil {
		return zero, 0, err
	}
	return row, rows.VersionOf(row), nil
}

// DeleteRow is Delete over a repository table: it deletes the row with
// key under precondition p:
//   - MatchVersion: only if it is at a version If-Match names, else a
//     *PreconditionError with the current version (412);
//   - MatchAny: if it exists (retried on the server), else a
//     *PreconditionError (412);
//   - Unconditional: ErrPreconditionRequired (428) unless AllowUnconditional
//     is given; then an error matching cas.ErrNotFound (404) when it does
//     not exist;
//   - CreateOnly makes no sense for a delete and fails with
//     ErrBadPrecondition (400).
func DeleteRow[K, T any](ctx context.Context, rows Rows[K, T], key K, p Precondition, opts ...Option) error {
	read := func(ctx context.Context) (cas.Version, error) {
		row, err := rows.Get(ctx, key)
		if err != nil {
			return 0, err
		}
		return rows.VersionOf(row), nil
	}
	return deleteUnder(ctx, fmt.Sprint(key), p, opts, read, func(ctx context.Context, expected cas.Version) error {
		return rows.Delete(ctx, key, expected)
	})
}
