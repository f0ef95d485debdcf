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
		err = br.QueryRow().Scan(t.layout.Targets(&row)...)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			err = nil
		case err == nil:
			cur = t.layout.Row(row)
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
	return t.layout.Row(out), nil
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
// apply) in a second (pipe); a commit that creates rows runs them one by
// one (rowupdate.CommitInOrder), Insert's version and key handling
// included.
func (t *Table[T]) commitMany(ctx context.Context, writes []rowupdate.Write[T]) ([]rowupdate.Row[T], int, rowupdate.Row[T], error) {
	for _, w := range writes {
		if w.Expected == 0 {
			return rowupdate.CommitInOrder(ctx, t.rowTable(), writes)
		}
	}
	order := rowupdate.KeyOrder(writes)
	stored := make([]rowupdate.Row[T], len(writes))
	var (
		at       int
		cur      rowupdate.Row[T]
		conflict error
	)
	err := t.pipe(ctx, "modify-many", t.layout.KeyOf(&writes[order[0]].Row), func(b *pipeBatch) error {
		for _, i := range order {
			if err := t.queueUpdate(b, writes[i].Expected, writes[i].Row); err != nil {
				return err
			}
		}
		return nil
	}, func(r *pipeResults) error {
		at, conflict = -1, nil
		for _, i := range order {
			s, c, err := t.scanUpdate(r)
			var ce *cas.ConflictError
			if errors.As(err, &ce) {
				ce.Key, ce.Expected = fmt.Sprint(t.layout.KeyOf(&writes[i].Row)), writes[i].Expected
				ce.Current.Key = ce.Key
				at, cur, conflict = i, c, ce
			}
			if err != nil {
				return err
			}
			stored[i] = s
		}
		return nil
	})
	if at >= 0 && conflict != nil && errors.Is(err, conflict) {
		return nil, at, cur, conflict
	}
	if err != nil {
		return nil, -1, rowupdate.Row[T]{}, err
	}
	return stored, -1, rowupdate.Row[T]{}, nil
}

// pipeline is the table's part in a Txn commit of updates sent in one
// round trip (rowupdate.Pipeline).
func (t *Table[T]) pipeline() rowupdate.Pipeline[T] {
	return rowupdate.Pipeline[T]{
		Queue: func(b any, expected cas.Version, row T) error { return t.queueUpdate(b.(*pipeBatch), expected, row) },
		Scan:  func(r any) (rowupdate.Row[T], rowupdate.Row[T], error) { return t.scanUpdate(r.(*pipeResults)) },
		Pipe: func(ctx context.Context, queue func(any) error, scan func(any) error) error {
			t.knowKeyIndexes(ctx)
			return t.pipe(ctx, "txn", "", func(b *pipeBatch) error { return queue(b) }, func(r *pipeResults) error { return scan(r) })
		},
	}
}

// pipeBatch is the first round trip of pipe: BEGIN and the updates, with
// the version each update expects.
type pipeBatch struct {
	b        *pgx.Batch
	expected []cas.Version
}

// pipeResults are the results of a pipeBatch, read in order.
type pipeResults struct {
	br       pgx.BatchResults
	expected []cas.Version
	next     int
	last     bool // the last run of pipe: a stale refusal is a conflict
}

// errStaleSnapshot is a refusal of an update whose row is at the version it
// expected: the statement's snapshot predates that version's commit (see
// tableResult.stale). pipe runs its transaction again.
var errStaleSnapshot = errors.New("pgcas: the statement's snapshot predates the version it expected")

// queueUpdate adds to b the update of row conditional on version
// expected.
func (t *Table[T]) queueUpdate(b *pipeBatch, expected cas.Version, row T) error {
	t.layout.SetVersion(&row, expected)
	sql, args, _, _, err := t.updateSQL(row, 0, false)
	if err != nil {
		return err
	}
	b.b.Queue(sql, args...)
	b.expected = append(b.expected, expected)
	return nil
}

// scanUpdate reads the outcome of the next update queueUpdate queued: the
// row as stored, or the current row with its *cas.ConflictError (its Key
// left for the caller to fill in), or errStaleSnapshot.
func (t *Table[T]) scanUpdate(r *pipeResults) (stored, current rowupdate.Row[T], err error) {
	expected := r.expected[r.next]
	r.next++
	out, c, res, err := t.scanWrite(r.br.QueryRow())
	switch {
	case err != nil:
		return stored, current, err
	case res.written:
		return t.layout.Row(out), current, nil
	case res.stale(expected) && !r.last:
		return stored, current, errStaleSnapshot
	}
	current = rowupdate.Row[T]{Value: c, Version: cas.Version(max(derefOr(res.version, 0), 0))}
	return stored, current, res.conflict("", expected)
}

// pipe runs one transaction in two round trips: BEGIN and what queue
// adds in the first, whose results scan reads in order; then COMMIT when
// scan returned nil, ROLLBACK otherwise. An update refused by a stale
// snapshot (errStaleSnapshot) runs the transaction again, as Update runs
// its statement again. A *cas.ConflictError of scan's is returned as is.
// A failure before COMMIT applied nothing (the transaction was never
// committed): it is not ambiguous, and Retryable accepts it unless the
// context ended; a lost reply to COMMIT is ambiguous.
func (t *Table[T]) pipe(ctx context.Context, op string, key any, queue func(b *pipeBatch) error, scan func(r *pipeResults) error) error {
	conn, err := t.pool.Acquire(ctx)
	if err != nil {
		return t.opError(op, key, err)
	}
	// A connection released inside its transaction is closed, not reused.
	defer conn.Release()
	for run := 1; ; run++ {
		b := &pipeBatch{b: &pgx.Batch{}}
		b.b.Queue("BEGIN")
		if err := queue(b); err != nil {
			return err
		}
		r := &pipeResults{br: conn.SendBatch(ctx, b.b), expected: b.expected, last: run >= maxWriteRuns}
		_, err = r.br.Exec()
		if err == nil {
			err = scan(r)
		}
		if cerr := r.br.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			_, _ = conn.Exec(context.WithoutCancel(ctx), "ROLLBACK")
			if errors.Is(err, errStaleSnapshot) {
				continue
			}
			if _, ok := errors.AsType[*cas.ConflictError](err); ok {
				return err
			}
			if _, ok := errors.AsType[*pgconn.PgError](err); ok {
				return t.writeError(ctx, op, key, err) // the server's answer
			}
			// Never committed: nothing applied, safe to try again.
			return &transientError{op: op, key: fmt.Sprint(key), why: "not applied", err: t.opError(op, key, err)}
		}
		if _, err := conn.Exec(ctx, "COMMIT"); err != nil {
			return t.writeError(ctx, op, key, err)
		}
		return nil
	}
}

// derefOr returns *p, or def when p is nil.
func derefOr(p *int64, def int64) int64 {
	if p == nil {
		return def
	}
	return *p
}
