package sqlcas

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/occkit/occkit/cas"
)

// Add adds n to the integer column of the row with key, if the result lies
// within b, and returns the row as stored: a bounded delta of one column
// (the stock of an items row),
//
//	UPDATE items SET stock = stock + ?, version = version + 1
//	WHERE id = ? AND stock BETWEEN ? AND ?
//
// (on PostgreSQL the version is drawn from the table's sequence, as
// Update's are)
//
// so concurrent deltas of one row wait for each other on the row and never
// conflict. PostgreSQL and SQLite: one statement (RETURNING the row).
// MariaDB: one compound statement (BEGIN NOT ATOMIC: the UPDATE, a
// SELECT of the row as stored, COMMIT, on the server, so that the row's
// lock is held for no round trip). MySQL, which has no such statements,
// and inside the caller's transaction (With): a transaction (BEGIN, the
// UPDATE, the SELECT, COMMIT; the caller's own under With). The row gets
// a new version, so a concurrent Modify or Update of it conflicts as
// usual. A result outside b (or the column's type) fails with a
// *cas.BoundError carrying the current value, a NULL column with
// cas.ErrNotInteger; nothing is written. A missing row fails with an
// error matching cas.ErrNotFound: Add does not insert. The column is
// named as in T's db tags; it may not be the key, version or fence
// column, and its field must be a signed integer. A lost reply is a
// *cas.AmbiguousError (an application's row has no write id).
func (t *Table[T]) Add(ctx context.Context, key any, column string, n int64, b cas.Bounds) (T, error) {
	var zero T
	key, err := t.layout.BindKey("add", key)
	if err != nil {
		return zero, err
	}
	col, lo, hi, err := t.layout.Delta(ctx, "sqlcas", t.name, key, column, n, b)
	if err != nil {
		return zero, err
	}
	c, k, v := t.layout.Columns[col].Quoted, t.layout.KeyColumn().Quoted, t.layout.VersionColumn().Quoted
	var (
		out     T
		applied bool
	)
	switch t.d {
	case Postgres, SQLite:
		query := `UPDATE ` + t.name + ` SET ` + c + ` = ` + c + ` + ?, ` + v + ` = ` + v + ` + 1
WHERE ` + k + ` = ? AND ` + c + ` BETWEEN ? AND ? RETURNING ` + t.selCols
		args := []any{n, key, lo, hi}
		if t.d == Postgres {
			// Versions come from the table's sequence, as Update's do: a
			// version + 1 here could be drawn again by an Update (ABA).
			query = `UPDATE ` + t.name + ` SET ` + c + ` = ` + c + ` + $1::bigint, ` + v + ` = ` + t.nextval + `
WHERE ` + k + ` = $2 AND ` + c + ` BETWEEN $3::bigint AND $4::bigint RETURNING ` + t.selCols
		}
		err = t.q.QueryRowContext(ctx, query, args...).Scan(t.layout.Targets(&out)...)
		applied = err == nil
		if errors.Is(err, sql.ErrNoRows) {
			err = nil
		}
	default: // MySQL
		out, applied, err = t.addMySQL(ctx, key, c, k, v, n, lo, hi)
	}
	switch {
	case err != nil && isOutOfRange(err):
		return zero, &cas.BoundError{Key: fmt.Sprint(key), Add: n, Bounds: b}
	case err != nil:
		return zero, t.writeError("add", key, err, true)
	case applied:
		return out, nil
	}
	cur, err := t.get(ctx, t.q, t.currentSQL(), "add", key)
	if err != nil {
		return zero, err
	}
	return cur, t.layout.DeltaRefused(&cur, col, key, n, b)
}

// addMySQL is Add on MySQL, which has no RETURNING: MariaDB's block,
// else a transaction.
func (t *Table[T]) addMySQL(ctx context.Context, key any, c, k, v string, n, lo, hi int64) (T, bool, error) {
	var out T
	update := `UPDATE ` + t.name + ` SET ` + c + ` = ` + c + ` + ?, ` + v + ` = ` + v + ` + 1
WHERE ` + k + ` = ? AND ` + c + ` BETWEEN ? AND ?`
	if !t.inTx && t.blocks.Load() != blocksRefused {
		// One round trip; a refusal answers no row.
		block := "BEGIN NOT ATOMIC\n" + blockHandler + update + ";\nIF ROW_COUNT() = 1 THEN " +
			t.sqlGet + "; COMMIT; ELSE ROLLBACK; END IF;\nEND"
		err := onConn(ctx, t.q, func(q Querier) error {
			return q.QueryRowContext(ctx, block, n, key, lo, hi, key).Scan(t.layout.Targets(&out)...)
		})
		switch {
		case err == nil, errors.Is(err, sql.ErrNoRows):
			if t.blocks.Load() != blocksRun {
				t.blocks.Store(blocksRun)
			}
			return out, err == nil, nil
		case !refusesBlocks(err, t.blocks):
			return out, false, err
		}
	}
	tx, err := t.begin(ctx)
	if err != nil {
		return out, false, err
	}
	res, err := tx.q.ExecContext(ctx, update, n, key, lo, hi)
	if err != nil {
		tx.rollback()
		return out, false, err
	}
	if affected, err := res.RowsAffected(); err != nil || affected == 0 {
		tx.rollback()
		return out, false, err
	}
	if err := tx.q.QueryRowContext(ctx, t.sqlGet, key).Scan(t.layout.Targets(&out)...); err != nil {
		tx.rollback()
		return out, false, err
	}
	if err := tx.commit(ctx); err != nil {
		return out, false, err
	}
	return out, true, nil
}

// isOutOfRange reports a value out of its column type's range (MySQL
// 1264 and 1690, PostgreSQL 22003; SQLite converts to a float instead).
func isOutOfRange(err error) bool {
	if me, ok := asMySQL(err); ok {
		return me.Number == 1264 || me.Number == 1690
	}
	if pe, ok := asPg(err); ok {
		return pe.Code == "22003"
	}
	return false
}
