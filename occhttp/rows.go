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
// under precondition p, read from the request with ReadPrecondition. edit
// gets the current row (exists is false, cur the row with only its key
// set, when there is none, which only CreateOnly and allowed
// unconditional writes let through) and returns the row to write, with
// the same key; its version field is ignored. As in the tables' Modify,
// cur may share maps, slices and pointers with rows that other calls
// hold: edit replaces them rather than writing into them. UpdateRow
// returns the row as stored and its version, the new ETag. It runs in
// rows.Modify, whose mutate checks the precondition on every row it is
// given:
//
//   - MatchVersion: if the row is not at a version If-Match names (it was
//     edited meanwhile, or before a conflict of the write), UpdateRow
//     fails with a *PreconditionError carrying the current version (412)
//     and nothing is written. edit runs again only if a write fails while
//     the row stays at a version If-Match names.
//   - CreateOnly: edit runs on the absent row and the row is inserted; an
//     existing row fails with a *PreconditionError (412).
//   - MatchAny: a missing row fails with a *PreconditionError (412);
//     otherwise conflicts are retried on the server, edit running again
//     on the row as it then is.
//   - Unconditional: ErrPreconditionRequired (428), unless
//     AllowUnconditional is given: then a plain Modify.
//
// The options of WithRetry reach Modify for MatchAny and unconditional
// writes only, as for Update. MatchVersion and CreateOnly run Modify
// without them and out of the process's turns (occ.WithTurns(false)), so
// that their check sees the row as a read or a conflict returned it: in a
// combined batch an edit sees the state the edits ahead of it left, and a
// version cache or a turn's handover may hold a version older than the
// client's ETag.
//
// An error from edit is returned as is; a changed key fails with an
// error matching cas.ErrInvalidKey (400). A PATCH handler:
//
//	p, err := occhttp.ReadPrecondition(r)
//	if err != nil {
//		occhttp.WriteError(w, err)
//		return
//	}
//	var id any = r.PathValue("id")
//	item, v, err := occhttp.UpdateRow(r.Context(), items, id, p, func(cur Item, exists bool) (Item, error) {
//		cur.Name = patch.Name
//		return cur, nil
//	})
//	if err != nil {
//		occhttp.WriteError(w, err) // 412 with the current ETag if someone edited first
//		return
//	}
//	occhttp.SetETag(w, v)
//	json.NewEncoder(w).Encode(item)
//
// A PUT is the same call with an edit that returns the new row (and
// notes !exists to answer 201 Created); RowHandler serves both.
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
