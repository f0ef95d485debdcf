package pgcas

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/internal/sqlrows"
	"github.com/occkit/occkit/internal/writeid"
)

// SQLSTATE codes the adapter maps to cas errors.
const (
	codeSerializationFailure = "40001" // serialization_failure
	codeDeadlockDetected     = "40P01" // deadlock_detected
	codeUniqueViolation      = "23505" // unique_violation
	codeUndefinedTable       = "42P01" // undefined_table
	codeNumericOutOfRange    = "22003" // numeric_value_out_of_range
)

// SQLSTATE codes of a server that refuses a session or ends it for reasons
// that pass: a shutdown, a restart or a crash recovery in progress, an
// idle session timed out, no connection slot free. Each comes as a FATAL
// error (the server then closes the connection) either instead of a
// session or as the answer to the next statement, which it did not run.
var transientCodes = map[string]bool{
	"57P01": true, // admin_shutdown: "terminating connection due to administrator command"
	"57P02": true, // crash_shutdown: another server process crashed
	"57P03": true, // cannot_connect_now: starting up, shutting down, in recovery
	"57P05": true, // idle_session_timeout
	"53300": true, // too_many_connections
}

// transientServer reports whether err carries a server error with one of
// transientCodes.
func transientServer(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && transientCodes[pgErr.Code]
}

// isSerializationFailure reports whether err is a PostgreSQL error that
// rolled its transaction back for a concurrent one: SQLSTATE 40001
// (serialization_failure) or 40P01 (deadlock_detected). Running the
// transaction again is safe; the adapter reports both as conflicts.
func isSerializationFailure(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && (pgErr.Code == codeSerializationFailure || pgErr.Code == codeDeadlockDetected)
}

// sent reports whether err, the failure of a statement on a connection
// already acquired, may have come after the statement reached the server.
// A *pgconn.PgError is the server's own answer; an error pgconn marks safe
// to retry (pgconn.SafeToRetry: it happened before any byte of the
// statement was written) was not sent, except "conn closed": pgx (v5.12)
// also returns that, marked safe to retry, when the connection broke while
// it was reading the reply to a simple-protocol statement such as COMMIT,
// so it counts as sent.
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

// readError wraps the failure of a read. A read changes nothing, so
// reading again is always safe; it is worth it unless the server gave a
// lasting answer (an error not in transientCodes) or the context ended.
func readError(op, key string, err error) error {
	var pgErr *pgconn.PgError
	switch {
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
	case transientServer(err):
		return &transientError{op: op, key: key, err: err}
	case errors.As(err, &pgErr):
	default:
		return &transientError{op: op, key: key, err: err}
	}
	return fmt.Errorf("pgcas: %s %q: %w", op, key, err)
}

// acquireError wraps the failure to get a connection for a write, before
// any of it was sent. A connection that could not be made (refused, cut
// during its handshake, or a session the server refused with a code of
// transientCodes) is worth trying again; pgconn does not mark a
// *pgconn.ConnectError safe to retry, since the startup message may have
// been written, but the statement certainly was not. Any other failure
// (the context, a closed pool, a server that refuses the credentials) is
// returned as it is.
func acquireError(op, key string, err error) error {
	var ce *pgconn.ConnectError
	var pgErr *pgconn.PgError
	switch {
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded), !errors.As(err, &ce):
	case errors.As(err, &pgErr) && !transientCodes[pgErr.Code]:
	default:
		return &transientError{op: op, key: key, why: "not sent", err: err}
	}
	return fmt.Errorf("pgcas: %s %q: %w", op, key, err)
}

// transientError is a failure that certainly applied nothing and may not
// happen again: a read that failed, a write that was never sent, or a
// write the server answered with an error of transientCodes (the session
// ended before the statement ran, or while it ran, which rolled its
// transaction back). Retryable says so.
type transientError struct {
	op, key string
	why     string // "not sent", "not applied", or "" for a read
	err     error
}

func (e *transientError) Error() string {
	if e.why != "" {
		return fmt.Sprintf("pgcas: %s %q: %s: %v", e.op, e.key, e.why, e.err)
	}
	return fmt.Sprintf("pgcas: %s %q: %v", e.op, e.key, e.err)
}

func (e *transientError) Unwrap() error { return e.err }

// Retryable is the package's one classifier of transient failures: it
// reports whether err certainly applied nothing and may not happen again,
// so that trying again is safe and may succeed. Pass it to
// occ.WithRetryable. It is true for
//
//   - a bare serialization failure (SQLSTATE 40001) or deadlock (40P01),
//     which rolled its transaction back (the adapter's own calls report
//     those as a *cas.ConflictError, which occ retries anyway);
//   - a read (Get) that failed, unless the server answered with a lasting
//     error (say, a missing table): reading again is always safe;
//   - a write or Commit that was never sent: no connection could be made
//     (refused, cut during its handshake, or the session refused with
//     SQLSTATE 57P03 while the server shuts down or starts up), or the
//     connection broke before the statement was written
//     (pgconn.SafeToRetry);
//   - a write or Commit the server answered with SQLSTATE 57P01, 57P02,
//     57P03, 57P05 or 53300 (the session ended, on an idle connection
//     before the statement ran, or while it ran). An error answer means
//     that the statement's implicit transaction did not commit: a write
//     is one statement, and a Commit one pipeline whose statements commit
//     together at its end, or not at all;
//   - a BEGIN or COMMIT of RunTx that applied nothing for one of those
//     reasons (see RunTx).
//
// It is false for a write whose reply was lost after it was sent (the
// connection broke, or the context ended, while waiting for it): the store
// resolves those by their write id, and returns a *cas.AmbiguousError
// (cas.ErrAmbiguous) when it cannot tell, which is never retryable. It is
// also false for a bare *pgconn.PgError with those codes that the store
// did not classify: nothing says which statements before it committed.
func Retryable(err error) bool {
	if isSerializationFailure(err) {
		return true
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, cas.ErrAmbiguous) {
		return false
	}
	var te *transientError
	return errors.As(err, &te)
}

// writeFailed turns the failure of a write statement into the error to
// return. An error answer from the server means the statement did not
// commit (it runs in an implicit transaction that commits only after it
// completed). A lost reply is resolved when it can: a write is tagged
// with its write id, so reading the row back and finding that id proves it
// applied.
func (s *Store) writeFailed(ctx context.Context, op, key string, expected cas.Version, id writeid.ID, err error) (cas.Version, error) {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		if transientCodes[pgErr.Code] {
			return 0, &transientError{op: op, key: key, why: "not applied", err: err}
		}
		return 0, s.serverError(op, key, expected, pgErr)
	}
	if !sent(err) {
		return 0, &transientError{op: op, key: key, why: "not sent", err: err}
	}
	if v, ok := s.resolve(ctx, key, id, op == "compare-and-delete"); ok {
		return v, nil
	}
	return 0, &cas.AmbiguousError{Op: op, Key: key, WriteID: id.UUID(), Err: err}
}

// resolve reads key back on another connection and reports whether the
// write tagged id applied (a delete when del), with the version it made
// (sqlrows.ResolveOne). It gives up (false) when ctx has ended or the row
// cannot be read: the outcome stays unknown.
func (s *Store) resolve(ctx context.Context, key string, id writeid.ID, del bool) (cas.Version, bool) {
	if ctx.Err() != nil {
		return 0, false
	}
	return sqlrows.ResolveOne(s.pool.QueryRow(ctx, s.sqlResolve, key), id, del)
}
