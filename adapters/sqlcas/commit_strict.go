package sqlcas

// Strict commits (MariaDB): the commit of ops that all write keys expected
// live as one UPDATE in autocommit, with no transaction and no compound
// statement: a row not at its expected version makes the statement fail,
// and a statement that fails writes nothing.

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/internal/writeid"
)

// erBadNull is MySQL's error for NULL written to a NOT NULL column
// (ER_BAD_NULL_ERROR), an error rather than a warning in strict mode.
const erBadNull = 1048

// rowsSeen are keys a store knows to have a row: found live by a read
// outside a caller's transaction, or written by a write or commit that
// committed. A store never removes a row, so a key once seen keeps its
// row; the strict commit, which cannot refuse a key without a row (its
// UPDATE would write the others), is taken only when every key was
// seen. At most maxRowsSeen keys: past that the set starts again empty
// (the keys then take the transaction's way until seen again). Shared by
// With's copies; safe for concurrent use.
type rowsSeen struct {
	m sync.Map // key → struct{}
	n atomic.Int64
}

const maxRowsSeen = 1 << 16

// note records keys as having rows.
func (r *rowsSeen) note(keys ...string) {
	for _, k := range keys {
		if _, loaded := r.m.LoadOrStore(k, struct{}{}); !loaded && r.n.Add(1) > maxRowsSeen {
			r.m.Clear()
			r.n.Store(0)
		}
	}
}

// all reports whether every op's key was seen.
func (r *rowsSeen) all(ops []cas.Op) bool {
	for _, op := range ops {
		if _, ok := r.m.Load(op.Key); !ok {
			return false
		}
	}
	return true
}

// strictUsable reports whether Commit may take commitStrict for ops (all
// writes of keys expected live): on a server not known to refuse SET
// STATEMENT, outside a caller's transaction, every key seen with a row.
func (s *Store) strictUsable(ops []cas.Op) bool {
	return s.d == MySQL && !s.inTx && s.strict.Load() != blocksRefused && s.seen.all(ops)
}

// strictApply writes every op of a commit of keys expected live in one
// UPDATE that fails unless every row is live at its expected version: a
// row that is not gets version NULL, which strict mode (set for this
// statement alone with MariaDB's SET STATEMENT, whatever the session's
// sql_mode) refuses with ER_BAD_NULL_ERROR, and InnoDB rolls the whole
// statement back. version is assigned first, so that its check sees the
// row's value before the statement's own.
//
// MySQL dialect only. Args: for each put its key and expected version, then the same for
// each delete; for each write its key and value (NULL for a delete); the
// write id; every written key.
func (c *commitStatements) strictApply(puts, deletes int) string {
	var b strings.Builder
	b.WriteString(`SET STATEMENT sql_mode = 'STRICT_ALL_TABLES' FOR UPDATE ` + c.table + ` SET version = CASE k`)
	for i := range puts + deletes {
		next := "version + 1"
		if i >= puts {
			next = "version"
		}
		b.WriteString(` WHEN ? THEN IF(version = ? AND value IS NOT NULL, ` + next + `, NULL)`)
	}
	b.WriteString(` END, value = CASE k`)
	for range puts + deletes {
		b.WriteString(` WHEN ? THEN ?`)
	}
	b.WriteString(` END, write_id = ? WHERE k IN (?` + strings.Repeat(`, ?`, puts+deletes-1) + `)`)
	return b.String()
}

// strictArgs returns strictApply's text and arguments for ops (all writes
// of keys expected live), and the versions the commit gives them.
func (s *Store) strictArgs(ops []cas.Op, id writeid.ID) (text string, args []any, vs []cas.Version) {
	vs = make([]cas.Version, len(ops))
	var puts, deletes, values, keys []any
	for i, op := range ops {
		keys = append(keys, op.Key)
		if op.Kind == cas.OpDelete {
			deletes = append(deletes, op.Key, int64(op.Expected))
			values = append(values, op.Key, nil)
			continue
		}
		v := op.Value
		if v == nil {
			v = []byte{}
		}
		puts = append(puts, op.Key, int64(op.Expected))
		values = append(values, op.Key, v)
		vs[i] = op.Expected + 1
	}
	args = append(append(append(append(puts, deletes...), values...), id[:]), keys...)
	return s.cm.strictApply(len(puts)/2, len(deletes)/2), args, vs
}

// commitStrict is Commit of ops that all write keys expected live
// (checkedApplies) and were all seen with a row (strictUsable), outside a
// caller's transaction, on MariaDB: one
// statement in autocommit (strictApply), where MySQL needs BEGIN, the
// UPDATE and COMMIT, and a compound statement costs the server as much
// again as the UPDATE. A refused commit reads its conflict's current
// items (checkedConflict). done is false when the server does not know
// the statement (MySQL: nothing ran; Commit then takes its usual way, as
// it will from now on).
//
// A reply lost after the statement was sent leaves the outcome unknown,
// as a lost reply to COMMIT does: the write ids tell (resolveCommit), or
// the error is a *cas.AmbiguousError.
func (s *Store) commitStrict(ctx context.Context, ops []cas.Op, id writeid.ID) (vs []cas.Version, err error, done bool) {
	text, args, vs := s.strictArgs(ops, id)
	var n int64
	err = onConn(ctx, s.q, func(q Querier) error {
		res, err := q.ExecContext(ctx, text, args...)
		if err == nil {
			n, err = res.RowsAffected()
		}
		return err
	})
	if me, ok := asMySQL(err); ok && me.Number == erBadNull {
		s.strict.Store(blocksRun)
		return nil, s.checkedConflict(ctx, ops), true
	}
	if err != nil {
		if refusesBlocks(err, s.strict) {
			return nil, nil, false
		}
		if !answered(err) && !notSent(err) {
			if vs, ok := s.resolveCommit(ctx, ops, id); ok {
				return vs, nil, true
			}
		}
		return nil, s.commitError(ctx, ops, id, "commit", err), true
	}
	s.strict.Store(blocksRun)
	if n != int64(len(ops)) {
		// Only a key whose row is gone can be short (every key was seen
		// with a row): its other keys are written, and no statement of a
		// store removes a row.
		return nil, fmt.Errorf("sqlcas: commit: %d of %d rows written: a key seen with a row has none in %s (rows of a Store's table must never be deleted: see docs/sql.md)", n, len(ops), s.name), true
	}
	return vs, nil, true
}
