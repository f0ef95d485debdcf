package lab

import (
	"context"
	"fmt"
	"strconv"

	"github.com/jackc/pgx/v5"

	"github.com/occkit/occkit/adapters/pgcas"
	"github.com/occkit/occkit/benchmarks/internal/locks"
	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/occ"
)

var postgresStrategies = []strategySpec{
	{
		Name:      "lock-pg-for-update",
		Kind:      kindLock,
		About:     "BEGIN; SELECT ... FOR UPDATE; work; UPDATE; COMMIT (the lab's own SQL on the store's table; one SELECT for all keys of a transfer)",
		SingleKey: true, MultiKey: true,
		DefaultOn: onPostgres,
		New:       newPGForUpdate,
	},
	{
		Name:      "lock-pg-advisory",
		Kind:      kindLock,
		About:     "pg_advisory_lock per key (pgcas.Locker session leases) around read, work and write; the data may live on any backend",
		SingleKey: true, MultiKey: true,
		DefaultOn: onPostgres,
		New:       newPGAdvisory,
	},
}

// onPostgres: the PostgreSQL locks are the data's own on postgres and
// postgres-replica (on its primary).
func onPostgres(b string, _ bool) bool { return b == "postgres" || b == "postgres-replica" }

func newPGForUpdate(_ context.Context, h *harness) (cellStrategy, error) {
	_, ok := h.Store.(*pgcas.Store)
	pool := h.Backend.Postgres()
	if !ok || pool == nil {
		return nil, fmt.Errorf("SELECT ... FOR UPDATE locks rows of the table holding the data, which is on %s: %w", h.Backend.System, errNotApplicable)
	}
	codec := h.Values.Codec()
	table := h.Backend.Table(h.NS)
	// The pessimistic read-modify-write as a repository writes it, on
	// pgcas's table layout (see pgcas.Store.DDL): lock every row in key
	// order with one statement, work, write, commit. An absent key (or a
	// tombstone) cannot be locked: its write inserts (or revives) the row,
	// and a concurrent create makes it a conflict, retried.
	//
	// The keys are listed one by one (key IN ($1, ...)), not passed as
	// one array (key = ANY($1)): PostgreSQL plans the array form again on
	// every call, 32 µs of its 67 on two keys (pg_stat_statements,
	// docs/performance.md), a cost no careful repository pays.
	// The texts for one and two keys (every workload's) are made once.
	lockText := func(n int) string {
		in := "$1"
		for i := 2; i <= n; i++ {
			in += ", $" + strconv.Itoa(i)
		}
		return `SELECT key, value FROM ` + table + ` WHERE key IN (` + in + `) AND value IS NOT NULL ORDER BY key FOR UPDATE`
	}
	lockTexts := [3]string{"", lockText(1), lockText(2)}
	sqlLock := func(n int) string {
		if n < len(lockTexts) {
			return lockTexts[n]
		}
		return lockText(n)
	}
	sqlWrite := `UPDATE ` + table + ` SET value = $2, version = DEFAULT, write_id = gen_random_uuid() WHERE key = $1`
	sqlCreate := `INSERT INTO ` + table + ` AS r (key, value, write_id) VALUES ($1, $2, gen_random_uuid())
    ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value, version = DEFAULT, write_id = EXCLUDED.write_id
    WHERE r.value IS NULL`
	return strategyFunc(func(ctx context.Context, w int, op operation) error {
		return occ.Retry(ctx, func(ctx context.Context) error {
			return pgcas.RunTx(ctx, pool, pgx.TxOptions{}, func(tx pgx.Tx) error {
				rows, err := tx.Query(ctx, sqlLock(len(op.Keys)), keyArgs(op.Keys)...)
				if err != nil {
					return err
				}
				return applyLocked(op, codec, rows, rows.Close, func(k string, b []byte, found bool) error {
					if found {
						_, err := tx.Exec(ctx, sqlWrite, k, b)
						return err
					}
					tag, err := tx.Exec(ctx, sqlCreate, k, b)
					if err == nil && tag.RowsAffected() == 0 {
						err = &cas.ConflictError{Key: k} // created meanwhile
					}
					return err
				})
			}, occ.WithMaxAttempts(1))
		}, h.Options(w)...)
	}), nil
}

func newPGAdvisory(_ context.Context, h *harness) (cellStrategy, error) {
	// The shared pgcas.Locker (Client.Locker) of the data's own
	// PostgreSQL (postgres, postgres-replica's primary), else of the
	// postgres backend.
	b := h.Backend
	if b.Postgres() == nil {
		var ok bool
		if b, ok = h.lab.backend("postgres"); !ok {
			return nil, fmt.Errorf("the postgres backend is not open: %w", errNotApplicable)
		}
	}
	return lockedDo(h, h.NS+"/", locks.Lease(b.Locker())), nil
}
