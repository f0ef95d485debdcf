package pgcas

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/internal/opsort"
	"github.com/occkit/occkit/internal/sqlrows"
	"github.com/occkit/occkit/internal/writeid"
)

// Commit implements cas.Committer in one round trip (once the connection
// has prepared the statements).
//
// A commit of up to 8 operations that are all puts of keys at a version
// (rows a transaction read and writes: a transfer) is one statement: it
// locks the rows in key order (FOR UPDATE), and writes them only when
// every row is at its expected version.
//
// Any other commit is one implicit transaction, sent as one pgx batch.
// The operations run in key order, whatever their order in ops, so that
// concurrent commits lock rows in the same order and cannot deadlock each
// other. Each is the statement CompareAndSwap or CompareAndDelete would run
// (a check locks the row it checked with FOR SHARE; checking that a key is
// absent inserts a tombstone for it, the only way to lock an absence), and
// each marks the transaction when it fails. A final guard statement raises
// an error when the transaction is marked, which rolls back everything:
// PostgreSQL runs the statements of one pipeline up to its Sync in one
// transaction. The conflict names the first failed operation in ops order,
// with its key's current item.
func (s *Store) Commit(ctx context.Context, ops []cas.Op) ([]cas.Version, error) {
	if err := s.limits.Commit(ctx, ops); err != nil {
		return nil, err
	}
	id := s.ids.Next()
	if rowsCommittable(ops) {
		return s.commitRows(ctx, ops, id)
	}
	order := opsort.Order(ops)
	for run := 1; ; run++ {
		vs, rerun, err := s.commitOnce(ctx, ops, order, id, run < maxWriteRuns)
		if !rerun {
			return vs, err
		}
	}
}

// commitOnce runs the commit once. rerun is true when it was rolled back
// only because a create or an absence check met a row committed after its
// statement's snapshot (so the conflict would carry no current item) and
// mayRerun allows running it again.
func (s *Store) commitOnce(ctx context.Context, ops []cas.Op, order []int, id writeid.ID, mayRerun bool) (vs []cas.Version, rerun bool, err error) {
	b := &pgx.Batch{}
	for _, i := range order {
		op := ops[i]
		switch op.Kind {
		case cas.OpCheck:
			if op.Expected == 0 {
				b.Queue(s.commitCheckNone, op.Key, id)
			} else {
				b.Queue(s.commitCheck, op.Key, pgVersion(op.Expected))
			}
		case cas.OpPut:
			value := op.Value
			if value == nil {
				value = []byte{}
			}
			if op.Expected == 0 {
				b.Queue(s.commitCreate, op.Key, value, id)
			} else {
				b.Queue(s.commitSwap, op.Key, value, id, pgVersion(op.Expected))
			}
		case cas.OpDelete:
			b.Queue(s.commitDelete, op.Key, id, pgVersion(op.Expected))
		}
	}
	b.Queue(s.commitGuard)

	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, false, acquireError("commit", ops[0].Key, err)
	}
	defer conn.Release()
	br := conn.SendBatch(ctx, b)
	results := make([]result, len(ops))
	var failed []int // indexes into ops
	var batchErr error
	for _, i := range order {
		r := &results[i]
		var flag *string
		if err := br.QueryRow().Scan(&r.newVersion, &r.curVersion, &r.curValue, &r.curToken, &flag); err != nil {
			batchErr = err
			break
		}
		if flag != nil {
			failed = append(failed, i)
		}
	}
	if batchErr == nil {
		_, batchErr = br.Exec() // the guard
	}
	if closeErr := br.Close(); batchErr == nil {
		batchErr = closeErr // the implicit COMMIT at the Sync
	}

	if len(failed) > 0 {
		// An operation failed, so the guard rolled everything back
		// (whether or not its error reached us: the transaction cannot
		// commit with the mark set).
		first := slices.Min(failed)
		r, op := &results[first], ops[first]
		if op.Expected == 0 && r.curVersion == nil && mayRerun {
			return nil, true, nil
		}
		return nil, false, r.conflict(op.Key, op.Expected, op.Expected != 0 || r.curVersion != nil)
	}
	if batchErr != nil {
		vs, err := s.commitFailed(ctx, ops, id, batchErr)
		return vs, false, err
	}
	return committed(ops, results), false, nil
}

// committed returns the versions of a commit every operation of which
// applied, as Commit returns them: a check's expected version, a put's
// new one, 0 for a delete.
func committed(ops []cas.Op, results []result) []cas.Version {
	out := make([]cas.Version, len(ops))
	for i, op := range ops {
		switch op.Kind {
		case cas.OpCheck:
			out[i] = op.Expected
		case cas.OpPut:
			out[i] = cas.Version(*results[i].newVersion)
		}
	}
	return out
}

// commitFailed maps the failure of a commit no operation of which reported
// a failed check.
func (s *Store) commitFailed(ctx context.Context, ops []cas.Op, id writeid.ID, err error) ([]cas.Version, error) {
	key := ops[0].Key
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		// The server refused a statement or the implicit COMMIT at the
		// Sync (PostgreSQL never answers a committed transaction with an
		// error: a session ended after the commit sends its reply first,
		// or nothing): the transaction was rolled back. A session that
		// ended (57P01...) may take the next attempt.
		if transientCodes[pgErr.Code] {
			return nil, &transientError{op: "commit", key: key, why: "not applied", err: err}
		}
		return nil, s.serverError("commit", key, ops[0].Expected, pgErr)
	}
	if !sent(err) {
		return nil, &transientError{op: "commit", key: key, why: "not sent", err: err}
	}
	writes := sqlrows.WrittenKeys(ops)
	if len(writes) == 0 {
		// Only checks: nothing visible was written, whatever happened.
		return nil, fmt.Errorf("pgcas: commit: connection lost, checks not confirmed: %w", err)
	}
	if vs, ok := s.resolveCommit(ctx, ops, writes, id); ok {
		return vs, nil
	}
	return nil, &cas.AmbiguousError{Op: "commit", Key: writes[0], WriteID: id.UUID(), Err: err}
}

// resolveCommit reads the written keys back and reports whether the commit
// tagged id applied (sqlrows.Resolve).
func (s *Store) resolveCommit(ctx context.Context, ops []cas.Op, writes []string, id writeid.ID) ([]cas.Version, bool) {
	if ctx.Err() != nil {
		return nil, false
	}
	rows, err := s.pool.Query(ctx, s.sqlResolveMany, writes)
	if err != nil {
		return nil, false
	}
	defer rows.Close()
	return sqlrows.Resolve(ops, id, rows)
}
