package sqlcas

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/internal/sqlrows"
	"github.com/occkit/occkit/internal/writeid"
)

// MySQL error numbers the adapter classifies.
const (
	mysqlLockWaitTimeout = 1205 // ER_LOCK_WAIT_TIMEOUT: the statement waited too long for a row lock
	mysqlDeadlock        = 1213 // ER_LOCK_DEADLOCK: the transaction was rolled back
	mysqlNoSuchTable     = 1146 // ER_NO_SUCH_TABLE
	mysqlDupEntry        = 1062 // ER_DUP_ENTRY
)

// mysqlSessionEnded are MySQL errors that end the session before or while
// a statement runs, which rolls its transaction back: a server shutting
// down, a connection killed, too many connections.
var mysqlSessionEnded = map[uint16]bool{
	1040: true, // ER_CON_COUNT_ERROR: too many connections
	1053: true, // ER_SERVER_SHUTDOWN
	1927: true, // ER_CONNECTION_KILLED (MariaDB)
	4031: true, // ER_CLIENT_INTERACTION_TIMEOUT (MySQL 8)
}

// SQLite result codes (the primary code, the low byte of an extended one).
const (
	sqliteError  = 1 // SQLITE_ERROR, also "no such table"
	sqliteBusy   = 5 // SQLITE_BUSY: another connection holds the write lock
	sqliteLocked = 6 // SQLITE_LOCKED: a conflict inside one shared-cache connection
)

// PostgreSQL SQLSTATEs.
const (
	pgSerializationFailure = "40001"
	pgDeadlock             = "40P01"
	pgUndefinedTable       = "42P01"
	pgUniqueViolation      = "23505"
)

// pgSessionEnded are the SQLSTATEs of a session the server ended (as in
// pgcas): the statement did not commit.
var pgSessionEnded = map[string]bool{"57P01": true, "57P02": true, "57P03": true, "57P05": true, "53300": true}

// sqliteCoder is modernc.org/sqlite's *sqlite.Error, matched by its method
// so that the package does not import the SQLite driver.
type sqliteCoder interface {
	error
	Code() int
}

func asMySQL(err error) (*mysql.MySQLError, bool) {
	var me *mysql.MySQLError
	ok := errors.As(err, &me)
	return me, ok
}

func asPg(err error) (*pgconn.PgError, bool) {
	var pe *pgconn.PgError
	ok := errors.As(err, &pe)
	return pe, ok
}

func sqliteCode(err error) (int, bool) {
	var se sqliteCoder
	if errors.As(err, &se) {
		return se.Code() & 0xff, true
	}
	return 0, false
}

// answered reports whether err is the database's own answer to a
// statement: the statement failed, and did not apply.
func answered(err error) bool {
	if _, ok := asMySQL(err); ok {
		return true
	}
	if _, ok := asPg(err); ok {
		return true
	}
	_, ok := sqliteCode(err)
	return ok
}

// notSent reports whether err certainly came before the statement reached
// the server: no connection could be made, or database/sql or the driver
// says the connection was bad before anything was written
// (driver.ErrBadConn, which database/sql retries on another connection
// itself, or returns once it gave up), or the connection or transaction
// was already closed.
func notSent(err error) bool {
	var op *net.OpError
	var ce *pgconn.ConnectError
	var nc *noConnError
	switch {
	case errors.Is(err, driver.ErrBadConn), errors.Is(err, sql.ErrConnDone), errors.Is(err, sql.ErrTxDone):
		return true
	case errors.As(err, &nc), errors.Is(err, mysql.ErrPktTooLarge): // the driver refuses the packet before writing it
		return true
	case errors.As(err, &op) && op.Op == "dial":
		return true
	case errors.As(err, &ce):
		return true
	case errors.Is(err, pgconn.ErrConnClosed):
		return false // pgx also says so for a reply lost mid-read
	}
	var pe *pgconn.PgError
	if !errors.As(err, &pe) && isPgSafeToRetry(err) {
		return true
	}
	return false
}

// isPgSafeToRetry is pgconn.SafeToRetry for errors pgx marks so.
func isPgSafeToRetry(err error) bool {
	var sr interface{ SafeToRetry() bool }
	return errors.As(err, &sr) && sr.SafeToRetry()
}

// sessionEnded reports whether err is a server error that ended the
// session (its transaction rolled back).
func sessionEnded(err error) bool {
	if me, ok := asMySQL(err); ok {
		return mysqlSessionEnded[me.Number]
	}
	if pe, ok := asPg(err); ok {
		return pgSessionEnded[pe.Code]
	}
	return false
}

// isConflict reports whether err is a database error that rolled back the
// whole transaction for a concurrency reason, so that running it again
// from its start may succeed: a MySQL deadlock (1213), a PostgreSQL
// serialization failure (40001) or deadlock (40P01). The store returns
// them as a *cas.ConflictError.
func isConflict(err error) bool {
	if me, ok := asMySQL(err); ok {
		return me.Number == mysqlDeadlock
	}
	if pe, ok := asPg(err); ok {
		return pe.Code == pgSerializationFailure || pe.Code == pgDeadlock
	}
	return false
}

// isBusy reports a lock wait that gave up: MySQL's lock-wait timeout
// (1205, which rolls back the statement, not the transaction, unless the
// server runs with innodb_rollback_on_timeout) and SQLite's SQLITE_BUSY
// and SQLITE_LOCKED (the busy timeout ran out, or a deferred transaction
// could not upgrade to a writer).
func isBusy(err error) bool {
	if me, ok := asMySQL(err); ok {
		return me.Number == mysqlLockWaitTimeout
	}
	if code, ok := sqliteCode(err); ok {
		return code == sqliteBusy || code == sqliteLocked
	}
	return false
}

// transientError is a failure that applied nothing and may not happen
// again: a read that failed, a write never sent, a lock wait that timed
// out, a session the server ended. Retryable says so.
type transientError struct {
	op, key string
	why     string
	err     error
}

func (e *transientError) Error() string {
	if e.why != "" {
		return fmt.Sprintf("sqlcas: %s %q: %s: %v", e.op, e.key, e.why, e.err)
	}
	return fmt.Sprintf("sqlcas: %s %q: %v", e.op, e.key, e.err)
}

func (e *transientError) Unwrap() error { return e.err }

// Retryable reports whether trying again is safe and may succeed: the one
// classifier of the package, for occ.WithRetryable. It is true for
//
//   - a deadlock (MySQL 1213) or a serialization failure or deadlock
//     (PostgreSQL 40001, 40P01): the transaction was rolled back (the store
//     returns these as a *cas.ConflictError, which occ retries anyway);
//   - a lock wait that gave up: MySQL's lock-wait timeout (1205) and
//     SQLite's SQLITE_BUSY or SQLITE_LOCKED (the busy timeout ran out, or
//     a deferred transaction could not become the writer);
//   - a read that failed for any reason but a lasting server answer (a
//     missing table, a syntax error), and a write that was never sent (no
//     connection, driver.ErrBadConn) or that the server refused by ending
//     the session (MySQL 1053 shutdown, 1927 connection killed, 1040 too
//     many connections; PostgreSQL 57P01 and the like).
//
// It is false for a write whose reply was lost after it was sent: the
// store resolves those by their write id and returns a *cas.AmbiguousError
// (cas.ErrAmbiguous) when it cannot tell, which is never retryable; and
// false once the context has ended.
func Retryable(err error) bool {
	if err == nil || errors.Is(err, cas.ErrAmbiguous) ||
		errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	if isConflict(err) || isBusy(err) {
		return true
	}
	var te *transientError
	return errors.As(err, &te)
}

// readError wraps the failure of a read: reading again is safe, and worth
// it unless the server gave a lasting answer or the context ended.
func (s *Store) readError(op, key string, err error) error {
	switch {
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
	case isBusy(err), isConflict(err), sessionEnded(err):
		return &transientError{op: op, key: key, err: err}
	case answered(err):
		return s.serverError(op, key, 0, err)
	default:
		return &transientError{op: op, key: key, err: err}
	}
	return fmt.Errorf("sqlcas: %s %q: %w", op, key, err)
}

// serverError maps the database's error answer to a statement, which did
// not apply.
func (s *Store) serverError(op, key string, expected cas.Version, err error) error {
	switch {
	case isConflict(err):
		return &cas.ConflictError{Key: key, Expected: expected, Err: err}
	case isBusy(err):
		return &transientError{op: op, key: key, why: "not applied, lock wait gave up", err: err}
	case sessionEnded(err):
		return &transientError{op: op, key: key, why: "not applied, session ended", err: err}
	case s.missingTable(err):
		return fmt.Errorf("sqlcas: %s %q: table %s does not exist (create it with CreateTable or the DDL): %w", op, key, s.table, err)
	}
	return fmt.Errorf("sqlcas: %s %q: %w", op, key, err)
}

// missingTable reports the database's "no such table" answer.
func (s *Store) missingTable(err error) bool {
	if me, ok := asMySQL(err); ok {
		return me.Number == mysqlNoSuchTable
	}
	if pe, ok := asPg(err); ok {
		return pe.Code == pgUndefinedTable
	}
	if code, ok := sqliteCode(err); ok {
		return code == sqliteError && strings.Contains(err.Error(), "no such table")
	}
	return false
}

// resolveTimeout bounds the read that resolves a lost reply.
const resolveTimeout = 5 * time.Second

// writeFailed turns the failure of a single-statement write into the
// error to return. An error answer means the statement did not apply. A
// lost reply is resolved when it can be: the row's write id names the
// last write, so finding this write's id proves it applied.
func (s *Store) writeFailed(ctx context.Context, op, key string, expected cas.Version, id writeid.ID, err error) (cas.Version, error) {
	switch {
	case answered(err):
		return 0, s.serverError(op, key, expected, err)
	case notSent(err):
		return 0, &transientError{op: op, key: key, why: "not sent", err: err}
	case s.inTx:
		// The caller's transaction is lost with its connection: nothing
		// of it commits, unless the caller's COMMIT says otherwise.
		return 0, fmt.Errorf("sqlcas: %s %q inside the caller's transaction: %w", op, key, err)
	}
	if v, ok := s.resolve(ctx, key, id, op == "compare-and-delete"); ok {
		return v, nil
	}
	return 0, &cas.AmbiguousError{Op: op, Key: key, WriteID: id.String(), Err: err}
}

// resolve reads key back through the *sql.DB and reports whether the
// write tagged id applied, with the version it made. It gives up (false)
// when ctx has ended (except on SQLite, which is in process and answers
// at once) or the row cannot be read.
func (s *Store) resolve(ctx context.Context, key string, id writeid.ID, del bool) (cas.Version, bool) {
	if ctx.Err() != nil {
		if s.d != SQLite {
			return 0, false
		}
		ctx = context.WithoutCancel(ctx)
	}
	ctx, cancel := context.WithTimeout(ctx, resolveTimeout)
	defer cancel()
	return sqlrows.ResolveOne(s.db.QueryRowContext(ctx, s.st.resolve.text, key), id, del)
}
