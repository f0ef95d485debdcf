package sqlcas

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/hybrid"
	"github.com/occkit/occkit/internal/leases"
)

// DefaultTokenCounter is the table fencing tokens come from when
// LockerConfig.TokenCounter is empty.
const DefaultTokenCounter = "occkit_lock_tokens"

// LockerConfig configures a Locker. The zero value is ready to use: tokens
// from the table "occkit_lock_tokens", a check of each lease every second.
type LockerConfig struct {
	// TokenCounter is the table fencing tokens come from, holding one
	// counter row (one identifier, quoted); Locker.CreateTokenCounter
	// creates it. Empty means DefaultTokenCounter. With the current
	// database, it is also the locks' namespace: lockers of the same
	// database and table exclude each other on a key, others do not
	// (MySQL's named locks are server-wide, so the lock name hashes both
	// in).
	TokenCounter string
	// CheckInterval is how often a lease checks that its session still
	// holds its lock; its Context is cancelled when a check fails. 0 means
	// one second. A check may take up to max(CheckInterval, 2s).
	CheckInterval time.Duration
}

// Locker hands out exclusive leases on string keys with MySQL's named
// locks, GET_LOCK and RELEASE_LOCK (MySQL 8, MariaDB), each with a fencing
// token drawn from a counter row after the lock is granted, so tokens
// grow with the grants of a key. It is a hybrid.Locker: use its tokens
// with a fenced write (Store.CompareAndSwapFenced, Table.UpdateFenced).
//
// A lease holds its lock in the session of a connection of its own, taken
// from the *sql.DB until it is released: size the pool (SetMaxOpenConns)
// for the leases held at once plus the other work. A named lock lasts as
// long as its session: when the connection is lost (the server restarts,
// the session is killed, the network drops it), the lock is released by
// the server, and the lease's periodic check cancels its Context with a
// cause matching hybrid.ErrLeaseLost. Between the loss and the check
// another holder may already write: which is why the token must be
// checked by the write itself.
//
// The lock name is "occkit:" and 40 hex digits of
// SHA2(database, token table, key): MySQL's limit is 64 characters. A
// Locker is safe for concurrent use.
type Locker struct {
	db       *sql.DB
	interval time.Duration
	timeout  time.Duration
	table    string // quoted
	raw      string

	sqlLock, sqlToken string

	leases *leases.Set[*Lease] // granted and not ended
}

var _ hybrid.Locker = (*Locker)(nil)

// NewLocker returns a MySQL locker over db. It does not talk to the
// server: create the token counter with CreateTokenCounter first.
func NewLocker(db *sql.DB, cfg LockerConfig) (*Locker, error) {
	if db == nil {
		return nil, errors.New("sqlcas: NewLocker: nil *sql.DB")
	}
	raw := cfg.TokenCounter
	if raw == "" {
		raw = DefaultTokenCounter
	}
	table, err := MySQL.quote(raw)
	if err != nil {
		return nil, fmt.Errorf("sqlcas: NewLocker: %w", err)
	}
	l := &Locker{db: db, interval: cfg.CheckInterval, table: table, raw: raw, leases: leases.NewSet[*Lease]()}
	if l.interval <= 0 {
		l.interval = time.Second
	}
	l.timeout = max(l.interval, 2*time.Second)
	// The name is computed by the server (DATABASE() is the session's)
	// and returned for RELEASE_LOCK and the checks.
	l.sqlLock = `SELECT n, GET_LOCK(n, ?) FROM (SELECT CONCAT('occkit:', LEFT(SHA2(CONCAT_WS(CHAR(0), COALESCE(DATABASE(), ''), ?, ?), 256), 40)) AS n) s`
	l.sqlToken = `UPDATE ` + table + ` SET n = LAST_INSERT_ID(n + 1) WHERE name = 'tokens'`
	return l, nil
}

// CreateTokenCounter creates the token counter, a table and its counter
// row, if they do not exist.
func (l *Locker) CreateTokenCounter(ctx context.Context) error {
	for _, q := range []string{
		`CREATE TABLE IF NOT EXISTS ` + l.table + ` (name VARCHAR(64) NOT NULL PRIMARY KEY, n BIGINT NOT NULL) ENGINE=InnoDB`,
		`INSERT IGNORE INTO ` + l.table + ` (name, n) VALUES ('tokens', 0)`,
	} {
		if _, err := l.db.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("sqlcas: create token table %s: %w", l.table, err)
		}
	}
	return nil
}

// errLockerClosed is the error of Acquire on a closed Locker, and the
// cause of the Context of the leases Close ended. It matches
// hybrid.ErrLockerClosed as well as hybrid.ErrLeaseLost, so that
// hybrid.Update and Txn end at once instead of asking for a fresh lease.
var errLockerClosed = fmt.Errorf("%w: sqlcas: %w", hybrid.ErrLeaseLost, hybrid.ErrLockerClosed)

// maxWait is the longest single GET_LOCK wait: Acquire waits in steps,
// checking its context between them, so that the wait never needs to be
// cancelled mid-statement (which would close the connection).
const maxWait = 500 * time.Millisecond

// Acquire waits until it holds key's lock, or ctx ends, and returns the
// lease (a *Lease).
func (l *Locker) Acquire(ctx context.Context, key string) (hybrid.Lease, error) {
	if ctx == nil {
		return nil, fmt.Errorf("sqlcas: lock %q: %w", key, cas.ErrNilContext)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("sqlcas: lock %q: %w", key, err)
	}
	if l.isClosed() {
		return nil, fmt.Errorf("sqlcas: lock %q: %w", key, errLockerClosed)
	}
	conn, err := l.db.Conn(ctx)
	if err != nil {
		return nil, fmt.Errorf("sqlcas: lock %q: %w", key, err)
	}
	discard := func() {
		// The session may hold the lock (granted as the wait ended):
		// closing the connection ends the session, which releases it.
		_ = conn.Raw(func(any) error { return driver.ErrBadConn })
		_ = conn.Close()
	}
	var name string
	for {
		wait := maxWait
		if dl, ok := ctx.Deadline(); ok {
			wait = min(wait, max(time.Until(dl), 10*time.Millisecond))
		}
		var got sql.NullInt64
		qctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), wait+l.timeout)
		err := conn.QueryRowContext(qctx, l.sqlLock, wait.Seconds(), l.raw, key).Scan(&name, &got)
		cancel()
		if err != nil {
			discard()
			return nil, fmt.Errorf("sqlcas: lock %q: %w", key, err)
		}
		if got.Valid && got.Int64 == 1 {
			break
		}
		if err := ctx.Err(); err != nil {
			_ = conn.Close()
			return nil, fmt.Errorf("sqlcas: lock %q: %w", key, err)
		}
		if l.isClosed() {
			_ = conn.Close()
			return nil, fmt.Errorf("sqlcas: lock %q: %w", key, errLockerClosed)
		}
	}
	// The token is drawn after the grant, so it is larger than the token
	// of every earlier grant of this lock.
	res, err := conn.ExecContext(ctx, l.sqlToken)
	var token int64
	if err == nil {
		var n int64
		if n, err = res.RowsAffected(); err == nil && n == 0 {
			err = fmt.Errorf("no counter row in %s: create it with CreateTokenCounter", l.table)
		}
		if err == nil {
			token, err = res.LastInsertId()
		}
	}
	if err != nil {
		discard()
		return nil, fmt.Errorf("sqlcas: lock %q: token: %w", key, err)
	}
	le := &Lease{locker: l, key: key, name: name, token: uint64(token), conn: conn,
		stop: make(chan struct{}), done: make(chan struct{})}
	le.ctx, le.cancel = context.WithCancelCause(context.Background())
	if !l.leases.Add(le) {
		discard()
		le.cancel(errLockerClosed)
		return nil, fmt.Errorf("sqlcas: lock %q: %w", key, errLockerClosed)
	}
	go le.watch()
	return le, nil
}

func (l *Locker) isClosed() bool { return l.leases.Closing().Err() != nil }

// Close ends every lease the Locker granted and that was not released:
// their Contexts are cancelled (the cause matches hybrid.ErrLeaseLost) and
// their locks freed by closing their connections, which ends their
// sessions. Acquire fails from then on, also a call already waiting (at
// its next step, within half a second), with an error matching
// hybrid.ErrLeaseLost. The *sql.DB stays open: it is the
// caller's. Close is safe for concurrent use with the other methods;
// closing again does nothing and returns nil.
func (l *Locker) Close() error {
	for _, le := range l.leases.Close(errLockerClosed) {
		le.end(errLockerClosed, true)
	}
	return nil
}

// Lease is a lease of a Locker: a named lock held by the session of one
// connection. Its methods may be called from any goroutine.
type Lease struct {
	locker *Locker
	key    string
	name   string // the lock's name
	token  uint64
	conn   *sql.Conn
	ctx    context.Context
	cancel context.CancelCauseFunc
	stop   chan struct{} // closed to stop watch
	done   chan struct{} // closed when watch returned

	mu    sync.Mutex
	ended bool
}

var _ hybrid.Lease = (*Lease)(nil)

// Token implements hybrid.Lease.
func (le *Lease) Token() uint64 { return le.token }

// Name returns the named lock's name, as IS_USED_LOCK and
// performance_schema.metadata_locks show it.
func (le *Lease) Name() string { return le.name }

// Context implements hybrid.Lease: cancelled on Release (cause
// hybrid.ErrLeaseReleased), and when a check finds the lock lost or the
// locker is closed (a cause matching hybrid.ErrLeaseLost).
func (le *Lease) Context() context.Context { return le.ctx }

// watch checks, every CheckInterval, that the session still holds the
// lock.
func (le *Lease) watch() {
	defer close(le.done)
	if err := leases.Every(le.stop, le.locker.interval, le.locker.timeout, le.check); err != nil {
		go le.end(fmt.Errorf("%w: %q: %w", hybrid.ErrLeaseLost, le.key, err), true)
	}
}

// check returns an error unless the lease's session still holds its lock.
func (le *Lease) check(ctx context.Context) error {
	var held sql.NullBool
	err := le.conn.QueryRowContext(ctx, `SELECT IS_USED_LOCK(?) = CONNECTION_ID()`, le.name).Scan(&held)
	if err == nil && !held.Bool {
		err = errors.New("the session no longer holds the lock")
	}
	return err
}

// end ends the lease with cause: it stops the checks, and for a lost lease
// discards the connection (its session may still hold the lock). It
// reports whether this call ended it.
func (le *Lease) end(cause error, lost bool) bool {
	le.mu.Lock()
	if le.ended {
		le.mu.Unlock()
		return false
	}
	le.ended = true
	le.mu.Unlock()
	select {
	case <-le.stop:
	default:
		close(le.stop)
	}
	if lost {
		le.cancel(cause)
		<-le.done // watch returns once stop is closed
		_ = le.conn.Raw(func(any) error { return driver.ErrBadConn })
		_ = le.conn.Close()
	}
	le.locker.leases.Remove(le)
	return true
}

// Release implements hybrid.Lease: it runs RELEASE_LOCK in the lease's
// session, which releases this grant only (a lock lost with its session
// was already released by the server, and a newer holder's lock lives in
// another session, out of reach). A lease found lost returns an error
// matching hybrid.ErrLeaseLost; releasing again returns nil. A cancelled
// ctx does not stop the release (it is one short statement, bounded by
// the check timeout).
func (le *Lease) Release(ctx context.Context) error {
	if ctx == nil {
		return fmt.Errorf("sqlcas: release %q: %w", le.key, cas.ErrNilContext)
	}
	if cause := context.Cause(le.ctx); cause != nil {
		if errors.Is(cause, hybrid.ErrLeaseLost) {
			return cause
		}
		return nil
	}
	if !le.end(nil, false) {
		if cause := context.Cause(le.ctx); errors.Is(cause, hybrid.ErrLeaseLost) {
			return cause
		}
		return nil
	}
	<-le.done // a check in progress finishes first
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), le.locker.timeout)
	defer cancel()
	var released sql.NullInt64
	err := le.conn.QueryRowContext(rctx, `SELECT RELEASE_LOCK(?)`, le.name).Scan(&released)
	if err == nil && released.Int64 != 1 {
		err = errors.New("the session did not hold the lock")
	}
	if err != nil {
		le.cancel(fmt.Errorf("%w: %q: %w", hybrid.ErrLeaseLost, le.key, err))
		_ = le.conn.Raw(func(any) error { return driver.ErrBadConn })
		_ = le.conn.Close()
		return fmt.Errorf("sqlcas: release %q: %w", le.key, context.Cause(le.ctx))
	}
	le.cancel(hybrid.ErrLeaseReleased)
	return le.conn.Close()
}
