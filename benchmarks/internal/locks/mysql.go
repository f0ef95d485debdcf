package locks

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"strconv"
	"time"
)

// MySQL is MySQL's named lock as applications take it: GET_LOCK in the
// session of a connection taken from the pool and held for the critical
// section, RELEASE_LOCK in the same session, after which the connection
// goes back to the pool. No fencing token. A named lock lasts as long as
// its session. Set the fields before the first Acquire.
type MySQL struct {
	// DB is the pool the sessions come from.
	DB *sql.DB
	// WaitStep is the longest single GET_LOCK wait (default 1 s): the
	// wait goes on in steps, checking the context between them, so that
	// it never has to be cancelled mid-statement (which closes the
	// connection).
	WaitStep time.Duration
	// KeepAlive, when positive, keeps a held lock's session alive with a
	// statement this often; a statement that fails means the session,
	// and the lock, are gone: the grant is lost. Zero: no keepalive, and
	// Lost is nil.
	KeepAlive time.Duration
}

// Acquire takes the named lock name. The grant's Ref is the holder's
// session (its connection id). Its Release releases the lock in the
// session (ErrNotHeld when the session no longer held it) and gives the
// connection back to the pool; a failed release discards the connection,
// and the lock goes with the session.
func (l *MySQL) Acquire(ctx context.Context, name string) (*Grant, error) {
	step := l.WaitStep
	if step <= 0 {
		step = time.Second
	}
	conn, err := l.DB.Conn(ctx)
	if err != nil {
		return nil, err
	}
	var id int64
	for {
		var got sql.NullInt64
		err := conn.QueryRowContext(ctx, `SELECT GET_LOCK(?, ?), CONNECTION_ID()`, name, step.Seconds()).Scan(&got, &id)
		if err == nil && got.Valid && got.Int64 == 1 {
			break
		}
		if err == nil {
			err = ctx.Err()
		}
		if err != nil {
			discard(conn) // the session ends, and any lock it got with it
			return nil, err
		}
	}
	g := &Grant{Ref: strconv.FormatInt(id, 10), release: func(ctx context.Context) error {
		var released sql.NullInt64
		err := conn.QueryRowContext(ctx, `SELECT RELEASE_LOCK(?)`, name).Scan(&released)
		if err == nil && released.Int64 != 1 {
			err = ErrNotHeld
		}
		if err != nil {
			discard(conn)
			return err
		}
		return conn.Close()
	}}
	if every := l.KeepAlive; every > 0 {
		// A statement every KeepAlive; one that fails means the session
		// (and the lock) is gone.
		g.watch(func(w *watch) {
			w.tick(every, func() time.Duration {
				ctx, cancel := context.WithTimeout(context.Background(), 2*every)
				defer cancel()
				if _, err := conn.ExecContext(ctx, `DO 1`); err != nil {
					w.lose("its keepalive statement failed, its session is gone: " + err.Error())
					return 0
				}
				return every
			})
		})
	}
	return g, nil
}

// discard closes conn's session: the connection is not returned to the
// pool.
func discard(conn *sql.Conn) {
	_ = conn.Raw(func(any) error { return driver.ErrBadConn })
	_ = conn.Close()
}
