package sqlcas

import (
	"context"
	"errors"
	"fmt"

	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/internal/rowupdate"
)

// exclusive is the exclusive read-modify-write of one row that Modify
// escalates to for a call that keeps losing (cas.Exclusive): in one
// transaction (the caller's, under With) it reads the row FOR UPDATE
// (SQLite: in a BEGIN IMMEDIATE transaction), calls fn, and inserts or
// updates what fn returns. On PostgreSQL, Store's ExclusiveTimeout
// default bounds a holder that stops answering (the server ends its idle
// session).
func (t *Table[T]) exclusive(ctx context.Context, key any, fn func(cur rowupdate.Row[T]) (T, bool, error)) (rowupdate.Row[T], error) {
	tx, err := t.begin(ctx)
	if err != nil {
		return rowupdate.Row[T]{}, t.writeError("modify", key, err, false)
	}
	in := *t
	in.q, in.inTx = tx.q, true
	if err := holdTimeout(ctx, t.d, tx, t.inTx, DefaultExclusiveTimeout); err != nil {
		tx.rollback()
		return rowupdate.Row[T]{}, t.writeError("modify", key, err, false)
	}
	var cur rowupdate.Row[T]
	row, err := in.get(ctx, tx.q, t.sqlGet+t.d.forUpdate(), "modify", key)
	switch {
	case errors.Is(err, cas.ErrNotFound):
	case err != nil:
		tx.rollback()
		return rowupdate.Row[T]{}, err
	default:
		cur = t.layout.Row(row)
	}
	next, write, err := fn(cur)
	if err != nil || !write {
		tx.rollback()
		return cur, err
	}
	out, err := in.rowTable().WriteAt(ctx, cur.Version, next)
	if err != nil {
		tx.rollback()
		return rowupdate.Row[T]{}, t.exclusiveError(key, cur.Version, err)
	}
	if err := tx.commit(ctx); err != nil {
		return rowupdate.Row[T]{}, t.exclusiveError(key, cur.Version, t.writeError("modify", key, err, true))
	}
	return t.layout.Row(out), nil
}

// exclusiveError maps a PostgreSQL session ended for holding the row idle
// too long to a conflict: nothing was written.
func (t *Table[T]) exclusiveError(key any, expected cas.Version, err error) error {
	if pe, ok := asPg(err); ok && pe.Code == pgIdleInTxTimeout {
		return &cas.ConflictError{Key: fmt.Sprint(key), Expected: expected, Err: err}
	}
	return err
}

// runTx runs fn with the table bound to a transaction of its own (on
// SQLite, BEGIN IMMEDIATE on one connection), and commits it when fn
// returns nil (ModifyMany's commit). On a table bound to the caller's
// transaction (With), fn runs inside a savepoint, which a failure rolls
// back to, so that the caller's transaction keeps no half of it.
func (t *Table[T]) runTx(ctx context.Context, fn func(in rowupdate.Table[T]) error) error {
	if t.inTx {
		const sp = "occkit_modify_many"
		if _, err := t.q.ExecContext(ctx, "SAVEPOINT "+sp); err != nil {
			return t.writeError("modify-many", "", err, false)
		}
		if err := fn(t.rowTable()); err != nil {
			_, _ = t.q.ExecContext(context.WithoutCancel(ctx), "ROLLBACK TO SAVEPOINT "+sp)
			return err
		}
		if _, err := t.q.ExecContext(ctx, "RELEASE SAVEPOINT "+sp); err != nil {
			return t.writeError("modify-many", "", err, true)
		}
		return nil
	}
	tx, err := beginOn(ctx, t.d, t.q, false)
	if err != nil {
		return t.writeError("modify-many", "", err, false)
	}
	in := *t
	in.q, in.inTx = tx.q, true // Insert draws its version in this transaction
	if err := fn(in.rowTable()); err != nil {
		tx.rollback()
		return err
	}
	if err := tx.commit(ctx); err != nil {
		return t.writeError("modify-many", "", err, true)
	}
	return nil
}
