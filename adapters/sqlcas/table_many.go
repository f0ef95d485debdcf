package sqlcas

import (
	"context"
	"fmt"
	"reflect"
	"strings"

	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/internal/rowupdate"
)

// commitMany is ModifyMany's commit. On MySQL/MariaDB, when every write
// updates a row read (a transfer's shape), the key is an integer and the
// table is not bound to the caller's transaction (oneUpdate), the rows go
// in one UPDATE (updateMany), in a transaction of their own (runMany: one
// round trip on MariaDB, three elsewhere) instead of one per row. A count of rows short of the writes
// means one of them moved: the transaction rolls back and the first moved
// row, in key order, is read for the conflict. Other shapes and dialects
// write the rows one statement each (rowupdate.CommitInOrder): on SQLite,
// in the same process, the one UPDATE measured no faster than two
// (docs/tables.md).
func (t *Table[T]) commitMany(ctx context.Context, writes []rowupdate.Write[T]) ([]rowupdate.Row[T], int, rowupdate.Row[T], error) {
	var none rowupdate.Row[T]
	if !t.oneUpdate() || len(writes) < 2 {
		return rowupdate.CommitInOrder(ctx, t.rowTable(), writes)
	}
	for _, w := range writes {
		if w.Expected == 0 {
			return rowupdate.CommitInOrder(ctx, t.rowTable(), writes)
		}
	}
	order := rowupdate.KeyOrder(writes)
	sorted := make([]rowupdate.Write[T], len(order))
	for j, i := range order {
		sorted[j] = writes[i]
	}
	keys := t.writeKeys(sorted)
	all, err := t.runMany(ctx, sorted, keys)
	if err != nil {
		return nil, -1, none, err
	}
	if !all {
		j, cur, err := t.movedRow(ctx, sorted, keys)
		if j >= 0 {
			return nil, order[j], cur, err
		}
		return nil, -1, none, err
	}
	stored := make([]rowupdate.Row[T], len(writes))
	for i, w := range writes {
		stored[i] = t.updated(w)
	}
	return stored, -1, none, nil
}

// runMany writes sorted (writes in key order, keys their keys) with
// updateMany's statements in a transaction of their own, and reports
// whether every row was at its version; if not, nothing was written. On
// MariaDB it is one round trip (blockOf); otherwise BEGIN, the
// statements and COMMIT.
func (t *Table[T]) runMany(ctx context.Context, sorted []rowupdate.Write[T], keys []any) (all bool, err error) {
	if short, ran, err := sendBlock(ctx, t.q, t.blocks, t.updateManyStmts(sorted, keys)); ran {
		if err != nil {
			return false, t.writeError("modify-many", keys[0], err, !notSent(err))
		}
		return short < 0, nil
	}
	tx, err := t.begin(ctx)
	if err != nil {
		return false, t.writeError("modify-many", keys[0], err, false)
	}
	n, err := t.updateMany(ctx, tx.q, sorted, keys)
	if err != nil {
		tx.rollback()
		return false, t.writeError("modify-many", keys[0], err, false) // never committed
	}
	if n != int64(len(sorted)) {
		tx.rollback()
		return false, nil
	}
	if err := tx.commit(ctx); err != nil {
		return false, t.writeError("modify-many", keys[0], err, true)
	}
	return true, nil
}

// oneUpdate reports whether the table's commits of updates go in one
// UPDATE (updateMany): on MySQL/MariaDB, outside the caller's
// transaction, for an integer key. InnoDB takes an IN list's row locks in
// the index's order, which for a string key under a case-insensitive or
// accent-insensitive collation is not the byte order in which the other
// commits and escalated attempts lock rows: the two could deadlock.
func (t *Table[T]) oneUpdate() bool {
	if t.d != MySQL || t.inTx {
		return false
	}
	switch reflect.TypeFor[T]().FieldByIndex(t.layout.KeyColumn().Index).Type.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return true
	}
	return false
}

// updateManyParams bounds the placeholders of one UPDATE of updateMany:
// a server-side prepared statement takes at most 65,535, and an inlined
// one must fit max_allowed_packet. More rows go in several UPDATEs of
// the same transaction, in key order.
const updateManyParams = 4096

// writeKeys returns the key field of each write's row.
func (t *Table[T]) writeKeys(writes []rowupdate.Write[T]) []any {
	keys := make([]any, len(writes))
	for i, w := range writes {
		keys[i] = t.layout.KeyOf(&w.Row)
	}
	return keys
}

// updated is w's row as an update at w.Expected stores it (MySQL: the
// version goes up by one).
func (t *Table[T]) updated(w rowupdate.Write[T]) rowupdate.Row[T] {
	row := w.Row
	t.layout.SetVersion(&row, w.Expected+1)
	return rowupdate.Row[T]{Value: row, Version: w.Expected + 1}
}

// updateMany runs, on q, the one UPDATE of writes (rows read, in key
// order; keys their keys) that commitMany and Txn's MySQL pipeline send,
//
//	UPDATE t SET c = CASE k WHEN ? THEN ? ... END, ..., v = v + 1
//	WHERE k IN (?, ...) AND CASE k WHEN ? THEN v = ? ... END
//
// and returns the rows it changed: every row at its version counts (its
// version changes). InnoDB looks the IN list's keys up in the index's
// order, for an integer key (oneUpdate) the order in which ModifyMany's
// other commits and escalated attempts lock rows. At most
// updateManyParams placeholders go in one UPDATE.
func (t *Table[T]) updateMany(ctx context.Context, q Querier, writes []rowupdate.Write[T], keys []any) (int64, error) {
	per := t.updatePer()
	var n int64
	for len(writes) > 0 {
		m := min(per, len(writes))
		got, err := t.updateRows(ctx, q, writes[:m], keys[:m])
		if err != nil {
			return n, err
		}
		n += got
		writes, keys = writes[m:], keys[m:]
	}
	return n, nil
}

// updateManyStmts returns updateMany's statements, unsent.
func (t *Table[T]) updateManyStmts(writes []rowupdate.Write[T], keys []any) []blockStmt {
	per := t.updatePer()
	var out []blockStmt
	for len(writes) > 0 {
		m := min(per, len(writes))
		text, args := t.updateRowsStmt(writes[:m], keys[:m])
		out = append(out, blockStmt{text: text, args: args, rows: m})
		writes, keys = writes[m:], keys[m:]
	}
	return out
}

// updateRows is one UPDATE of updateMany.
func (t *Table[T]) updateRows(ctx context.Context, q Querier, writes []rowupdate.Write[T], keys []any) (int64, error) {
	text, args := t.updateRowsStmt(writes, keys)
	res, err := q.ExecContext(ctx, text, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// updatePer is how many rows one UPDATE of updateMany writes at most.
func (t *Table[T]) updatePer() int {
	cols := 0
	for c := range t.layout.Columns {
		if t.layout.Writable(c) {
			cols++
		}
	}
	return max(updateManyParams/(2*cols+3), 1)
}

// updateRowsStmt is updateRows's statement and its arguments.
func (t *Table[T]) updateRowsStmt(writes []rowupdate.Write[T], keys []any) (string, []any) {
	k, v := t.layout.KeyColumn().Quoted, t.layout.VersionColumn().Quoted
	var (
		b    strings.Builder
		args []any
	)
	b.WriteString(`UPDATE ` + t.name + ` SET `)
	for c, col := range t.layout.Columns {
		if !t.layout.Writable(c) {
			continue
		}
		b.WriteString(col.Quoted + ` = CASE ` + k)
		for i, w := range writes {
			b.WriteString(` WHEN ? THEN ?`)
			args = append(args, keys[i], reflect.ValueOf(&w.Row).Elem().FieldByIndex(col.Index).Interface())
		}
		b.WriteString(` END, `)
	}
	b.WriteString(v + ` = ` + v + ` + 1 WHERE ` + k + ` IN (` + strings.TrimSuffix(strings.Repeat("?, ", len(writes)), ", ") + `) AND CASE ` + k)
	args = append(args, keys...)
	for i, w := range writes {
		b.WriteString(` WHEN ? THEN ` + v + ` = ?`)
		args = append(args, keys[i], int64(w.Expected))
	}
	b.WriteString(` END`)
	return b.String(), args
}

// movedRow is the conflict of an updateMany that found a row moved: the
// index of the first write (writes in key order) whose row is not at the
// version it expected, with the row as it is now (Version 0: absent),
// read in one round trip. Every row back at its version (they moved and
// were read stale) is a conflict without a current row, at -1: the retry
// reads again.
func (t *Table[T]) movedRow(ctx context.Context, writes []rowupdate.Write[T], keys []any) (int, rowupdate.Row[T], error) {
	rows, err := t.getMany(ctx, keys)
	if err != nil {
		return -1, rowupdate.Row[T]{}, &cas.ConflictError{Key: fmt.Sprint(keys[0]), Expected: writes[0].Expected, Err: err}
	}
	now := make(map[string]T, len(rows))
	for _, r := range rows {
		now[fmt.Sprint(t.layout.KeyOf(&r))] = r
	}
	for i := range writes {
		ks := fmt.Sprint(keys[i])
		cur, ok := now[ks]
		if !ok {
			return i, rowupdate.Row[T]{}, &cas.ConflictError{Key: ks, Expected: writes[i].Expected, HasCurrent: true, Current: cas.Item{Key: ks}}
		}
		if cv := t.layout.VersionOf(&cur); cv != writes[i].Expected {
			return i, rowupdate.Row[T]{Value: cur, Version: cv}, &cas.ConflictError{Key: ks, Expected: writes[i].Expected, HasCurrent: true, Current: cas.Item{Key: ks, Version: cv}}
		}
	}
	return -1, rowupdate.Row[T]{}, &cas.ConflictError{Key: fmt.Sprint(keys[0]), Expected: writes[0].Expected}
}
