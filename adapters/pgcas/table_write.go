package pgcas

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/occkit/occkit/cas"
)

// tableResult is the head of the one row Update and Delete return.
type tableResult struct {
	written, exists bool
	version         *int64
	fence           *int64
}

// stale reports a refusal whose current row is at the version expected:
// the statement's snapshot predates that version's commit, and its WHERE
// saw the version before (a version read from a replica,
// TableConfig.ReadPool, can arrive before the primary's new snapshots
// show it). Nothing was written; the write is run again.
func (r tableResult) stale(expected cas.Version) bool {
	return r.exists && r.version != nil && *r.version >= 0 && cas.Version(*r.version) == expected
}

// conflict is the refusal of a write that expected version expected: the
// statement read the row's current version (absent: 0) in the same round
// trip.
func (r tableResult) conflict(key any, expected cas.Version) *cas.ConflictError {
	ce := &cas.ConflictError{Key: fmt.Sprint(key), Expected: expected, HasCurrent: true}
	ce.Current.Key = ce.Key
	if r.exists && r.version != nil {
		ce.Current.Version = cas.Version(max(*r.version, 0))
	}
	return ce
}

// run runs a conditional write and scans its row: the flags, then the
// written row, or else the current row; no row when the key has none.
func (t *Table[T]) run(ctx context.Context, sql string, args ...any) (written, current T, r tableResult, err error) {
	return t.scanWrite(t.q.QueryRow(ctx, sql, args...))
}

// scanWrite scans the row of a conditional write (see run) straight into
// the row's fields.
func (t *Table[T]) scanWrite(row pgx.Row) (written, current T, r tableResult, err error) {
	var out T
	dest := append([]any{&r.written, &r.version, &r.fence}, t.layout.Targets(&out)...)
	switch err = row.Scan(dest...); {
	case errors.Is(err, pgx.ErrNoRows):
		return written, current, tableResult{}, nil // nothing written, no current row
	case err != nil:
		return written, current, r, err
	case r.written:
		return out, current, r, nil
	}
	r.exists = true
	return written, out, r, nil
}
