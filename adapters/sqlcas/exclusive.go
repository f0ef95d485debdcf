package sqlcas

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/occkit/occkit/cas"
)

// DefaultExclusiveTimeout is Config.ExclusiveTimeout's default.
const DefaultExclusiveTimeout = 2 * time.Second

// pgIdleInTxTimeout is PostgreSQL's FATAL error for a session ended for
// sitting idle in its transaction longer than
// idle_in_transaction_session_timeout.
const pgIdleInTxTimeout = "25P03"

var _ cas.Exclusive = (*Store)(nil)

// holdTimeout bounds an exclusive holder that stops answering: on
// PostgreSQL, in a transaction of the adapter's own (not the caller's,
// under With), it sets idle_in_transaction_session_timeout for tx, after
// which the server ends the idle session and frees its rows. Elsewhere it
// does nothing.
func holdTimeout(ctx context.Context, d Dialect, tx *txn, callersTx bool, timeout time.Duration) error {
	if d != Postgres || callersTx {
		return nil
	}
	ms := strconv.FormatInt(max(timeout.Milliseconds(), 1), 10)
	_, err := tx.q.ExecContext(ctx, "SELECT set_config('idle_in_transaction_session_timeout', $1, true)", ms)
	return err
}

// UpdateExclusive implements cas.Exclusive: in one transaction it reads
// the key's row with a locking read (MySQL and PostgreSQL: FOR UPDATE,
// which other writers of the key wait for; SQLite: the transaction is
// BEGIN IMMEDIATE, which holds the database's write lock), calls fn, and
// writes what fn returns at the version read. On PostgreSQL a holder
// that stops answering for Config.ExclusiveTimeout has its session ended
// by the server (idle_in_transaction_session_timeout), which frees the
// row; its late write is refused with a *cas.ConflictError. On MySQL the
// row stays locked until the holder's connection drops, and the others'
// writes give up after innodb_lock_wait_timeout (a transient error:
// pass occ.WithRetryable(sqlcas.Retryable)). Inside the caller's
// transaction (With) the row stays locked until the caller ends it. On
// MariaDB the transaction runs on a connection of its own and the write
// of a live row commits in the same compound statement (docs/sql.md,
// round trips); there a holder whose context ends while fn runs keeps the
// row until fn returns (or its connection drops), as on SQLite.
func (s *Store) UpdateExclusive(ctx context.Context, key string, fn func(cur cas.Item) ([]byte, bool, error)) (cas.Version, error) {
	const op = "exclusive update"
	if err := s.limits.Get(ctx, key); err != nil {
		return 0, err
	}
	tx, err := s.beginHeld(ctx)
	if err != nil {
		return 0, s.readError(op, key, err)
	}
	// Every path out rolls back, a panic in fn included, unless the
	// transaction reached its COMMIT (see CommitExclusive).
	ended := false
	defer func() {
		if !ended {
			tx.rollback()
		}
	}()
	if err := holdTimeout(ctx, s.d, tx, s.inTx, s.exclusiveTimeout); err != nil {
		return 0, s.readError(op, key, err)
	}
	var c current
	err = tx.q.QueryRowContext(ctx, s.st.lockRow.text, key).Scan(&c.version, &c.value, &c.token, &c.dead)
	switch {
	case errors.Is(err, sql.ErrNoRows):
	case err != nil:
		return 0, s.readError(op, key, err)
	default:
		c.exists = true
	}
	cur := c.item(key)
	next, write, err := fn(cur)
	if err != nil || !write {
		return cur.Version, err
	}
	if err := s.limits.Put(ctx, key, next); err != nil {
		return 0, err
	}
	if v, done, committed, err := s.swapAndCommit(ctx, tx, key, cur.Version, next); done {
		if err != nil {
			return 0, err
		}
		if committed {
			ended = true
			tx.ended() // the block committed it
		}
		// Otherwise its reply was lost and the write id says it applied:
		// the deferred rollback discards the broken connection.
		return v, nil
	}
	in := *s
	in.q, in.inTx = tx.q, true
	v, err := in.write(ctx, "compare-and-swap", key, cur.Version, next, 0, false)
	if err != nil {
		return 0, s.exclusiveError(op, key, cur.Version, err)
	}
	ended = true
	if err := tx.commit(ctx); err != nil {
		return 0, s.exclusiveError(op, key, cur.Version, err)
	}
	return v, nil
}

// swapAndCommit is the write and COMMIT of an exclusive update of a live
// row on MariaDB, in one compound statement (statements.swapCommit):
// the row's lock is released as the write lands, not a round trip later,
// so that the writers queued behind it wait one round trip less, and the
// transaction costs the server one statement less. done is false, and the
// transaction is as it was, when the block did not run (MySQL, which
// refuses it; a row that is absent or a tombstone; the caller's
// transaction) or wrote nothing: the usual write then runs. committed
// says the block answered that it committed; a block whose reply was
// lost is resolved by its write id, as a lost reply to a swap is
// (writeFailed): applied (committed false, err nil), or an error.
func (s *Store) swapAndCommit(ctx context.Context, tx *txn, key string, expected cas.Version, value []byte) (v cas.Version, done, committed bool, err error) {
	st := s.st.swapCommit
	if st.text == "" || s.inTx || expected == 0 || s.blocks.Load() == blocksRefused {
		return 0, false, false, nil
	}
	if value == nil {
		value = []byte{} // nil would be NULL, a tombstone
	}
	id := s.ids.Next()
	vals := [numSlots]any{key, value, id[:], int64(expected), int64(0)}
	if f := beforeCommit.Load(); f != nil {
		(*f)() // the block holds the COMMIT
	}
	var wrote int
	err = tx.q.QueryRowContext(ctx, st.text, st.args(&vals)...).Scan(&wrote)
	switch {
	case err == nil:
		s.blocks.Store(blocksRun)
	case refusesBlocks(err, s.blocks):
		return 0, false, false, nil
	default:
		v, err := s.writeFailed(ctx, "exclusive update", key, expected, id, err)
		return v, true, false, err
	}
	if wrote != 1 {
		return 0, false, false, nil
	}
	exclusiveBlocks.Add(1)
	return expected + 1, true, true, nil
}

// exclusiveBlocks counts the exclusive updates committed by
// swapAndCommit (for tests).
var exclusiveBlocks atomic.Int64

// exclusiveError maps the failure of an exclusive update's write or
// COMMIT: a PostgreSQL session ended for holding the row idle too long
// wrote nothing (a conflict, to retry from a fresh read); a COMMIT
// without an answer may have applied.
func (s *Store) exclusiveError(op, key string, expected cas.Version, err error) error {
	if pe, ok := asPg(err); ok && pe.Code == pgIdleInTxTimeout {
		return &cas.ConflictError{Key: key, Expected: expected, Err: fmt.Errorf("sqlcas: the exclusive hold of the row outlived Config.ExclusiveTimeout (%v) and the server ended it; nothing was written: %w", s.exclusiveTimeout, err)}
	}
	var ce *cas.ConflictError
	var ae *cas.AmbiguousError
	switch {
	case errors.As(err, &ce), errors.As(err, &ae):
		return err
	case s.inTx:
		return err
	case answered(err):
		return s.serverError(op, key, expected, err)
	case notSent(err):
		return &transientError{op: op, key: key, why: "not sent", err: err}
	}
	return &cas.AmbiguousError{Op: op, Key: key, Err: err}
}

var _ cas.ExclusiveCommitter = (*Store)(nil)

// CommitExclusive implements cas.ExclusiveCommitter: in one transaction
// it reads the keys' rows with one locking read in key order (MySQL and
// PostgreSQL: FOR UPDATE, which other writers of the keys wait for;
// SQLite: BEGIN IMMEDIATE holds the database's write lock), calls fn, and
// applies its ops as Commit does, in the same transaction. A key without
// a row cannot be locked: a concurrent create of it makes the commit
// conflict. The bounds of a silent holder are UpdateExclusive's. On
// MariaDB, when every key has a row, the locking read is the only read and
// the ops' write commits in the same compound statement
// (commitExclusiveLive).
func (s *Store) CommitExclusive(ctx context.Context, keys []string, fn func(cur []cas.Item) ([]cas.Op, error)) ([]cas.Version, error) {
	const op = "exclusive commit"
	if err := s.limits.CommitExclusive(ctx, keys); err != nil {
		return nil, err
	}
	sorted := slices.Sorted(slices.Values(keys))
	if s.d == MySQL && !s.inTx && s.blocks.Load() != blocksRefused {
		if vs, err, done := s.commitExclusiveLive(ctx, keys, sorted, fn); done {
			return vs, err
		}
	}
	tx, err := s.begin(ctx)
	if err != nil {
		return nil, s.readError(op, sorted[0], err)
	}
	// Every path out rolls back, a panic in fn included, unless the
	// transaction reached its COMMIT: a transaction left open would hold
	// its locks (SQLite's write lock, InnoDB's row locks) until its
	// connection dies.
	ended := false
	defer func() {
		if !ended {
			tx.rollback()
		}
	}()
	if err := holdTimeout(ctx, s.d, tx, s.inTx, s.exclusiveTimeout); err != nil {
		return nil, s.readError(op, sorted[0], err)
	}
	// A placeholder (a version-0 tombstone) for every key without a row,
	// before the locking read, as Commit does: an absence has no row to
	// lock, and two holders creating one key would otherwise deadlock.
	id := s.ids.Next()
	ph := make([]any, 0, 2*len(sorted))
	args := make([]any, len(sorted))
	for i, k := range sorted {
		args[i] = k
		ph = append(ph, k, id[:])
	}
	if _, err := tx.q.ExecContext(ctx, s.cm.placeholders(len(sorted)), ph...); err != nil {
		return nil, s.readError(op, sorted[0], err)
	}
	found, err := s.readLocked(ctx, tx.q, args)
	if err != nil {
		return nil, s.readError(op, sorted[0], err)
	}
	cur := make([]cas.Item, len(keys))
	for i, k := range keys {
		r, ok := found[k]
		cur[i] = r.item(k, ok)
	}
	ops, err := fn(cur)
	if err != nil || len(ops) == 0 {
		return nil, err
	}
	if err := s.limits.Commit(ctx, ops); err != nil {
		return nil, err
	}
	for _, o := range ops {
		if err := checkVersion("commit", o.Key, o.Expected); err != nil {
			return nil, err
		}
	}
	vs, err, _ := s.finishExclusive(ctx, tx, &ended, ops, id)
	return vs, err
}
