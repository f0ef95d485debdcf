package sqlcas

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"

	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/internal/opsort"
	"github.com/occkit/occkit/internal/sqlrows"
	"github.com/occkit/occkit/internal/writeid"
)

// commitStatements build the statements of a Commit, whose length depends
// on the number of keys.
type commitStatements struct {
	d     Dialect
	table string
}

func newCommitStatements(d Dialect, table string) *commitStatements {
	return &commitStatements{d: d, table: table}
}

// placeholders inserts a version-0 tombstone for each of n keys that has
// no row, so that the locking read that follows can lock the key's
// absence (a row is the only thing every dialect can lock), and so that
// the one UPDATE that applies the writes finds a row for every key.
// Args: key, id for each key.
func (c *commitStatements) placeholders(n int) string {
	d := c.d
	var rows []string
	for i := range n {
		rows = append(rows, "("+d.ph(2*i+1)+d.keyCast()+", NULL, 0, "+d.ph(2*i+2)+d.blobCast()+", 0)")
	}
	head := `INSERT INTO ` + c.table + ` (k, value, version, write_id, fence_token) VALUES ` + strings.Join(rows, ", ")
	if d == MySQL {
		return head + ` ON DUPLICATE KEY UPDATE k = k`
	}
	return head + ` ON CONFLICT (k) DO NOTHING`
}

// lockRead reads and locks the rows of n keys. Args: the keys.
func (c *commitStatements) lockRead(n int) string {
	return `SELECT k, version, value, value IS NULL FROM ` + c.table + ` WHERE k IN (` +
		c.d.phs(1, n, c.d.keyCast()) + `) ORDER BY k` + c.d.forUpdate()
}

// apply writes every put and delete in one statement. Args: for each
// write its key and value (NULL for a delete), then the key of each put,
// then the write id, then every written key.
func (c *commitStatements) apply(writes, puts int) string {
	d := c.d
	n := 1
	next := func(cast string) string { s := d.ph(n) + cast; n++; return s }
	var b strings.Builder
	b.WriteString(`UPDATE ` + c.table + ` SET value = CASE k`)
	for range writes {
		b.WriteString(` WHEN ` + next(d.keyCast()) + ` THEN ` + next(d.blobCast()))
	}
	b.WriteString(` END`)
	if puts > 0 {
		b.WriteString(`, version = CASE k`)
		for range puts {
			b.WriteString(` WHEN ` + next(d.keyCast()) + ` THEN version + 1`)
		}
		b.WriteString(` ELSE version END`)
	}
	b.WriteString(`, write_id = ` + next(d.blobCast()) + ` WHERE k IN (`)
	for i := range writes {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(next(d.keyCast()))
	}
	b.WriteString(`)`)
	return b.String()
}

// applyChecked is apply with every written row's version checked in the
// same statement: it writes only the rows still live at their expected
// versions. Args: apply's, then for each write its key and expected
// version.
func (c *commitStatements) applyChecked(writes, puts int) string {
	d := c.d
	var b strings.Builder
	b.WriteString(c.apply(writes, puts))
	n := 2*writes + puts + 1 + writes + 1
	b.WriteString(` AND value IS NOT NULL AND CASE k`)
	for range writes {
		fmt.Fprintf(&b, ` WHEN %s%s THEN version = %s`, d.ph(n), d.keyCast(), d.ph(n+1))
		n += 2
	}
	b.WriteString(` ELSE false END`)
	return b.String()
}

// getMany reads the live rows of n keys. Args: the keys.
func (c *commitStatements) getMany(n int) string {
	return `SELECT k, value, version FROM ` + c.table + ` WHERE k IN (` + c.d.phs(1, n, c.d.keyCast()) + `) AND value IS NOT NULL`
}

// resolveMany reads the version, tombstone flag and write id of n keys.
func (c *commitStatements) resolveMany(n int) string {
	return `SELECT k, version, value IS NULL, write_id FROM ` + c.table + ` WHERE k IN (` + c.d.phs(1, n, c.d.keyCast()) + `)`
}

// Commit applies ops atomically: every version matches and every write is
// applied, or nothing is. It returns one version per op: the new version
// of a put, the checked version of a check, 0 for a delete.
//
// It runs in one transaction (the caller's, for a Store made by With over
// a *sql.Tx): it inserts a version-0 tombstone for each key expected
// absent that has no row (so that the absence can be locked), reads and locks every key's row in key order (one SELECT ...
// FOR UPDATE), checks every version, and writes every put and delete in
// one UPDATE. A conflict names the first op in ops order whose version did
// not match, with its key's current item. A deadlock is a
// *cas.ConflictError without the current item.
func (s *Store) Commit(ctx context.Context, ops []cas.Op) ([]cas.Version, error) {
	if err := s.limits.Commit(ctx, ops); err != nil {
		return nil, err
	}
	for _, op := range ops {
		if err := checkVersion("commit", op.Key, op.Expected); err != nil {
			return nil, err
		}
	}
	order := opsort.Order(ops)
	id := s.ids.Next()
	if checkedApplies(ops) && s.strictUsable(ops) {
		if vs, err, done := s.commitStrict(ctx, ops, id); done {
			return vs, err // (its keys were all seen already)
		}
	}

	tx, err := s.begin(ctx)
	if err != nil {
		return nil, s.commitError(ctx, ops, id, "begin", err)
	}
	vs, stage, err := s.commitIn(ctx, tx.q, ops, order, id)
	if err != nil {
		tx.rollback()
		if errors.Is(err, errCheckedShort) {
			return nil, s.checkedConflict(ctx, ops)
		}
		if stage == "" {
			return nil, err // a conflict, found by the checks
		}
		return nil, s.commitError(ctx, ops, id, stage, err)
	}
	if err := tx.commit(ctx); err != nil {
		if !answered(err) && !notSent(err) && !s.inTx {
			// The reply to COMMIT was lost: the write ids tell.
			if vs, ok := s.resolveCommit(ctx, ops, id); ok {
				return vs, nil
			}
		}
		return nil, s.commitError(ctx, ops, id, "commit", err)
	}
	if !s.inTx {
		s.seen.note(sqlrows.WrittenKeys(ops)...)
	}
	return vs, nil
}

// commitIn runs a commit's statements on q, in a transaction. stage names
// the statement that failed ("" for a conflict found by the checks).
func (s *Store) commitIn(ctx context.Context, q Querier, ops []cas.Op, order []int, id writeid.ID) ([]cas.Version, string, error) {
	if s.d == MySQL && !s.inTx && checkedApplies(ops) {
		// Only in a transaction of its own: a short count leaves some
		// rows written until the rollback, which a caller's transaction
		// would keep. MySQL/MariaDB only: InnoDB looks the IN list's
		// keys up in key order, taking the row locks in the order the
		// locking read below takes them; PostgreSQL's UPDATE scans rows
		// in heap order, which deadlocks against key-ordered lockers.
		return s.commitChecked(ctx, q, ops, id)
	}
	keys := make([]any, len(order))
	var absent []any
	for i, o := range order {
		keys[i] = ops[o].Key
		if ops[o].Expected == 0 {
			absent = append(absent, ops[o].Key, id[:])
		}
	}
	if len(absent) > 0 {
		if _, err := q.ExecContext(ctx, s.cm.placeholders(len(absent)/2), absent...); err != nil {
			return nil, "lock", err
		}
	}
	found, err := s.readLocked(ctx, q, keys)
	if err != nil {
		return nil, "lock", err
	}
	plan, err := planApply(ops, found)
	if err != nil {
		return nil, "", err
	}
	writes := plan.writes()
	if writes == 0 {
		return plan.out, "", nil
	}
	args := plan.args(id)
	res, err := q.ExecContext(ctx, s.cm.apply(writes, len(plan.putArgs)), args...)
	if err != nil {
		return nil, "write", err
	}
	if n, err := res.RowsAffected(); err != nil {
		return nil, "write", err
	} else if n != int64(writes) {
		return nil, "write", fmt.Errorf("sqlcas: commit: %d rows written, want %d", n, writes)
	}
	return plan.out, "", nil
}

// commitError maps the failure of a commit's stage.
func (s *Store) commitError(ctx context.Context, ops []cas.Op, id writeid.ID, stage string, err error) error {
	key := ops[0].Key
	switch {
	case answered(err):
		return s.serverError("commit", key, ops[0].Expected, err)
	case notSent(err):
		return &transientError{op: "commit", key: key, why: stage + " not sent", err: err}
	case s.inTx:
		return fmt.Errorf("sqlcas: commit inside the caller's transaction: %s: %w", stage, err)
	case stage != "commit":
		// The connection broke before COMMIT was sent: the server rolls
		// the transaction back when the session ends.
		return &transientError{op: "commit", key: key, why: stage + " failed before COMMIT, transaction rolled back", err: err}
	}
	writes := sqlrows.WrittenKeys(ops)
	if len(writes) == 0 {
		return fmt.Errorf("sqlcas: commit: reply to COMMIT lost, checks not confirmed: %w", err)
	}
	return &cas.AmbiguousError{Op: "commit", Key: writes[0], WriteID: id.String(), Err: err}
}

// resolveCommit reads the written keys back and reports whether the commit
// tagged id applied (sqlrows.Resolve).
func (s *Store) resolveCommit(ctx context.Context, ops []cas.Op, id writeid.ID) ([]cas.Version, bool) {
	writes := sqlrows.WrittenKeys(ops)
	if len(writes) == 0 {
		return nil, false
	}
	if ctx.Err() != nil {
		if s.d != SQLite {
			return nil, false
		}
		ctx = context.WithoutCancel(ctx)
	}
	ctx, cancel := context.WithTimeout(ctx, resolveTimeout)
	defer cancel()
	args := make([]any, len(writes))
	for i, k := range writes {
		args[i] = k
	}
	rows, err := s.db.QueryContext(ctx, s.cm.resolveMany(len(writes)), args...)
	if err != nil {
		return nil, false
	}
	defer rows.Close()
	return sqlrows.Resolve(ops, id, rows)
}

// txn is a transaction a Store runs its statements in: its own, or the
// caller's (commit and rollback then do nothing).
type txn struct {
	q        Querier
	commit   func(ctx context.Context) error
	rollback func()
	// ended releases the transaction after a statement of its own
	// committed it (a compound statement's COMMIT): on a connection of its
	// own nothing is sent; database/sql's transactions still take a
	// ROLLBACK, which then does nothing.
	ended func()
}

// begin starts the store's own transaction, or returns the caller's.
//
// On SQLite it runs BEGIN IMMEDIATE on a connection of its own, whatever
// the DSN's _txlock says: a deferred transaction that reads and then
// writes fails with SQLITE_BUSY at once when another connection wrote in
// between, without waiting for the busy timeout. An IMMEDIATE one takes
// the write lock at BEGIN, waiting up to the busy timeout.
func (s *Store) begin(ctx context.Context) (*txn, error) { return beginOn(ctx, s.d, s.q, s.inTx) }

// beginOn begins a transaction of dialect d on q, or returns q itself
// when it is the caller's transaction (inTx).
func beginOn(ctx context.Context, d Dialect, q Querier, inTx bool) (*txn, error) {
	if inTx {
		return &txn{q: q, commit: func(context.Context) error { return nil }, rollback: func() {}, ended: func() {}}, nil
	}
	if d == SQLite {
		return beginImmediate(ctx, q)
	}
	var (
		tx  *sql.Tx
		err error
	)
	switch q := q.(type) {
	case pooled:
		tx, err = q.BeginTx(ctx, nil)
	case connLike:
		tx, err = q.BeginTx(ctx, nil)
	default:
		err = fmt.Errorf("sqlcas: cannot begin a transaction on %T", q)
	}
	if err != nil {
		return nil, err
	}
	return &txn{
		q: tx,
		commit: func(context.Context) error {
			if f := beforeCommit.Load(); f != nil {
				(*f)()
			}
			return tx.Commit()
		},
		rollback: func() { _ = tx.Rollback() },
		ended:    func() { _ = tx.Rollback() },
	}, nil
}

// beginHeld starts the transaction of an exclusive update or commit: on
// MariaDB, where a compound statement commits it (writeAndCommit), on a
// connection of its own, so that nothing more is sent once it committed;
// elsewhere as begin does.
func (s *Store) beginHeld(ctx context.Context) (*txn, error) {
	if holdsInBlocks(s.d, s.inTx, s.blocks) {
		return beginOnConn(ctx, s.q, "START TRANSACTION", true)
	}
	return s.begin(ctx)
}

// beginImmediate starts a BEGIN IMMEDIATE transaction on a connection of
// the pool (or on the *sql.Conn given to With).
func beginImmediate(ctx context.Context, q Querier) (*txn, error) {
	return beginOnConn(ctx, q, "BEGIN IMMEDIATE", false)
}

// beginOnConn starts a transaction with the statement begin on a
// connection of the pool (or on the *sql.Conn given to With); hook: its
// COMMIT runs beforeCommit first, as a MySQL transaction's does.
func beginOnConn(ctx context.Context, q Querier, begin string, hook bool) (*txn, error) {
	var (
		conn    connLike
		release = func() {}
	)
	switch q := q.(type) {
	case pooled:
		c, err := q.Conn(ctx)
		if err != nil {
			return nil, err
		}
		conn, release = c, func() { _ = c.Close() }
	case connLike:
		conn = q
	default:
		return nil, fmt.Errorf("sqlcas: cannot begin a transaction on %T", q)
	}
	if _, err := conn.ExecContext(ctx, begin); err != nil {
		release()
		return nil, err
	}
	// ROLLBACK runs even after ctx ended; a connection that cannot roll
	// back is discarded, never returned to the pool inside a transaction.
	rollback := func() {
		if _, err := conn.ExecContext(context.WithoutCancel(ctx), "ROLLBACK"); err != nil {
			_ = conn.Raw(func(any) error { return driver.ErrBadConn })
		}
	}
	return &txn{
		q: conn,
		commit: func(ctx context.Context) error {
			defer release()
			if f := beforeCommit.Load(); hook && f != nil {
				(*f)()
			}
			if _, err := conn.ExecContext(ctx, "COMMIT"); err != nil {
				// A COMMIT that failed (SQLITE_BUSY while readers finish)
				// leaves the transaction open.
				rollback()
				return err
			}
			return nil
		},
		rollback: func() { rollback(); release() },
		ended:    release,
	}, nil
}

// beforeCommit, when set (by tests), runs just before the COMMIT of a
// MySQL or PostgreSQL transaction of the store's own.
var beforeCommit atomic.Pointer[func()]
