package lab

import (
	"context"
	"crypto/rand"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/go-sql-driver/mysql"

	"github.com/occkit/occkit/adapters/sqlcas"
	"github.com/occkit/occkit/benchmarks/internal/locks"
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
	if !ok || st.Dialect() != sqlcas.MySQL {
		return nil, fmt.Errorf("SELECT ... FOR UPDATE locks rows of the MySQL table holding the data, which is on %s: %w", h.Backend.System, errNotApplicable)
	}
	db := st.DB()
	codec := h.Values.Codec()
	table := h.Backend.Table(h.NS)
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
				rows, err := tx.QueryContext(ctx, sqlLock(len(op.Keys)), keyArgs(op.Keys)...)
				if err != nil {
					return err
				}
				return applyLocked(op, codec, rows, func() { _ = rows.Close() }, func(k string, b []byte, found bool) error {
					var id [16]byte
					_, _ = rand.Read(id[:])
					if found {
						_, err := tx.ExecContext(ctx, sqlWrite, b, id[:], k)
						return err
					}
					_, err := tx.ExecContext(ctx, sqlCreate, k, b, id[:])
					var me *mysql.MySQLError
					if errors.As(err, &me) && me.Number == mysqlErDupEntry {
						err = &cas.ConflictError{Key: k} // created meanwhile
					}
					return err
				})
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

func newMySQLGetLock(_ context.Context, h *harness) (cellStrategy, error) {
	b, ok := h.lab.backend("mysql")
	if !ok {
		return nil, fmt.Errorf("the mysql backend is not open: %w", errNotApplicable)
	}
	return lockedDo(h, "occbench:"+h.NS+"/", &locks.MySQL{DB: b.SQL()}), nil
}
