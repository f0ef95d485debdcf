package lab

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/occkit/occkit/adapters/pgcas"
	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/hybrid"
	"github.com/occkit/occkit/occ"
)

var postgresStrategies = []strategySpec{
	{
		Name:      "lock-pg-for-update",
		Kind:      kindLock,
		About:     "BEGIN; SELECT ... FOR UPDATE; work; UPDATE; COMMIT (the lab's own SQL on the store's table; one SELECT for all keys of a transfer)",
		SingleKey: true, MultiKey: true,
		DefaultOn: func(b string, _ bool) bool { return b == "postgres" },
		New:       newPGForUpdate,
	},
	{
		Name:      "lock-pg-advisory",
		Kind:      kindLock,
		About:     "pg_advisory_lock per key (pgcas.Locker session leases) around read, work and write; the data may live on any backend",
		SingleKey: true, MultiKey: true,
		DefaultOn: func(b string, _ bool) bool { return b == "postgres" },
		New:       newPGAdvisory,
	},
}

func newPGForUpdate(_ context.Context, h *harness) (cellStrategy, error) {
	_, ok := h.Store.(*pgcas.Store)
	ps, ok2 := h.Backend.(postgresService)
	if !ok || !ok2 {
		return nil, fmt.Errorf("SELECT ... FOR UPDATE locks rows of the table holding the data, which is on %s: %w", h.Backend.Info().Name, errNotApplicable)
	}
	codec := h.Values.Codec()
	table := ps.Table(h.NS)
	// The pessimistic read-modify-write as a repository writes it, on
	// pgcas's table layout (see pgcas.Store.DDL): lock every row in key
	// order with one statement, work, write, commit. An absent key (or a
	// tombstone) cannot be locked: its write inserts (or revives) the row,
	// and a concurrent create makes it a conflict, retried.
	sqlLock := `SELECT key, value FROM ` + table + ` WHERE key = ANY($1) AND value IS NOT NULL ORDER BY key FOR UPDATE`
	sqlWrite := `UPDATE ` + table + ` SET value = $2, version = DEFAULT, write_id = gen_random_uuid() WHERE key = $1`
	sqlCreate := `INSERT INTO ` + table + ` AS r (key, value, write_id) VALUES ($1, $2, gen_random_uuid())
    ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value, version = DEFAULT, write_id = EXCLUDED.write_id
    WHERE r.value IS NULL`
	return strategyFunc(func(ctx context.Context, w int, op operation) error {
		return occ.Retry(ctx, func(ctx context.Context) error {
			return pgcas.RunTx(ctx, ps.PGPool(), pgx.TxOptions{}, func(tx pgx.Tx) error {
				rows, err := tx.Query(ctx, sqlLock, op.Keys)
				if err != nil {
					return err
				}
				cur := map[string]int64{}
				for rows.Next() {
					var (
						k string
						b []byte
						v int64
					)
					if err := rows.Scan(&k, &b); err != nil {
						rows.Close()
						return err
					}
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
					if _, found := cur[k]; found {
						if _, err := tx.Exec(ctx, sqlWrite, k, b); err != nil {
							return err
						}
						continue
					}
					tag, err := tx.Exec(ctx, sqlCreate, k, b)
					if err != nil {
						return err
					}
					if tag.RowsAffected() == 0 {
						return &cas.ConflictError{Key: k} // created meanwhile
					}
				}
				return nil
			}, occ.WithMaxAttempts(1))
		}, h.Options(w)...)
	}), nil
}

func newPGAdvisory(_ context.Context, h *harness) (cellStrategy, error) {
	svc, _ := h.Service("postgres")
	ps, ok := svc.(postgresService)
	if !ok {
		return nil, fmt.Errorf("the postgres backend is not open: %w", errNotApplicable)
	}
	locker := ps.AdvisoryLocker()
	return lockedDo(h, func(ctx context.Context, _ int, name string) (func(), error) {
		lease, err := locker.Acquire(ctx, name)
		if err != nil {
			return nil, err
		}
		return func() { release(ctx, lease) }, nil
	}), nil
}

// release gives a lease back, with a bounded wait of its own. A release
// that fails leaves the lock to go with its connection.
func release(ctx context.Context, l hybrid.Lease) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_ = l.Release(rctx)
}
