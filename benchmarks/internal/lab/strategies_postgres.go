package lab

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/occkit/occkit/adapters/pgcas"
	"github.com/occkit/occkit/hybrid"
	"github.com/occkit/occkit/occ"
)

var postgresStrategies = []strategySpec{
	{
		Name:      "lock-pg-for-update",
		Kind:      kindLock,
		About:     "BEGIN; SELECT ... FOR UPDATE; work; UPDATE; COMMIT (pgcas.Store.UpdateLocked; one SELECT for all keys of a transfer)",
		SingleKey: true, MultiKey: true,
		DefaultOn: func(b string, _ bool) bool { return b == "postgres" },
		New:       newPGForUpdate,
	},
	{
		Name:      "lock-pg-advisory",
		Kind:      kindLock,
		About:     "pg_advisory_lock per key (pgcas.AdvisoryLocker session leases) around read, work and write; the data may live on any backend",
		SingleKey: true, MultiKey: true,
		DefaultOn: func(b string, _ bool) bool { return b == "postgres" },
		New:       newPGAdvisory,
	},
}

func newPGForUpdate(_ context.Context, h *harness) (cellStrategy, error) {
	st, ok := h.Store.(*pgcas.Store)
	ps, ok2 := h.Backend.(postgresService)
	if !ok || !ok2 {
		return nil, fmt.Errorf("SELECT ... FOR UPDATE locks rows of the table holding the data, which is on %s: %w", h.Backend.Info().Name, errNotApplicable)
	}
	codec := h.Values.Codec()
	table := ps.Table(h.NS)
	sqlLock := `SELECT key, value FROM ` + table + ` WHERE key = ANY($1) AND value IS NOT NULL ORDER BY key FOR UPDATE`
	sqlWrite := `UPDATE ` + table + ` SET value = $2, version = DEFAULT, write_id = gen_random_uuid() WHERE key = $1`
	return strategyFunc(func(ctx context.Context, w int, op operation) error {
		if len(op.Keys) == 1 {
			return occ.Retry(ctx, func(ctx context.Context) error {
				_, err := st.UpdateLocked(ctx, op.Keys[0], func(cur []byte, exists bool) ([]byte, error) {
					var v [1]int64
					if exists {
						if err := codec.Unmarshal(cur, &v[0]); err != nil {
							return nil, err
						}
					}
					if err := op.Apply(v[:]); err != nil {
						return nil, err
					}
					return codec.Marshal(v[0])
				})
				return err
			}, h.Options(w)...)
		}
		// Several rows: the same shape by hand, locking every row in key
		// order with one statement (as a repository would write it).
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
				if _, err := tx.Exec(ctx, sqlWrite, k, b); err != nil {
					return err
				}
			}
			return nil
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
