package lab

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/occkit/occkit/adapters/pgcas"
	"github.com/occkit/occkit/adapters/rediscas"
	"github.com/occkit/occkit/adapters/sqlcas"
	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/occ"
)

// Bounded deltas (cas.Adder, occ.Add) for the counter and inventory
// workloads, and the reference they are measured against: blind-write,
// the server's own unconditional increment, the physical limit of the
// server and not a safe choice.

var deltaStrategies = []strategySpec{
	{
		Name:      "delta",
		Kind:      kindOptimistic,
		About:     "occ.Add: the server adds to the value in one write, refusing a result below the bound (inventory: cas.AtLeast(0)); no read, no version to race on, a lost reply resolved by write id; there is no critical section to spend the cell's work time in",
		SingleKey: true,
		DefaultOn: func(b string, multiKey bool) bool { return !multiKey && b != "etcd" && b != "etcd3" },
		New:       newDelta,
	},
	{
		Name:      "delta-unbatched",
		Kind:      kindOptimistic,
		About:     "delta with occ.WithTurns(false): every delta is its own write, none batched with the process's others; the A/B of batching (only when asked for)",
		SingleKey: true,
		DefaultOn: func(string, bool) bool { return false },
		New:       newDelta,
	},
	{
		Name:      "blind-write",
		Kind:      kindReference,
		About:     "the server's physical limit, not a safe choice: an unconditional increment (UPDATE ... SET value = value + 1, HINCRBY) with no bound, no version and no handling of lost replies; deltas are reported as a fraction of it",
		SingleKey: true,
		DefaultOn: func(b string, multiKey bool) bool {
			return !multiKey && (b == "postgres" || b == "mysql" || b == "sqlite" || b == "redis")
		},
		New: newBlindWrite,
	},
}

// deltaOf is the delta an operation of a single-key workload makes.
func deltaOf(op operation) (int64, cas.Bounds, error) {
	switch op.w.Name {
	case "counter":
		return 1, cas.Bounds{}, nil
	case "inventory":
		return -1, cas.AtLeast(0), nil
	}
	return 0, cas.Bounds{}, fmt.Errorf("workload %s is not a delta: %w", op.w.Name, errNotApplicable)
}

func newDelta(_ context.Context, h *harness) (cellStrategy, error) {
	if _, ok := h.Store.(cas.Adder); !ok {
		return nil, fmt.Errorf("%s has no server-side arithmetic (occ.Add would be occ.Update): %w", h.Backend.System, errNotApplicable)
	}
	if _, _, err := deltaOf(operation{w: h.Workload}); err != nil {
		return nil, err
	}
	var extra []occ.Option
	if h.Cell.Strategy == "delta-unbatched" {
		extra = append(extra, occ.WithTurns(false))
	}
	perWorker := h.withOptions(extra...)
	return strategyFunc(func(ctx context.Context, w int, op operation) error {
		n, b, _ := deltaOf(op)
		_, _, err := occ.Add(ctx, h.Store, op.Keys[0], n, b, perWorker[w]...)
		if errors.Is(err, cas.ErrBound) {
			return errDeclined
		}
		return err
	}), nil
}

// newBlindWrite increments the value in the store's own layout with the
// server's arithmetic and nothing else.
func newBlindWrite(_ context.Context, h *harness) (cellStrategy, error) {
	if _, _, err := deltaOf(operation{w: h.Workload}); err != nil {
		return nil, err
	}
	var incr func(ctx context.Context, key string, n int64) error
	switch s := h.Store.(type) {
	case *pgcas.Store:
		incr = pgBlind(h.Backend.Postgres(), h.Backend.Table(h.NS))
	case *sqlcas.Store:
		incr = sqlBlind(s.DB(), s.Dialect(), h.NS)
	case *rediscas.Store:
		// rediscas keeps a key's value in field "v" of the hash
		// prefix + "d:" + key (its prefix here: the namespace and ":").
		cli, prefix := h.Backend.RedisUniversal(), h.NS+":d:"
		incr = func(ctx context.Context, key string, n int64) error {
			return cli.HIncrBy(ctx, prefix+key, "v", n).Err()
		}
	default:
		return nil, fmt.Errorf("blind-write runs on PostgreSQL, MySQL, SQLite and Redis, not %s: %w", h.Backend.System, errNotApplicable)
	}
	return strategyFunc(func(ctx context.Context, w int, op operation) error {
		n, _, _ := deltaOf(op)
		return incr(ctx, op.Keys[0], n)
	}), nil
}

func pgBlind(pool *pgxpool.Pool, table string) func(ctx context.Context, key string, n int64) error {
	q := `UPDATE ` + table + ` SET value = convert_to((convert_from(value, 'UTF8')::bigint + $2::bigint)::text, 'UTF8') WHERE key = $1`
	return func(ctx context.Context, key string, n int64) error {
		_, err := pool.Exec(ctx, q, key, n)
		return err
	}
}

func sqlBlind(db *sql.DB, d sqlcas.Dialect, ns string) func(ctx context.Context, key string, n int64) error {
	var q string
	switch d {
	case sqlcas.MySQL:
		q = "UPDATE `" + ns + "` SET value = CAST(CAST(value AS SIGNED) + ? AS CHAR) WHERE k = ?"
	case sqlcas.SQLite:
		q = `UPDATE "` + ns + `" SET value = CAST(CAST(CAST(value AS TEXT) AS INTEGER) + ? AS TEXT) WHERE k = ?`
	default:
		q = `UPDATE "` + ns + `" SET value = convert_to((convert_from(value, 'UTF8')::bigint + $1::bigint)::text, 'UTF8') WHERE k = $2`
	}
	if d == sqlcas.SQLite {
		// Prepared, as sqlcas prepares its statements on SQLite: the
		// driver parses an unprepared text on every call.
		if st, err := db.Prepare(q); err == nil {
			return func(ctx context.Context, key string, n int64) error {
				_, err := st.ExecContext(ctx, n, key)
				return err
			}
		}
	}
	return func(ctx context.Context, key string, n int64) error {
		_, err := db.ExecContext(ctx, q, n, key)
		return err
	}
}
