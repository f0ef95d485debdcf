package story

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"log"
	"strconv"
	"time"

	"github.com/go-sql-driver/mysql"
)

// The mysql mode: MySQL's named lock as applications take it, GET_LOCK in
// the session of a connection held for the critical section and
// RELEASE_LOCK at the end; no fencing token. A named lock lasts as long
// as its session. The client keeps its session alive with a statement
// every TTL/3, and the server ends a session idle for longer than its
// wait_timeout, set to the TTL: a client that stops (paused, cut off)
// loses its session, and the lock with it, as a ZooKeeper client loses
// its session when its heartbeats stop.

// mysqlWaitStep is the longest single GET_LOCK wait; the wait goes on in
// steps, checking the context between them.
const mysqlWaitStep = 250 * time.Millisecond

// mysqlSession returns the session timeout (wait_timeout, whole seconds,
// at least 1) for a TTL.
func mysqlSession(ttl time.Duration) int { return max(1, int(ttl.Round(time.Second).Seconds())) }

func openMySQLLock(_ context.Context, r *run) (lockService, error) {
	if r.spec.Endpoints.MySQL == "" {
		return nil, errors.New("no MySQL server")
	}
	db, err := mysqlPool(r.spec.Endpoints.MySQL, 0)
	if err != nil {
		return nil, err
	}
	return &mysqlLockService{db: db, name: "occkit-story:" + r.spec.NS, ttl: r.spec.TTL}, nil
}

// mysqlPool opens a pool on the server of dsn, without a database; a
// session timeout (wait_timeout, seconds) when session > 0.
func mysqlPool(dsn string, session int) (*sql.DB, error) {
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return nil, err
	}
	cfg.DBName = ""
	cfg.InterpolateParams = true
	cfg.Timeout = 2 * time.Second
	// The driver logs a connection the server closed ("unexpected
	// EOF"): here that is the story, shown on the timeline instead.
	cfg.Logger = mysql.Logger(log.New(io.Discard, "", 0))
	if session > 0 {
		if cfg.Params == nil {
			cfg.Params = map[string]string{}
		}
		cfg.Params["wait_timeout"] = strconv.Itoa(session) // set in every session at connect
	}
	c, err := mysql.NewConnector(cfg)
	if err != nil {
		return nil, err
	}
	db := sql.OpenDB(c)
	if session > 0 {
		// The server ends idle sessions after wait_timeout: do not keep
		// idle connections for longer.
		db.SetConnMaxIdleTime(time.Duration(session) * time.Second / 2)
	}
	return db, nil
}

type mysqlLockService struct {
	db   *sql.DB // direct, default session timeout
	name string  // the lock's name
	ttl  time.Duration
}

func (s *mysqlLockService) newLocker(_ context.Context, ep endpoints) (locker, error) {
	db, err := mysqlPool(ep.MySQL, mysqlSession(s.ttl))
	if err != nil {
		return nil, err
	}
	return &mysqlLocker{db: db, name: s.name, keepAlive: s.ttl / 3}, nil
}

// held: IS_USED_LOCK names the session that holds the lock; ref is the
// holder's session (connection id).
func (s *mysqlLockService) held(ctx context.Context, ref string) (bool, error) {
	var holder sql.NullInt64
	if err := s.db.QueryRowContext(ctx, `SELECT IS_USED_LOCK(?)`, s.name).Scan(&holder); err != nil {
		return false, err
	}
	return holder.Valid && strconv.FormatInt(holder.Int64, 10) == ref, nil
}

func (s *mysqlLockService) expireEarly(ctx context.Context, ref string) (string, error) {
	id, err := strconv.ParseInt(ref, 10, 64)
	if err != nil {
		return "", err
	}
	if _, err := s.db.ExecContext(ctx, "KILL CONNECTION "+strconv.FormatInt(id, 10)); err != nil {
		return "", fmt.Errorf("killing session %d: %w", id, err)
	}
	return fmt.Sprintf("the runner killed the holder's session %d on the server (KILL CONNECTION), as a session timeout or a dropped connection ends it: its GET_LOCK lock went with the session", id), nil
}

func (s *mysqlLockService) expired() string {
	return fmt.Sprintf("its MariaDB session ended (no statement within wait_timeout=%ds, or its connection was dropped): its GET_LOCK lock went with the session", mysqlSession(s.ttl))
}

func (s *mysqlLockService) cleanup(context.Context) error { return nil } // locks end with their sessions
func (s *mysqlLockService) close()                        { _ = s.db.Close() }

// mysqlLocker is one client's pool and its lock.
type mysqlLocker struct {
	db        *sql.DB
	name      string
	keepAlive time.Duration
}

func (l *mysqlLocker) close() { _ = l.db.Close() }

func (l *mysqlLocker) acquire(ctx context.Context) (grant, error) {
	conn, err := l.db.Conn(ctx)
	if err != nil {
		return nil, err
	}
	discard := func() {
		_ = conn.Raw(func(any) error { return driver.ErrBadConn })
		_ = conn.Close()
	}
	var id int64
	if err := conn.QueryRowContext(ctx, `SELECT CONNECTION_ID()`).Scan(&id); err != nil {
		discard()
		return nil, err
	}
	for {
		var got sql.NullInt64
		if err := conn.QueryRowContext(ctx, `SELECT GET_LOCK(?, ?)`, l.name, mysqlWaitStep.Seconds()).Scan(&got); err != nil {
			discard() // the session ends, and any lock it got with it
			return nil, err
		}
		if got.Valid && got.Int64 == 1 {
			break
		}
		if err := ctx.Err(); err != nil {
			discard()
			return nil, err
		}
	}
	g := &mysqlGrant{l: l, conn: conn, id: id, lostCh: make(chan struct{}), stop: make(chan struct{}), done: make(chan struct{})}
	go g.keep()
	return g, nil
}

type mysqlGrant struct {
	l      *mysqlLocker
	conn   *sql.Conn
	id     int64 // the session's connection id
	lostCh chan struct{}
	cause  string
	stop   chan struct{}
	done   chan struct{}
}

func (g *mysqlGrant) token() uint64              { return 0 }
func (g *mysqlGrant) ref() string                { return strconv.FormatInt(g.id, 10) }
func (g *mysqlGrant) expires() (time.Time, bool) { return time.Time{}, false }
func (g *mysqlGrant) lost() <-chan struct{}      { return g.lostCh }
func (g *mysqlGrant) lostCause() string          { return g.cause }

// keep keeps the session alive with a statement every keepAlive, until
// the grant is released; a statement that fails means the session (and
// the lock) is gone.
func (g *mysqlGrant) keep() {
	defer close(g.done)
	t := time.NewTicker(g.l.keepAlive)
	defer t.Stop()
	for {
		select {
		case <-g.stop:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*g.l.keepAlive)
		_, err := g.conn.ExecContext(ctx, `DO 1`)
		cancel()
		if err != nil {
			g.cause = "its keepalive statement failed, its session is gone: " + err.Error()
			close(g.lostCh)
			return
		}
	}
}

var errNotHeld = errors.New("the session no longer held the lock")

func (g *mysqlGrant) release(ctx context.Context) error {
	close(g.stop)
	<-g.done
	var released sql.NullInt64
	err := g.conn.QueryRowContext(ctx, `SELECT RELEASE_LOCK(?)`, g.l.name).Scan(&released)
	if err == nil && released.Int64 != 1 {
		err = errNotHeld
	}
	if err != nil {
		_ = g.conn.Raw(func(any) error { return driver.ErrBadConn })
	}
	_ = g.conn.Close()
	return err
}
