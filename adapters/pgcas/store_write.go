package pgcas

import (
	"context"

	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/internal/writeid"
)

// writeSQL returns the statement and arguments of one write.
func (s *Store) writeSQL(op string, key string, expected cas.Version, value []byte, token uint64, fenced bool, id writeid.ID) (string, []any) {
	if value == nil && op != "compare-and-delete" {
		value = []byte{} // NULL marks a tombstone: store an empty value as ''
	}
	switch {
	case op == "compare-and-delete":
		return s.sqlDelete, []any{key, id, pgVersion(expected)}
	case expected == 0 && fenced:
		return s.sqlCreateF, []any{key, value, id, int64(token)}
	case expected == 0:
		return s.sqlCreate, []any{key, value, id}
	case fenced:
		return s.sqlSwapF, []any{key, value, id, pgVersion(expected), int64(token)}
	default:
		return s.sqlSwap, []any{key, value, id, pgVersion(expected)}
	}
}

// maxWriteRuns bounds how often a write whose conflict came back without
// the current row is run again (see write).
const maxWriteRuns = 3

func (s *Store) write(ctx context.Context, op string, key string, expected cas.Version, value []byte, token uint64, fenced bool) (cas.Version, error) {
	id := s.ids.Next()
	sql, args := s.writeSQL(op, key, expected, value, token, fenced, id)
	for run := 1; ; run++ {
		var r result
		conn, err := s.pool.Acquire(ctx)
		if err != nil {
			return 0, acquireError(op, key, err)
		}
		err = conn.QueryRow(ctx, sql, args...).Scan(&r.newVersion, &r.curVersion, &r.curValue, &r.curToken)
		conn.Release()
		if err != nil {
			return s.writeFailed(ctx, op, key, expected, id, err)
		}
		if r.newVersion != nil {
			return cas.Version(*r.newVersion), nil
		}
		if fenced && r.curToken != nil && token < uint64(*r.curToken) {
			return 0, &cas.FencedError{Key: key, Token: token, Highest: uint64(*r.curToken)}
		}
		if expected == 0 && r.curVersion == nil && run < maxWriteRuns {
			// The create lost to a row committed after this statement's
			// snapshot was taken: the locking read found no row to follow.
			// Nothing was written; run it again to learn the row.
			continue
		}
		if expected != 0 && r.curVersion != nil && r.curValue != nil && *r.curVersion >= 0 && cas.Version(*r.curVersion) == expected && run < maxWriteRuns {
			// Refused, yet the row is at the version expected: the
			// statement's snapshot predates that version's commit, and
			// its WHERE saw the version before (a version read from a
			// replica, Config.ReadPool, can arrive before the primary's
			// new snapshots show it). Nothing was written; run it again.
			continue
		}
		return 0, r.conflict(key, expected, expected != 0 || r.curVersion != nil)
	}
}

// result is the one row a write statement returns.
type result struct {
	newVersion *int64
	curVersion *int64
	curValue   []byte
	curToken   *int64
}

// conflict returns the conflict the row describes.
func (r *result) conflict(key string, expected cas.Version, hasCurrent bool) *cas.ConflictError {
	ce := &cas.ConflictError{Key: key, Expected: expected, HasCurrent: hasCurrent}
	if hasCurrent && r.curVersion != nil && r.curValue != nil {
		ce.Current = cas.Item{Key: key, Value: r.curValue, Version: cas.Version(*r.curVersion)}
	}
	return ce
}
