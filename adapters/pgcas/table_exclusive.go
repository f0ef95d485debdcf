package pgcas

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/internal/rowupdate"
)

// querier runs a Table's statements: the pool, or the connection of an
// exclusive update.
type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// keyIndexSet is the unique indexes on a Table's key column, looked up on
// the first unique violation (nil until then).
type keyIndexSet struct {
	mu  sync.Mutex
	idx []keyIndex
}

// exclusive is the exclusive read-modify-write of one row that Modify
// escalates to for a call that keeps losing (cas.Exclusive): in one
// transaction on one connection it reads the row FOR UPDATE (other
// writers of the row wait for the lock, then find their version gone),
// calls fn, and inserts or updates what fn returns. BEGIN, the session's
// idle-in-transaction timeout (DefaultExclusiveTimeout) and the locking
// read go in one round trip; a holder that stops answering for that long
// has its session ended by the server, which frees the row, and its late
// write is refused with a *cas.ConflictError.
func (t *Table[T]) exclusive(ctx context.Context, key any, fn func(cur rowupdate.Row[T]) (T, bool, error)) (rowupdate.Row[T], error) {
	t.knowKeyIndexes(ctx)
	conn, err := t.pool.Acquire(ctx)
	if err != nil {
		return rowupdate.Row[T]{}, t.opError("modify", key, err)
	}
	// A connection left inside its transaction is destroyed on release.
	defer conn.Release()
	rollback := func() { _, _ = conn.Exec(context.WithoutCancel(ctx), "ROLLBACK") }

	b := &pgx.Batch{}
	b.Queue("BEGIN")
	b.Queue("SELECT set_config('idle_in_transaction_session_timeout', $1, true)", strconv.FormatInt(DefaultExclusiveTimeout.Milliseconds(), 10))
	b.Queue(t.sqlGet+" FOR UPDATE", key)
	br := conn.SendBatch(ctx, b)
	var cur rowupdate.Row[T]
	_, err = br.Exec()
	if err == nil {
		_, err = br.Exec()
	}
	if err == nil {
		var row T
		err = br.QueryRow().Scan(t.targets(&row)...)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			err = nil
		case err == nil:
			cur = rowupdate.Row[T]{Value: row, Version: t.versionOf(&row)}
		}
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		rollback()
		return rowupdate.Row[T]{}, t.opError("modify", key, err)
	}
	next, write, err := fn(cur)
	if err != nil || !write {
		rollback()
		return cur, err
	}
	in := *t
	in.q, in.rq = conn, conn
	out, err := in.rowTable().WriteAt(ctx, cur.Version, next)
	if err == nil {
		_, err = conn.Exec(ctx, "COMMIT")
		if err != nil {
			err = t.writeError(ctx, "modify", key, err)
		}
	} else {
		rollback()
	}
	if err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == codeIdleInTxTimeout {
			return rowupdate.Row[T]{}, &cas.ConflictError{Key: fmt.Sprint(key), Expected: cur.Version, Err: fmt.Errorf("pgcas: the exclusive hold of the row outlived %v and the server ended it; nothing was written: %w", DefaultExclusiveTimeout, err)}
		}
		return rowupdate.Row[T]{}, err
	}
	return rowupdate.Row[T]{Value: out, Version: t.versionOf(&out)}, nil
}

// runTx runs fn with the table bound to a transaction of its own on one
// connection, and commits it when fn returns nil (ModifyMany's commit).
// A COMMIT whose reply is lost is a *cas.AmbiguousError.
func (t *Table[T]) runTx(ctx context.Context, fn func(in rowupdate.Table[T]) error) error {
	t.knowKeyIndexes(ctx)
	tx, err := t.pool.Begin(ctx)
	if err != nil {
		return t.opError("modify-many", "", err)
	}
	in := *t
	in.q, in.rq = tx, tx
	if err := fn(in.rowTable()); err != nil {
		_ = tx.Rollback(context.WithoutCancel(ctx))
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return t.writeError(ctx, "modify-many", "", err)
	}
	return nil
}

// commitMany is ModifyMany's commit: when every write updates a row read
// (the transfer's shape), BEGIN and the conditional UPDATEs, in key order,
// go in one round trip and COMMIT (or ROLLBACK, when one of them did not
// apply) in a second; a commit that creates rows runs them one by one
// (rowupdate.CommitInOrder), Insert's version and key handling included.
func (t *Table[T]) commitMany(ctx context.Context, writes []rowupdate.Write[T]) ([]rowupdate.Row[T], int, rowupdate.Row[T], error) {
	for _, w := range writes {
		if w.Expected == 0 {
			return rowupdate.CommitInOrder(ctx, t.rowTable(), writes)
		}
	}
	order := rowupdate.KeyOrder(writes)
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	keys := make([]any, len(writes))
	for _, i := range order {
		row := writes[i].Row
		t.setVersion(&row, writes[i].Expected)
		sql, args, key, _, err := t.updateSQL(row, 0, false)
		if err != nil {
			return nil, -1, rowupdate.Row[T]{}, err
		}
		keys[i] = key
		b.Queue(sql, args...)
	}
	conn, err := t.pool.Acquire(ctx)
	if err != nil {
		return nil, -1, rowupdate.Row[T]{}, t.opError("modify-many", keys[order[0]], err)
	}
	// A connection released inside its transaction is closed, not reused.
	defer conn.Release()
	rollback := func() { _, _ = conn.Exec(context.WithoutCancel(ctx), "ROLLBACK") }
	br := conn.SendBatch(ctx, b)
	stored := make([]rowupdate.Row[T], len(writes))
	at, cur := -1, rowupdate.Row[T]{}
	var conflict error
	_, err = br.Exec()
	for _, i := range order {
		if err != nil {
			break
		}
		var out, c T
		var r tableResult
		out, c, r, err = t.scanWrite(br.QueryRow())
		switch {
		case err != nil:
		case r.written:
			stored[i] = rowupdate.Row[T]{Value: out, Version: t.versionOf(&out)}
		case at < 0:
			at, cur, conflict = i, rowupdate.Row[T]{Value: c, Version: cas.Version(max(derefOr(r.version, 0), 0))}, r.conflict(keys[i], writes[i].Expected)
		}
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil || at >= 0 {
		rollback()
		if err != nil {
			return nil, -1, rowupdate.Row[T]{}, t.writeError(ctx, "modify-many", keys[order[0]], err)
		}
		return nil, at, cur, conflict
	}
	if _, err := conn.Exec(ctx, "COMMIT"); err != nil {
		return nil, -1, rowupdate.Row[T]{}, t.writeError(ctx, "modify-many", keys[order[0]], err)
	}
	return stored, -1, rowupdate.Row[T]{}, nil
}

// derefOr returns *p, or def when p is nil.
func derefOr(p *int64, def int64) int64 {
	if p == nil {
		return def
	}
	return *p
}
