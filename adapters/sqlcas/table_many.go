package sqlcas

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"

	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/internal/rowupdate"
)

// commitMany is ModifyMany's commit. On MySQL/MariaDB, when every write
// updates a row read (a transfer's shape) and the table is not bound to
// the caller's transaction, the rows go in one UPDATE, in a transaction
// of their own:
//
//	UPDATE t SET c = CASE k WHEN ? THEN ? ... END, ..., v = v + 1
//	WHERE k IN (?, ...) AND CASE k WHEN ? THEN v = ? ... END
//
// three round trips (BEGIN, the UPDATE, COMMIT) instead of one per row.
// Every row at its version counts as affected (its version changes), so a
// count short of the rows means one of them moved: the transaction rolls
// back and the first moved row, in key order, is read for the conflict.
// InnoDB looks the IN list's keys up in key order, the order in which
// ModifyMany's other commits and escalated attempts lock rows. Other
// shapes and dialects write the rows one statement each
// (rowupdate.CommitInOrder): on SQLite, in the same process, the one
// UPDATE measured no faster than two (docs/tables.md).
func (t *Table[T]) commitMany(ctx context.Context, writes []rowupdate.Write[T]) ([]rowupdate.Row[T], int, rowupdate.Row[T], error) {
	var none rowupdate.Row[T]
	if t.d != MySQL || t.inTx || len(writes) < 2 {
		return rowupdate.CommitInOrder(ctx, t.rowTable(), writes)
	}
	for _, w := range writes {
		if w.Expected == 0 {
			return rowupdate.CommitInOrder(ctx, t.rowTable(), writes)
		}
	}
	order := rowupdate.KeyOrder(writes)
	keys := make([]any, len(writes))
	vals := make([]reflect.Value, len(writes))
	for i, w := range writes {
		row := w.Row
		vals[i] = reflect.ValueOf(&row).Elem()
		keys[i] = vals[i].FieldByIndex(t.cols[t.key].Index).Interface()
	}
	k, v := t.cols[t.key].Quoted, t.cols[t.version].Quoted
	var (
		b    strings.Builder
		args []any
	)
	b.WriteString(`UPDATE ` + t.name + ` SET `)
	for c, col := range t.cols {
		if !t.writable(c) {
			continue
		}
		b.WriteString(col.Quoted + ` = CASE ` + k)
		for _, i := range order {
			b.WriteString(` WHEN ? THEN ?`)
			args = append(args, keys[i], vals[i].FieldByIndex(col.Index).Interface())
		}
		b.WriteString(` END, `)
	}
	b.WriteString(v + ` = ` + v + ` + 1 WHERE ` + k + ` IN (` + strings.TrimSuffix(strings.Repeat("?, ", len(order)), ", ") + `) AND CASE ` + k)
	for _, i := range order {
		args = append(args, keys[i])
	}
	for _, i := range order {
		b.WriteString(` WHEN ? THEN ` + v + ` = ?`)
		args = append(args, keys[i], int64(writes[i].Expected))
	}
	b.WriteString(` END`)

	first := keys[order[0]]
	tx, err := t.begin(ctx)
	if err != nil {
		return nil, -1, none, t.writeError("modify-many", first, err, false)
	}
	res, err := tx.q.ExecContext(ctx, b.String(), args...)
	var n int64
	if err == nil {
		n, err = res.RowsAffected()
	}
	if err != nil {
		tx.rollback()
		return nil, -1, none, t.writeError("modify-many", first, err, false) // never committed
	}
	if n != int64(len(writes)) {
		tx.rollback()
		return t.movedRow(ctx, writes, keys, order)
	}
	if err := tx.commit(ctx); err != nil {
		return nil, -1, none, t.writeError("modify-many", first, err, true)
	}
	stored := make([]rowupdate.Row[T], len(writes))
	for i, w := range writes {
		row := w.Row
		t.setVersion(&row, w.Expected+1)
		stored[i] = rowupdate.Row[T]{Value: row, Version: w.Expected + 1}
	}
	return stored, -1, none, nil
}

// movedRow is the conflict of a commitMany that found a row moved: the
// first write, in key order, whose row is not at the version it expected,
// with the row as it is now (Version 0: absent).
func (t *Table[T]) movedRow(ctx context.Context, writes []rowupdate.Write[T], keys []any, order []int) ([]rowupdate.Row[T], int, rowupdate.Row[T], error) {
	for _, i := range order {
		cur, err := t.get(ctx, t.q, t.currentSQL(), "modify-many", keys[i])
		switch {
		case errors.Is(err, cas.ErrNotFound):
			return nil, i, rowupdate.Row[T]{}, &cas.ConflictError{Key: fmt.Sprint(keys[i]), Expected: writes[i].Expected, HasCurrent: true, Current: cas.Item{Key: fmt.Sprint(keys[i])}}
		case err != nil:
			return nil, -1, rowupdate.Row[T]{}, &cas.ConflictError{Key: fmt.Sprint(keys[i]), Expected: writes[i].Expected, Err: err}
		}
		if cv := t.versionOf(&cur); cv != writes[i].Expected {
			return nil, i, rowupdate.Row[T]{Value: cur, Version: cv}, &cas.ConflictError{Key: fmt.Sprint(keys[i]), Expected: writes[i].Expected, HasCurrent: true, Current: cas.Item{Key: fmt.Sprint(keys[i]), Version: cv}}
		}
	}
	// Every row back at its version: they moved and were read stale. A
	// conflict without a current row: the retry reads again.
	return nil, -1, rowupdate.Row[T]{}, &cas.ConflictError{Key: fmt.Sprint(keys[order[0]]), Expected: writes[order[0]].Expected}
}
