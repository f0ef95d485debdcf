package lab

import (
	"context"
	"crypto/rand"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/occkit/occkit/adapters/sqlcas"
	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/occ"
)

var mysqlStrategies = []strategySpec{
	{
		Name:      "lock-mysql-for-update",
		Kind:      kindLock,
		About:     "BEGIN; SELECT ... FOR UPDATE; work; UPDATE; COMMIT on MySQL/MariaDB (the lab's own SQL on the store's table; one SELECT for all keys of a transfer)",
		SingleKey: true, MultiKey: true,
		DefaultOn: func(b string, _ bool) bool { return b == "mysql" },
		New:       newMySQLForUpdate,
	},
	{
		Name:      "lock-mysql-get-lock",
		Kind:      kindLock,
		About:     "GET_LOCK/RELEASE_LOCK per key (plain SQL, a pinned connection per lock) around read, work and write; the data may live on any backend",
		SingleKey: true, MultiKey: true,
		DefaultOn: func(b string, _ bool) bool { return b == "mysql" },
		New:       newMySQLGetLock,
	},
}

// mysqlErDupEntry is MySQL's duplicate-key error.
const mysqlErDupEntry = 1062

func newMySQLForUpdate(_ context.Context, h *harness) (cellStrategy, error) {
	st, ok := h.Store.(*sqlcas.Store)
	mb, ok2 := h.Backend.(*mysqlBackend)
	if !ok || !ok2 || st.Dialect() != sqlcas.MySQL {
		return nil, fmt.Errorf("SELECT ... FOR UPDATE locks rows of the MySQL table holding the data, which is on %s: %w", h.Backend.Info().Name, errNotApplicable)
	}
	db := mb.MySQLDB()
	codec := h.Values.Codec()
	table := mb.table(h.NS)
	// The pessimistic read-modify-write as a repository writes it, on
	// sqlcas's table layout (see sqlcas.Store.DDL): lock every row in key
	// order with one statement, work, write, commit. A tombstone (value
	// NULL) is locked and revived by the write; an absent key cannot be
	// locked: its write inserts the row, and a concurrent insert makes it
	// a conflict, retried.
	sqlLock := func(n int) string {
		return `SELECT k, value FROM ` + table + ` WHERE k IN (?` + strings.Repeat(", ?", n-1) + `) ORDER BY k FOR UPDATE`
	}
	sqlWrite := `UPDATE ` + table + ` SET value = ?, version = version + 1, write_id = ? WHERE k = ?`
	sqlCreate := `INSERT INTO ` + table + ` (k, value, version, write_id) VALUES (?, ?, 1, ?)`
	return strategyFunc(func(ctx context.Context, w int, op operation) error {
		return occ.Retry(ctx, func(ctx context.Context) error {
			return mysqlTx(ctx, db, func(tx *sql.Tx) error {
				args := make([]any, len(op.Keys))
				for i, k := range op.Keys {
					args[i] = k
				}
				rows, err := tx.QueryContext(ctx, sqlLock(len(op.Keys)), args...)
				if err != nil {
					return err
				}
				cur := map[string]int64{}
				locked := map[string]bool{}
				for rows.Next() {
					var (
						k string
						b []byte
					)
					if err := rows.Scan(&k, &b); err != nil {
						rows.Close()
						return err
					}
					locked[k] = true
					if b == nil {
						continue // a tombstone: absent, 0
					}
					var v int64
					if err := codec.Unmarshal(b, &v); err != nil {
						rows.Close()
						return err
					}
					cur[k] = v
				}
				rows.Close()
				if err := rows.Err(); err != nil {
					return err
				}
				vals := make([]int64, len(op.Keys))
				for i, k := range op.Keys {
					vals[i] = cur[k]
				}
				if err := op.Apply(vals); err != nil {
					return err
				}
				for i, k := range op.Keys {
					b, err := codec.Marshal(vals[i])
					if err != nil {
						return err
					}
					var id [16]byte
					_, _ = rand.Read(id[:])
					if locked[k] {
						if _, err := tx.ExecContext(ctx, sqlWrite, b, id[:], k); err != nil {
							return err
						}
						continue
					}
					if _, err := tx.ExecContext(ctx, sqlCreate, k, b, id[:]); err != nil {
						var me *mysql.MySQLError
						if errors.As(err, &me) && me.Number == mysqlErDupEntry {
							return &cas.ConflictError{Key: k} // created meanwhile
						}
						return err
					}
				}
				return nil
			})
		}, h.Options(w)...)
	}), nil
}

// mysqlTx runs f in a transaction on db and commits it, or rolls it back
// when f fails.
func mysqlTx(ctx context.Context, db *sql.DB, f func(tx *sql.Tx) error) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := f(tx); err != nil {
		_ = tx.Rollback()
		return err
	}
	return tx.Commit()
}

// getLockWait is the longest single GET_LOCK wait: the wait goes on in
// steps, checking the context between them, so that it never has to be
// cancelled mid-statement (which closes the connection).
const getLockWait = time.Second

func newMySQLGetLock(_ context.Context, h *harness) (cellStrategy, error) {
	svc, _ := h.Service("mysql")
	ms, ok := svc.(MySQLService)
	if !ok {
		return nil, fmt.Errorf("the mysql backend is not open: %w", errNotApplicable)
	}
	db := ms.MySQLDB()
	return lockedDo(h, func(ctx context.Context, _ int, name string) (func(), error) {
		return mysqlGetLock(ctx, db, "occbench:"+name)
	}), nil
}

// mysqlGetLock takes the named lock as applications do: GET_LOCK in the
// session of a connection taken from the pool, held until RELEASE_LOCK in
// the same session, after which the connection goes back to the pool.
// The returned function releases it.
func mysqlGetLock(ctx context.Context, db *sql.DB, name string) (func(), error) {
	conn, err := db.Conn(ctx)
	if err != nil {
		return nil, err
	}
	for {
		var got sql.NullInt64
		if err := conn.QueryRowContext(ctx, `SELECT GET_LOCK(?, ?)`, name, getLockWait.Seconds()).Scan(&got); err != nil {
			_ = conn.Close() // a broken session released what it held
			return nil, err
		}
		if got.Valid && got.Int64 == 1 {
			break
		}
		if err := ctx.Err(); err != nil {
			_ = conn.Close()
			return nil, err
		}
	}
	return func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		// A failed release leaves the lock to go with the session: the
		// connection is discarded, never returned to the pool.
		if _, err := conn.ExecContext(rctx, `DO RELEASE_LOCK(?)`, name); err != nil {
			_ = conn.Raw(func(any) error { return driver.ErrBadConn })
		}
		_ = conn.Close()
	}, nil
}
