package pgcas

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/occkit/occkit/cas"
)

// Add adds n to the integer column of the row with key, if the result lies
// within b, and returns the row as stored: a bounded delta of one column
// (the stock of an items row), in one statement,
//
//	UPDATE items SET stock = stock + $n, version = nextval(...)
//	WHERE id = $key AND stock BETWEEN $lo AND $hi RETURNING ...
//
// so concurrent deltas of one row wait for each other on the row and
// never conflict. The row gets a new version, so a concurrent Modify or
// Update of it conflicts as usual. A result outside b (or the column's
// type) fails with a *cas.BoundError carrying the current value, and a
// NULL column with cas.ErrNotInteger; nothing is written. A missing row
// fails with an error matching cas.ErrNotFound: Add does not insert. The
// column is named as in T's db tags; it may not be the key, version or
// fence column, and its field must be a signed integer.
//
// A row of an application's table carries no write id: a lost reply is a
// *cas.AmbiguousError, never retried (see occ.Add for deltas of a store's
// keys, which are resolved).
func (t *Table[T]) Add(ctx context.Context, key any, column string, n int64, b cas.Bounds) (T, error) {
	var zero T
	key, err := t.layout.BindKey("add", key)
	if err != nil {
		return zero, err
	}
	col, lo, hi, err := t.layout.Delta(ctx, "pgcas", t.name, key, column, n, b)
	if err != nil {
		return zero, err
	}
	c := t.layout.Columns[col].Quoted
	sql := `WITH w AS (
    UPDATE ` + t.name + ` SET ` + c + ` = ` + c + ` + $2::bigint, ` + t.layout.VersionColumn().Quoted + ` = ` + t.nextval + `
    WHERE ` + t.layout.KeyColumn().Quoted + ` = $1 AND ` + c + ` BETWEEN $3::bigint AND $4::bigint
    RETURNING ` + t.selCols + `)` + t.sqlTail
	out, cur, r, err := t.run(ctx, sql, key, n, lo, hi)
	var pgErr *pgconn.PgError
	switch {
	case errors.As(err, &pgErr) && pgErr.Code == codeNumericOutOfRange:
		// Past the range of the column's type: a bound of its own.
		return zero, &cas.BoundError{Key: fmt.Sprint(key), Add: n, Bounds: b}
	case err != nil:
		return zero, t.writeError(ctx, "add", key, err)
	case r.written:
		return out, nil
	case !r.exists:
		return zero, &cas.KeyError{Op: "add", Key: fmt.Sprint(key), Err: cas.ErrNotFound}
	}
	return cur, t.layout.DeltaRefused(&cur, col, key, n, b)
}
