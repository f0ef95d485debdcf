package pgcas

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/hybrid"
	"github.com/occkit/occkit/internal/leases"
	"github.com/occkit/occkit/occ"
)

// maxAttemptsOne runs a RunTx function once.
var maxAttemptsOne = []occ.Option{occ.WithMaxAttempts(1)}

var (
	_ hybrid.Locker = (*Locker)(nil)
	_ hybrid.Lease  = (*Lease)(nil)
)

// DefaultTokenCounter is the sequence fencing tokens come from when
// LockerConfig.TokenCounter is empty.
const DefaultTokenCounter = "occkit_lock_token"

// LockerConfig configures a Locker. The zero value is ready to use:
// session locks, tokens from the sequence "occkit_lock_token", a check of
// each lease every second.
type LockerConfig struct {
	// TokenCounter is the sequence fencing tokens come from (one
	// identifier, quoted); Locker.CreateTokenCounter creates it. Empty
	// means DefaultTokenCounter. The sequence is also the locks'
	// namespace: lockers with the same sequence (the same one, however
	// named) exclude each other on a key, lockers with different
	// sequences do not.
	TokenCounter string
	// Schema is the token counter's schema; empty means the search_path.
	Schema string
	// Transaction makes each lease a transaction holding
	// pg_advisory_xact_lock: the lock ends with the transaction, and the
	// lease's Tx runs work under it. Otherwise a lease holds
	// pg_advisory_lock on a connection of its own.
	Transaction bool
	// CheckInterval is how often a lease checks that it still holds its
	// lock; its Context is cancelled when a check fails. 0 means one
	// second. A check may take up to max(CheckInterval, 2s) before it
	// counts as failed (see Lease).
	CheckInterval time.Duration
}

// minCheckTimeout is the least time a lease's check may take: a short
// CheckInterval must not make a slow round trip look like a lost lock.
const minCheckTimeout = 2 * time.Second

// Locker hands out exclusive leases on string keys with PostgreSQL
// advisory locks, each with a fencing token from a sequence. The lock key
// is the bigint hashtextextended(key, oid), where oid is the token
// sequence's OID: every grant of a lock draws its token from the same
// sequence, so tokens grow with the grants of a key, and lockers with
// different sequences have separate locks. Two keys with the same 64-bit
// hash share a lock (correct, only less concurrent). It is safe for
// concurrent use.
//
// A lease pins a connection of the pool until it is released, and a
// transaction lease's checks borrow another for a moment: size the pool
// for the leases held at once plus the other work. Release every lease it
// grants; Close ends the leases still held (the pool stays the caller's).
type Locker struct {
	pool     *pgxpool.Pool
	seq      string // quoted
	xact     bool
	interval time.Duration
	timeout  time.Duration // of one check
	sqlLock  string

	leases *leases.Set[*Lease] // granted and not released
}

// NewLocker returns a locker using pool. It does not talk to the server:
// create the token counter with CreateTokenCounter first.
func NewLocker(pool *pgxpool.Pool, cfg LockerConfig) (*Locker, error) {
	if pool == nil {
		return nil, errors.New("pgcas: NewLocker: nil pool")
	}
	seq, err := quoteTable(cfg.Schema, cfg.TokenCounter, DefaultTokenCounter)
	if err != nil {
		return nil, fmt.Errorf("pgcas: NewLocker: %w", err)
	}
	l := &Locker{pool: pool, seq: seq, xact: cfg.Transaction, interval: cfg.CheckInterval, leases: leases.NewSet[*Lease]()}
	if l.interval <= 0 {
		l.interval = time.Second
	}
	l.timeout = max(l.interval, minCheckTimeout)
	fn := "pg_advisory_lock"
	if l.xact {
		fn = "pg_advisory_xact_lock"
	}
	// The token is drawn after the lock is granted (the CTE is
	// materialized first), so tokens grow in grant order. The lock key
	// comes back, for the unlock and the checks.
	l.sqlLock = `WITH l AS MATERIALIZED (
    SELECT k, ` + fn + `(k) FROM (SELECT hashtextextended($1, $2::regclass::oid::bigint) AS k) s)
SELECT nextval($2::regclass), k FROM l`
	return l, nil
}

// CreateTokenCounter creates the token counter, a sequence, if it does
// not exist.
func (l *Locker) CreateTokenCounter(ctx context.Context) error {
	if _, err := l.pool.Exec(ctx, `CREATE SEQUENCE IF NOT EXISTS `+l.seq+` AS bigint`); err != nil {
		return fmt.Errorf("pgcas: create sequence %s: %w", l.seq, err)
	}
	return nil
}

// Acquire implements hybrid.Locker: it waits until it holds key's lock, or
// ctx ends, and returns the lease (a *Lease).
func (l *Locker) Acquire(ctx context.Context, key string) (hybrid.Lease, error) {
	if ctx == nil {
		return nil, fmt.Errorf("pgcas: lock %q: %w", key, cas.ErrNilContext)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	closing := l.leases.Closing()
	if closing.Err() != nil {
		return nil, fmt.Errorf("pgcas: lock %q: %w", key, errLockerClosed)
	}
	// A Close ends the wait: the lock query is cancelled like a ctx that
	// ended.
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stop := context.AfterFunc(closing, func() { cancel(errLockerClosed) })
	defer stop()
	conn, err := l.pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("pgcas: lock %q: %w", key, acquireErr(ctx, err))
	}
	lease := &Lease{locker: l, key: key, conn: conn}
	var q interface {
		QueryRow(context.Context, string, ...any) pgx.Row
	} = conn
	if l.xact {
		if lease.tx, err = conn.Begin(ctx); err != nil {
			conn.Release()
			return nil, fmt.Errorf("pgcas: lock %q: %w", key, acquireErr(ctx, err))
		}
		q = lease.tx
	}
	var token int64
	if err := q.QueryRow(ctx, l.sqlLock, key, l.seq).Scan(&token, &lease.lockKey); err != nil {
		// The lock may have been granted just as the wait was cancelled:
		// close the connection, which releases anything it holds.
		_ = conn.Conn().Close(context.Background())
		conn.Release()
		return nil, fmt.Errorf("pgcas: lock %q: %w", key, acquireErr(ctx, err))
	}
	lease.token = uint64(token)
	lease.pid = conn.Conn().PgConn().PID()
	lease.ctx, lease.cancel = context.WithCancelCause(context.WithoutCancel(ctx))
	lease.stop = make(chan struct{})
	lease.done = make(chan struct{})
	if !l.leases.Add(lease) { // closed after the grant
		lease.cancel(errLockerClosed)
		_ = conn.Conn().Close(context.Background()) // frees the lock
		conn.Release()
		return nil, fmt.Errorf("pgcas: lock %q: %w", key, errLockerClosed)
	}
	go lease.watch()
	return lease, nil
}

// acquireErr is err, or the locker's closing when Close ended the wait.
func acquireErr(ctx context.Context, err error) error {
	if cause := context.Cause(ctx); errors.Is(cause, errLockerClosed) {
		return cause
	}
	return err
}

// errLockerClosed is the error of Acquire on a closed Locker, and the
// cause of the Context of the leases Close ended. It matches
// hybrid.ErrLockerClosed as well as hybrid.ErrLeaseLost, so that
// hybrid.Update and Txn end at once instead of retrying for a fresh lease
// a closed locker will never grant.
var errLockerClosed = fmt.Errorf("%w: pgcas: %w", hybrid.ErrLeaseLost, hybrid.ErrLockerClosed)

// Close ends every lease the Locker granted and that was not released:
// their Contexts are cancelled (the cause matches hybrid.ErrLeaseLost) and
// their locks freed by closing their sessions. A session lease's
// connection goes back to the pool at once; a transaction lease's
// connection is cut under its Tx (whose work then fails) and goes back to
// the pool when the lease is released, which may still be done and
// returns the cause. Acquire fails from then on, also a call already
// waiting, with an error matching hybrid.ErrLeaseLost. The pool stays open: it is the caller's. Close is safe for
// concurrent use with the other methods; closing again does nothing and
// returns nil.
func (l *Locker) Close() error {
	for _, le := range l.leases.Close(errLockerClosed) {
		le.lose(errLockerClosed)
	}
	return nil
}

// errLockLost is the cause of a lease's Context when its lock was lost:
// its connection broke or, for a transaction lease, its transaction
// ended, or a check could not tell in time (see Lease).
var errLockLost = fmt.Errorf("%w: pgcas: advisory lock lost", hybrid.ErrLeaseLost)

// Lease is a lease of a Locker, a hybrid.Lease. Its methods may be called
// from any goroutine; the transaction Tx returns may be used by one
// goroutine at a time, as any pgx.Tx. It is not a hybrid.ExpiringLease: an
// advisory lock has no TTL, it lasts as long as its session (or
// transaction).
//
// Until it is released, a lease checks every CheckInterval that it still
// holds its lock, and cancels its Context (with a cause matching
// hybrid.ErrLeaseLost) when a check fails or takes longer than
// max(CheckInterval, 2s). A session
// lease pings its own connection: the session, and so its lock, is alive
// if the connection is. A transaction lease leaves its connection to the
// user of Tx, and asks pg_locks, on another connection of the pool,
// whether its backend still holds the lock: it is lost when that backend
// died, or when its transaction ended because Tx was committed or rolled
// back. A check that cannot get a connection of the pool in time fails
// too.
type Lease struct {
	locker  *Locker
	key     string
	token   uint64
	lockKey int64  // the advisory lock's bigint key
	pid     uint32 // the backend holding the lock
	conn    *pgxpool.Conn
	tx      pgx.Tx // transaction leases only
	ctx     context.Context
	cancel  context.CancelCauseFunc
	stop    chan struct{} // closed by stopWatch
	done    chan struct{} // closed when watch has returned
	stopped sync.Once

	mu     sync.Mutex
	ended  bool  // Release has begun, or Close released a session lease
	closed error // why Close released a session lease, until Release reports it
}

// Token implements hybrid.Lease.
func (le *Lease) Token() uint64 { return le.token }

// Context implements hybrid.Lease: cancelled on Release (cause
// hybrid.ErrLeaseReleased), and when a periodic check finds the lock lost
// (a cause matching hybrid.ErrLeaseLost).
func (le *Lease) Context() context.Context { return le.ctx }

// Tx returns the transaction holding a transaction lease's lock, for work
// that should commit under it, or nil for a session lease.
func (le *Lease) Tx() pgx.Tx { return le.tx }

// watch checks the lock until the lease is released or the lock is lost.
func (le *Lease) watch() {
	defer close(le.done)
	if err := leases.Every(le.stop, le.locker.interval, le.locker.timeout, le.check); err != nil {
		le.cancel(fmt.Errorf("%w: %w", errLockLost, err))
	}
}

// sqlHeld tells whether backend $1 holds an advisory lock on a bigint key
// whose high half is $2 and low half $3 (pg_locks shows a bigint key as
// classid, objid and objsubid 1).
const sqlHeld = `SELECT EXISTS (SELECT FROM pg_locks WHERE locktype = 'advisory' AND granted
    AND pid = $1 AND objsubid = 1 AND classid::bigint = $2 AND objid::bigint = $3)`

// check returns an error unless the lease still holds its lock. A session
// lease pings its connection, which no one else uses; a transaction
// lease's connection belongs to the user of Tx, so it asks pg_locks on
// another one.
func (le *Lease) check(ctx context.Context) error {
	if le.tx == nil {
		return le.conn.Ping(ctx)
	}
	var held bool
	k := uint64(le.lockKey)
	if err := le.locker.pool.QueryRow(ctx, sqlHeld, int64(le.pid), int64(k>>32), int64(k&0xffffffff)).Scan(&held); err != nil {
		return err
	}
	if !held {
		return fmt.Errorf("backend %d no longer holds the lock of %q", le.pid, le.key)
	}
	return nil
}

// Release implements hybrid.Lease: a session lease unlocks its key, a
// transaction lease commits its transaction (which releases the lock).
// It first stops the checks, waiting for one in progress. It returns the
// cause (matching hybrid.ErrLeaseLost) if the lock had already been lost;
// calling it again does nothing and returns nil. A release that fails
// (ctx ended, the server unreachable) closes the lease's connection, which
// frees its lock.
func (le *Lease) Release(ctx context.Context) error {
	if ctx == nil {
		return fmt.Errorf("pgcas: release %q: %w", le.key, cas.ErrNilContext)
	}
	le.mu.Lock()
	if le.ended {
		// Ended by Close (a session lease): report the loss once.
		lost := le.closed
		le.closed = nil
		le.mu.Unlock()
		return lost
	}
	le.ended = true
	le.mu.Unlock()
	defer le.locker.leases.Remove(le)
	return le.release(ctx)
}

// stopWatch stops the checks and waits for one in progress (at most the
// check's timeout).
func (le *Lease) stopWatch() {
	le.stopped.Do(func() { close(le.stop) })
	<-le.done
}

// lose ends the lease for Close, with cause: a session lease is released
// (its connection, closed, goes back to the pool); a transaction lease's
// connection is cut below pgx (closing the socket is safe while its Tx is
// in use on another goroutine), and Release gives it back.
func (le *Lease) lose(cause error) {
	le.cancel(cause)
	le.stopWatch()
	le.mu.Lock()
	defer le.mu.Unlock()
	if le.ended {
		return
	}
	if le.tx == nil {
		le.ended = true
		le.closed = cause
		ctx, cancel := context.WithTimeout(context.Background(), le.locker.timeout)
		defer cancel()
		_ = le.release(ctx)
		return
	}
	_ = le.conn.Conn().PgConn().Conn().Close()
}

func (le *Lease) release(ctx context.Context) error {
	defer le.conn.Release()
	defer le.cancel(hybrid.ErrLeaseReleased)
	// Stop the checks first: the lock is about to go, on purpose.
	le.stopWatch()
	if cause := context.Cause(le.ctx); cause != nil {
		_ = le.conn.Conn().Close(ctx)
		return cause
	}
	if le.tx != nil {
		if err := le.tx.Commit(ctx); err != nil {
			// Unknown state: close the session, which ends the
			// transaction and its lock.
			_ = le.conn.Conn().Close(context.Background())
			return fmt.Errorf("pgcas: release %q: %w", le.key, err)
		}
		return nil
	}
	var ok bool
	err := le.conn.QueryRow(ctx, `SELECT pg_advisory_unlock($1::bigint)`, le.lockKey).Scan(&ok)
	if err != nil || !ok {
		// Unknown state: close the session, which drops its locks.
		_ = le.conn.Conn().Close(context.Background())
		if err == nil {
			err = errors.New("lock was not held")
		}
		return fmt.Errorf("pgcas: release %q: %w", le.key, err)
	}
	return nil
}
