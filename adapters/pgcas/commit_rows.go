package pgcas

import (
	"context"
	"errors"
	"strconv"
	"strings"

	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/internal/writeid"
)

// A commit whose every operation is a put of a row the caller read (at a
// version above 0: a transfer, an order and its stock) is one statement,
// with no guard: it locks the rows in key order (FOR UPDATE, which waits
// for a writer in progress and follows each row to its latest committed
// version), counts those at their expected versions, and writes them only
// when all are. A single statement is atomic, so nothing needs rolling
// back when a version moved, and the rows it locked are the current ones
// a conflict carries. On PostgreSQL each statement of a pipeline costs
// more than the work of these ones (docs/performance.md, "Multi-row
// commits on PostgreSQL"). Commits with checks keep the pipeline, whose
// checks lock FOR SHARE (checks of one row by several commits do not
// wait for each other, and CommitExclusive's checks of rows it does not
// hold stay compatible with them), as do creates, deletes and larger
// commits.

// maxListed is the most keys a statement names one by one (key IN ($1,
// ...)): commitRows's, GetMany's read and CommitExclusive's locking read.
// PostgreSQL plans a statement with key = ANY($1) again on every run (the
// plan for an array of unknown length is estimated dearer than the one
// for the array at hand, so the generic plan is never chosen), which on a
// short read costs as much as the read; a list of parameters is planned
// once per connection. Each length is a statement of its own in every
// connection's cache.
const maxListed = 8

// params returns "$from, ..., $(from+n-1)".
func params(from, n int) string {
	var b strings.Builder
	for i := range n {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString("$" + strconv.Itoa(from+i))
	}
	return b.String()
}

// listed returns the statement and arguments of a read of keys (at least
// one): list[n] with the keys one by one for n up to maxListed, else many
// with the keys as one array.
func listed(many string, list *[maxListed + 1]string, keys []string) (string, []any) {
	if len(keys) > maxListed {
		return many, []any{keys}
	}
	args := make([]any, len(keys))
	for i, k := range keys {
		args[i] = k
	}
	return list[len(keys)], args
}

// rowsCommittable reports whether ops can be committed by commitRows.
func rowsCommittable(ops []cas.Op) bool {
	if len(ops) > maxListed {
		return false
	}
	for _, op := range ops {
		if op.Kind != cas.OpPut || op.Expected == 0 {
			return false
		}
	}
	return true
}

// rowsSQL returns commitRows's statement for n puts of table t. Its
// parameters are the keys ($1...$n), their expected versions in the same
// order, their values, and the write id.
func rowsSQL(t string, n int) string {
	p := func(i int) string { return "$" + strconv.Itoa(i) }
	var match, values strings.Builder
	for i := 1; i <= n; i++ {
		if i > 1 {
			match.WriteString(" OR ")
		}
		match.WriteString("(key = " + p(i) + " AND version = " + p(n+i) + ")")
		values.WriteString(" WHEN " + p(i) + " THEN " + p(2*n+i) + "::bytea")
	}
	return `WITH lk AS (
    SELECT key, version, value, fence_token FROM ` + t + `
    WHERE key IN (` + params(1, n) + `) ORDER BY key FOR UPDATE), w AS (
    UPDATE ` + t + ` SET value = CASE key` + values.String() + ` END, version = DEFAULT, write_id = ` + p(3*n+1) + `
    WHERE key IN (` + params(1, n) + `)
    AND (SELECT count(*) FROM lk WHERE value IS NOT NULL AND (` + match.String() + `)) = ` + strconv.Itoa(n) + `
    RETURNING key, version)
SELECT lk.key, w.version, lk.version, lk.value, lk.fence_token FROM lk LEFT JOIN w USING (key)`
}

// commitRows commits ops (rowsCommittable) in one statement.
func (s *Store) commitRows(ctx context.Context, ops []cas.Op, id writeid.ID) ([]cas.Version, error) {
	n := len(ops)
	args := make([]any, 3*n+1)
	at := make(map[string]int, n)
	for i, op := range ops {
		value := op.Value
		if value == nil {
			value = []byte{}
		}
		args[i], args[n+i], args[2*n+i] = op.Key, pgVersion(op.Expected), value
		at[op.Key] = i
	}
	args[3*n] = id
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, acquireError("commit", ops[0].Key, err) // nothing sent
	}
	defer conn.Release()
	results := make([]result, n)
	rows, err := conn.Query(ctx, s.sqlRowsCommit[n], args...)
	if err == nil {
		for rows.Next() {
			var (
				key string
				r   result
			)
			if err = rows.Scan(&key, &r.newVersion, &r.curVersion, &r.curValue, &r.curToken); err != nil {
				break
			}
			if i, ok := at[key]; ok {
				results[i] = r
			}
		}
		rows.Close()
		if err == nil {
			err = rows.Err()
		}
	}
	if err != nil {
		return s.commitFailed(ctx, ops, id, err)
	}
	for i, op := range ops {
		r := &results[i]
		if r.curVersion == nil || r.curValue == nil || cas.Version(*r.curVersion) != op.Expected {
			// Nothing was written: the first operation in ops order
			// that failed, with its row as the statement locked it.
			return nil, r.conflict(op.Key, op.Expected, true)
		}
	}
	for i, op := range ops {
		if results[i].newVersion == nil {
			// Every row was at its version, so every put applied (the
			// rows were locked): a reply without one is broken.
			return nil, &cas.AmbiguousError{Op: "commit", Key: op.Key, WriteID: id.UUID(),
				Err: errors.New("pgcas: the commit's reply lacks a written row")}
		}
	}
	return committed(ops, results), nil
}
