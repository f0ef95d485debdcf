package sqlcas

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/occkit/occkit/cas"
)

// draw takes the next version from the counter (MySQL, SQLite), in the
// transaction q.
func (t *Table[T]) draw(ctx context.Context, q Querier) (int64, error) {
	if t.d == SQLite {
		var v int64
		err := q.QueryRowContext(ctx, t.sqlDraw, t.raw).Scan(&v)
		if errors.Is(err, sql.ErrNoRows) {
			return 0, fmt.Errorf("sqlcas: no version counter for table %s: create it with CreateCounter", t.name)
		}
		return v, err
	}
	res, err := q.ExecContext(ctx, t.sqlDraw, t.raw)
	if err != nil {
		return 0, err
	}
	if n, err := res.RowsAffected(); err != nil {
		return 0, err
	} else if n == 0 {
		return 0, fmt.Errorf("sqlcas: no version counter for table %s: create it with CreateCounter", t.name)
	}
	return res.LastInsertId()
}

// duplicate reports a unique violation.
func (t *Table[T]) duplicate(err error) bool { return isDuplicate(err) }

// isDuplicate reports a unique violation.
func isDuplicate(err error) bool {
	if me, ok := asMySQL(err); ok {
		return me.Number == mysqlDupEntry
	}
	if pe, ok := asPg(err); ok {
		return pe.Code == pgUniqueViolation
	}
	var se sqliteCoder
	if errors.As(err, &se) {
		return se.Code() == 1555 || se.Code() == 2067 // SQLITE_CONSTRAINT_PRIMARYKEY, _UNIQUE
	}
	return false
}

// writeError maps the failure of a write. sent says the statement (or
// COMMIT) may have reached the server when the error is not the server's
// answer: an application's row has no write id, so a lost reply stays
// ambiguous.
func (t *Table[T]) writeError(op string, key any, err error, sent bool) error {
	k := fmt.Sprint(key)
	switch {
	case isConflict(err):
		return &cas.ConflictError{Key: k, Err: err}
	case isBusy(err), sessionEnded(err):
		return &transientError{op: op, key: k, why: "not applied", err: err}
	case t.missingSequence(err):
		return fmt.Errorf("sqlcas: %s %s key %v: version sequence %s does not exist (TableConfig.Counter; empty means "+
			"\"<table>_<version column>_seq\", the sequence of a bigserial version column): create it with CreateCounter, "+
			"or in a migration, CREATE SEQUENCE %[4]s starting above the table's largest version (docs/sql.md): %[5]w",
			op, t.name, key, t.sequence(), err)
	case answered(err):
		return fmt.Errorf("sqlcas: %s %s key %v: %w", op, t.name, key, err)
	case notSent(err), !sent && !t.inTx:
		return &transientError{op: op, key: k, why: "not applied", err: err}
	case t.inTx:
		return fmt.Errorf("sqlcas: %s %s key %v inside the caller's transaction: %w", op, t.name, key, err)
	}
	return &cas.AmbiguousError{Op: op, Key: k, Err: err}
}

// sequence returns the quoted name of a PostgreSQL Table's version
// sequence, from the nextval() its statements use.
func (t *Table[T]) sequence() string {
	q := strings.TrimSuffix(strings.TrimPrefix(t.nextval, "nextval('"), "'::regclass)")
	return strings.ReplaceAll(q, "''", "'")
}

// missingSequence reports whether err is PostgreSQL's answer that the
// version sequence does not exist (undefined_table naming it, and not the
// table).
func (t *Table[T]) missingSequence(err error) bool {
	pe, ok := asPg(err)
	if !ok || t.d != Postgres || pe.Code != pgUndefinedTable {
		return false
	}
	name := strings.ReplaceAll(strings.TrimSuffix(strings.TrimPrefix(t.sequence(), `"`), `"`), `""`, `"`)
	return strings.Contains(pe.Message, `"`+name+`"`)
}
