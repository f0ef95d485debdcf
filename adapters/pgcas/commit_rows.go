package pgcas

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"

	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/internal/writeid"
)

// A commit whose every operation names a row the caller read (puts and
// checks at a version above 0: a transfer, an order and its stock) is one
// statement, with no guard: it locks the rows in key order (FOR UPDATE,
// which waits for a writer in progress and follows each row to its latest
// committed version), counts those at their expected versions, and writes
// the puts only when all are. A single statement is atomic, so nothing
// needs rolling back when a check fails, and the rows it locked are the
// current ones a conflict carries. On PostgreSQL each statement of a
// pipeline costs more than the work of these ones (docs/performance.md,
// "Multi-row commits on PostgreSQL"). Commits with creates, deletes or
// absence checks, and larger ones, go through Commit's pipeline.

// maxListed is the most keys a statement names one by one (key IN ($1,
// ...)): commitRows's, GetMany's read and CommitExclusive's locking read. PostgreSQL plans a statement
// with key = ANY($1) again on every run (the plan for an array of unknown
// length is estimated dearer than one for the array at hand, so the
// generic plan is never chosen), which on a short read costs as much as
// the read; a list of parameters is planned once per connection. Each
// length (and each count of puts and checks) is a statement of its own in
// every connection's cache.
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

// listed returns the statement and arguments of a read of keys: list[n]
// with the keys one by one for n up to maxListed, else many with the keys
// as one array.
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
		if op.Expected == 0 || (op.Kind != cas.OpPut && op.Kind != cas.OpCheck) {
			return false
		}
	}
	return true
}

// rowsShape is the shape of a commitRows statement: how many puts and
// checks it has.
type rowsShape struct{ puts, checks int }

// rowsStatements holds each shape's statement for one table.
type rowsStatements struct {
	table string
	texts sync.Map // rowsShape → string
}

// text returns the statement for shape. Its parameters are the keys of
// the puts and then of the checks ($1...$n), their expected versions in
// the same order, the puts' values, and the write id.
func (rs *rowsStatements) text(sh rowsShape) string {
	if t, ok := rs.texts.Load(sh); ok {
		return t.(string)
	}
	n := sh.puts + sh.checks
	p := func(i int) string { return "$" + strconv.Itoa(i) }
	var match, values strings.Builder
	for i := 1; i <= n; i++ {
		if i > 1 {
			match.WriteString(" OR ")
		}
		match.WriteString("(key = " + p(i) + " AND version = " + p(n+i) + ")")
	}
	for i := 1; i <= sh.puts; i++ {
		values.WriteString(" WHEN " + p(i) + " THEN " + p(2*n+i) + "::bytea")
	}
	t := rs.table
	text := `WITH lk AS (
    SELECT key, version, value, fence_token FROM ` + t + `
    WHERE key IN (` + params(1, n) + `) ORDER BY key FOR UPDATE)`
	if sh.puts > 0 {
		text += `, w AS (
    UPDATE ` + t + ` SET value = CASE key` + values.String() + ` END, version = DEFAULT, write_id = ` + p(2*n+sh.puts+1) + `
    WHERE key IN (` + params(1, sh.puts) + `)
    AND (SELECT count(*) FROM lk WHERE value IS NOT NULL AND (` + match.String() + `)) = ` + strconv.Itoa(n) + `
    RETURNING key, version)
SELECT lk.key, w.version, lk.version, lk.value, lk.fence_token FROM lk LEFT JOIN w USING (key)`
	} else {
		text += `
SELECT key, NULL::bigint, version, value, fence_token FROM lk`
	}
	rs.texts.Store(sh, text)
	return text
}

// commitRows commits ops (rowsCommittable) in one statement.
func (s *Store) commitRows(ctx context.Context, ops []cas.Op, id writeid.ID) ([]cas.Version, error) {
	var sh rowsShape
	for _, op := range ops {
		if op.Kind == cas.OpPut {
			sh.puts++
		}
	}
	sh.checks = len(ops) - sh.puts
	n := len(ops)
	args := make([]any, 2*n+sh.puts+1)
	at := make(map[string]int, n)
	put, check := 0, sh.puts // positions of the next put and check
	for i, op := range ops {
		j := &check
		if op.Kind == cas.OpPut {
			j = &put
			value := op.Value
			if value == nil {
				value = []byte{}
			}
			args[2*n+*j] = value
		}
		args[*j], args[n+*j] = op.Key, pgVersion(op.Expected)
		*j++
		at[op.Key] = i
	}
	args[len(args)-1] = id
	if sh.puts == 0 {
		args = args[:n] // checks only: the statement reads the rows
	}
	results := make([]result, n)
	rows, err := s.pool.Query(ctx, s.rows.text(sh), args...)
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
		if op.Kind == cas.OpPut && results[i].newVersion == nil {
			// Every row was at its version, so every put applied
			// (the rows were locked): a reply without one is broken.
			return nil, &cas.KeyError{Op: "commit", Key: op.Key, Err: errors.New("pgcas: the commit's reply lacks a written row; its outcome is unknown")}
		}
	}
	return committed(ops, results), nil
}
