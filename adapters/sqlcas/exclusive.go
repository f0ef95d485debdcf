package sqlcas

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
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
// transaction (With) the row stays locked until the caller ends it.
func (s *Store) UpdateExclusive(ctx context.Context, key string, fn func(cur cas.Item) ([]byte, bool, error)) (cas.Version, error) {
	const op = "exclusive update"
	if err := s.limits.Get(ctx, key); err != nil {
		return 0, err
	}
	tx, err := s.begin(ctx)
	if err != nil {
		return 0, s.readError(op, key, err)
	}
	if s.d == Postgres && !s.inTx {
		ms := strconv.FormatInt(max(s.exclusiveTimeout.Milliseconds(), 1), 10)
		if _, err := tx.q.ExecContext(ctx, "SELECT set_config('idle_in_transaction_session_timeout', $1, true)", ms); err != nil {
			tx.rollback()
			return 0, s.readError(op, key, err)
		}
	}
	var c current
	err = tx.q.QueryRowContext(ctx, s.st.lockRow.text, key).Scan(&c.version, &c.value, &c.token, &c.dead)
	switch {
	case errors.Is(err, sql.ErrNoRows):
	case err != nil:
		tx.rollback()
		return 0, s.readError(op, key, err)
	default:
		c.exists = true
	}
	cur := c.item(key)
	next, write, err := fn(cur)
	if err != nil || !write {
		tx.rollback()
		return cur.Version, err
	}
	if err := s.limits.Put(ctx, key, next); err != nil {
		tx.rollback()
		return 0, err
	}
	in := *s
	in.q, in.inTx = tx.q, true
	v, err := in.write(ctx, "compare-and-swap", key, cur.Version, next, 0, false)
	if err != nil {
		tx.rollback()
		return 0, s.exclusiveError(op, key, cur.Version, err)
	}
	if err := tx.commit(ctx); err != nil {
		return 0, s.exclusiveError(op, key, cur.Version, err)
	}
	return v, nil
}

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
