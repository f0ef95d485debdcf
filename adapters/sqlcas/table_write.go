package sqlcas

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"reflect"
	"strings"

	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/internal/rowupdate"
)

func (t *Table[T]) update(ctx context.Context, row T, token uint64, fenced bool) (T, error) {
	var zero T
	key := t.layout.KeyOf(&row)
	expected := t.layout.VersionOf(&row)
	if expected == 0 {
		return zero, rowupdate.ZeroVersion("update", key)
	}
	if expected > math.MaxInt64 {
		return zero, &cas.ConflictError{Key: fmt.Sprint(key), Expected: expected}
	}
	vals := t.layout.WritableValues(&row)
	var args []any
	query := t.sqlUpd
	if fenced {
		query = t.sqlUpdF
	}
	if t.d == Postgres {
		args = append([]any{key, int64(expected)}, vals...)
		if fenced {
			args = append(args, int64(token))
		}
	} else {
		args = vals
		if fenced {
			args = append(args, int64(token))
		}
		args = append(args, key, int64(expected))
		if fenced {
			args = append(args, int64(token))
		}
	}
	for run := 1; ; run++ {
		out, ok, err := t.runUpdate(ctx, query, args, &row, expected)
		if err != nil {
			return zero, t.writeError("update", key, err, true)
		}
		if ok {
			return out, nil
		}
		cur, err := t.get(ctx, t.q, t.currentSQL(), "update", key)
		if errors.Is(err, cas.ErrNotFound) {
			return zero, &cas.ConflictError{Key: fmt.Sprint(key), Expected: expected, HasCurrent: true, Current: cas.Item{Key: fmt.Sprint(key)}}
		}
		if err != nil {
			return zero, &cas.ConflictError{Key: fmt.Sprint(key), Expected: expected, Err: err}
		}
		cv := t.layout.VersionOf(&cur)
		if fenced {
			if f := rowupdate.ToVersion(reflect.ValueOf(&cur).Elem().FieldByIndex(t.layout.Columns[t.layout.Fence].Index)); uint64(f) > token {
				return cur, &cas.FencedError{Key: fmt.Sprint(key), Token: token, Highest: uint64(f)}
			}
		}
		if cv != expected {
			return cur, &cas.ConflictError{Key: fmt.Sprint(key), Expected: expected, HasCurrent: true, Current: cas.Item{Key: fmt.Sprint(key), Version: cv}}
		}
		if run >= maxWriteRuns {
			return zero, &cas.ConflictError{Key: fmt.Sprint(key), Expected: expected}
		}
	}
}

// runUpdate runs an Update statement once and returns the row as stored
// when it applied.
func (t *Table[T]) runUpdate(ctx context.Context, query string, args []any, row *T, expected cas.Version) (T, bool, error) {
	var out T
	if t.d == Postgres {
		rows, err := t.q.QueryContext(ctx, query+` SELECT `+t.selCols+` FROM w`, args...)
		if err != nil {
			return out, false, err
		}
		defer rows.Close()
		if !rows.Next() {
			return out, false, rows.Err()
		}
		if err := rows.Scan(t.layout.Targets(&out)...); err != nil {
			return out, false, err
		}
		return out, true, rows.Close()
	}
	res, err := t.prep.exec(ctx, t.q, query, args...)
	if err != nil {
		return out, false, err
	}
	n, err := res.RowsAffected()
	if err != nil || n == 0 {
		return out, false, err
	}
	out = *row
	t.layout.SetVersion(&out, expected+1)
	if t.layout.Fence >= 0 && query == t.sqlUpdF {
		f := reflect.ValueOf(&out).Elem().FieldByIndex(t.layout.Columns[t.layout.Fence].Index)
		tok := args[len(args)-1].(int64)
		if f.CanInt() {
			f.SetInt(tok)
		} else {
			f.SetUint(uint64(tok))
		}
	}
	return out, true, nil
}

// Delete deletes the row with key if its version is expected (not 0). A
// stale version is a *cas.ConflictError with the current version; a row
// that does not exist is the same with Current.Version 0 (also matching
// cas.ErrNotFound). The row's versions are never given to the key again.
func (t *Table[T]) Delete(ctx context.Context, key any, expected cas.Version) error {
	if err := rowupdate.CheckDelete(key, expected); err != nil {
		return err
	}
	key, err := t.layout.BindKey("delete", key)
	if err != nil {
		return err
	}
	conflict := func(cur sql.NullInt64) error {
		return &cas.ConflictError{Key: fmt.Sprint(key), Expected: expected, HasCurrent: true,
			Current: cas.Item{Key: fmt.Sprint(key), Version: cas.Version(max(cur.Int64, 0))}}
	}
	if t.d == Postgres {
		var (
			done bool
			cur  sql.NullInt64
		)
		if err := t.q.QueryRowContext(ctx, t.sqlDel, key, int64(expected)).Scan(&done, &cur); err != nil {
			return t.writeError("delete", key, err, true)
		}
		if done {
			return nil
		}
		return conflict(cur)
	}
	tx, err := t.begin(ctx)
	if err != nil {
		return t.writeError("delete", key, err, false)
	}
	var n int64
	err = func() error {
		res, err := tx.q.ExecContext(ctx, t.sqlDel, key, int64(expected))
		if err != nil {
			return err
		}
		if n, err = res.RowsAffected(); err != nil || n == 0 {
			return err
		}
		res, err = tx.q.ExecContext(ctx, t.sqlRaise, int64(expected), t.raw)
		if err != nil {
			return err
		}
		if m, err := res.RowsAffected(); err == nil && m == 0 && t.d == SQLite {
			return fmt.Errorf("sqlcas: no version counter for table %s: create it with CreateCounter", t.name)
		}
		return nil
	}()
	if err != nil {
		tx.rollback()
		return t.writeError("delete", key, err, false)
	}
	if n == 0 {
		tx.rollback()
		cur, err := t.get(ctx, t.q, t.currentSQL(), "delete", key)
		if errors.Is(err, cas.ErrNotFound) {
			return conflict(sql.NullInt64{})
		}
		if err != nil {
			return &cas.ConflictError{Key: fmt.Sprint(key), Expected: expected, Err: err}
		}
		return conflict(sql.NullInt64{Int64: int64(t.layout.VersionOf(&cur)), Valid: true})
	}
	if err := tx.commit(ctx); err != nil {
		return t.writeError("delete", key, err, true)
	}
	return nil
}

// autoIncrement reports whether MySQL fills t's key column with
// AUTO_INCREMENT, asked once per table with SHOW COLUMNS (which sees
// temporary tables too, and takes the table's quoted name as every
// statement does).
func (t *Table[T]) autoIncrement(ctx context.Context) (bool, error) {
	switch t.autoInc.Load() {
	case 1:
		return true, nil
	case 2:
		return false, nil
	}
	var field, typ, null, key, def, extra sql.NullString
	col := strings.ReplaceAll(t.layout.KeyColumn().Name, "'", "''")
	err := t.q.QueryRowContext(ctx, `SHOW COLUMNS FROM `+t.name+` WHERE Field = '`+col+`'`).Scan(&field, &typ, &null, &key, &def, &extra)
	if err != nil {
		return false, fmt.Errorf("reading whether the key column is AUTO_INCREMENT: %w", err)
	}
	auto := strings.Contains(strings.ToLower(extra.String), "auto_increment")
	if auto {
		t.autoInc.Store(1)
	} else {
		t.autoInc.Store(2)
	}
	return auto, nil
}
