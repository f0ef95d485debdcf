package pgcas

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/occkit/occkit/cas"
)

// SQLSTATE codes the adapter maps to cas errors.
const (
	codeSerializationFailure = "40001" // serialization_failure
	codeDeadlockDetected     = "40P01" // deadlock_detected
	codeUniqueViolation      = "23505" // unique_violation
	codeUndefinedTable       = "42P01" // undefined_table
)

// IsRetryable reports whether err is a PostgreSQL error that a transaction
// can be retried after: SQLSTATE 40001 (serialization_failure) or 40P01
// (deadlock_detected). Both roll the transaction back, so running it again
// is safe.
func IsRetryable(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && (pgErr.Code == codeSerializationFailure || pgErr.Code == codeDeadlockDetected)
}

// sent reports whether err may have come after the request reached the
// server. A *pgconn.PgError is the server's own answer; an error pgconn
// marks safe to retry happened before anything was sent, except "conn
// closed": pgx (v5.12) also returns that, marked safe to retry, when the
// connection broke while it was reading the reply to a simple-protocol
// statement such as COMMIT, so it counts as sent.
func sent(err error) bool {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) || errors.Is(err, pgconn.ErrConnClosed) {
		return true
	}
	return !pgconn.SafeToRetry(err)
}

// serverError maps an error the server returned for a statement that
// therefore did not apply.
func (s *Store) serverError(op, key string, expected cas.Version, pgErr *pgconn.PgError) error {
	switch pgErr.Code {
	case codeSerializationFailure, codeDeadlockDetected:
		// Only if the session runs above READ COMMITTED, or a deadlock
		// with the caller's own locks: the statement was rolled back.
		return &cas.ConflictError{Key: key, Expected: expected, Err: pgErr}
	case codeUndefinedTable:
		return fmt.Errorf("pgcas: %s %q: table %s does not exist (create it with CreateTable or the DDL): %w", op, key, s.table, pgErr)
	}
	return fmt.Errorf("pgcas: %s %q: %w", op, key, pgErr)
}

// readError wraps the failure of a read.
func readError(op, key string, err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("pgcas: %s %q: %w", op, key, err)
	}
	return &transientError{op: op, key: key, err: err}
}

// transientError is a failure that certainly applied nothing and may not
// happen again: a read that failed in transit, or a write that was never
// sent. Retryable says so.
type transientError struct {
	op, key string
	notSent bool
	err     error
}

func (e *transientError) Error() string {
	if e.notSent {
		return fmt.Sprintf("pgcas: %s %q: not sent: %v", e.op, e.key, e.err)
	}
	return fmt.Sprintf("pgcas: %s %q: %v", e.op, e.key, e.err)
}

func (e *transientError) Unwrap() error { return e.err }

// Retryable reports whether trying again is safe and may succeed: what
// IsRetryable says (serialization failures, deadlocks), and transport
// failures that certainly applied nothing — a read that failed, a write
// that was never sent. Ambiguous writes (cas.ErrAmbiguous) and an ended
// context are not retryable. Pass it to occ.WithRetryable.
func Retryable(err error) bool {
	if IsRetryable(err) {
		return true
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, cas.ErrAmbiguous) {
		return false
	}
	var te *transientError
	return errors.As(err, &te)
}

// writeFailed turns the failure of a write statement into the error to
// return, resolving a lost reply when it can: a write is tagged with its
// write id, so reading the row back and finding that id proves it applied.
func (s *Store) writeFailed(ctx context.Context, op, key string, expected cas.Version, id writeID, err error) (cas.Version, error) {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return 0, s.serverError(op, key, expected, pgErr)
	}
	if !sent(err) {
		return 0, &transientError{op: op, key: key, notSent: true, err: err}
	}
	if v, ok := s.resolve(ctx, key, id); ok {
		return v, nil
	}
	return 0, &cas.AmbiguousError{Op: op, Key: key, WriteID: id.String(), Err: err}
}

// resolve reads key back on another connection and reports whether the
// write tagged id applied, with the version it made. It gives up (false)
// when ctx has ended or the row cannot be read: the outcome stays unknown.
func (s *Store) resolve(ctx context.Context, key string, id writeID) (cas.Version, bool) {
	if ctx.Err() != nil {
		return 0, false
	}
	var (
		version int64
		deleted bool
		got     writeID
	)
	if err := s.pool.QueryRow(ctx, s.sqlResolve, key).Scan(&version, &deleted, &got); err != nil {
		return 0, false
	}
	if got != id {
		return 0, false
	}
	if deleted {
		return 0, true
	}
	return cas.Version(version), true
}
