package story

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log"
	"strconv"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/occkit/occkit/benchmarks/internal/locks"
)

// The mysql mode: MySQL's named lock (locks.MySQL) as applications take it, GET_LOCK in
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

func (s *mysqlLockService) newLocker(_ context.Context, ep endpoints) (*locker, error) {
	db, err := mysqlPool(ep.MySQL, mysqlSession(s.ttl))
	if err != nil {
		return nil, err
	}
	l := &locks.MySQL{DB: db, WaitStep: mysqlWaitStep, KeepAlive: s.ttl / 3}
	return &locker{l: l, name: s.name, close: func() { _ = db.Close() }}, nil
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
