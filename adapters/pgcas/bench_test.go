package pgcas_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/occkit/occkit/adapters/pgcas"
	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/internal/cachebench"
	"github.com/occkit/occkit/internal/pgtest"
	"github.com/occkit/occkit/occ"
)

// roundTrips counts what a pool sends: statements (each a round trip once
// prepared), batches (one round trip each) and prepares (one round trip
// on a connection's first use of a statement).
type roundTrips struct {
	queries, batches, prepares atomic.Int64
}

func (r *roundTrips) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	r.queries.Add(1)
	return ctx
}
func (r *roundTrips) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
func (r *roundTrips) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	r.batches.Add(1)
	return ctx
}
func (r *roundTrips) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (r *roundTrips) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}
func (r *roundTrips) TracePrepareStart(ctx context.Context, _ *pgx.Conn, _ pgx.TracePrepareStartData) context.Context {
	r.prepares.Add(1)
	return ctx
}
func (r *roundTrips) TracePrepareEnd(context.Context, *pgx.Conn, pgx.TracePrepareEndData) {}

func (r *roundTrips) total() int64 { return r.queries.Load() + r.batches.Load() + r.prepares.Load() }

func (r *roundTrips) reset() { r.queries.Store(0); r.batches.Store(0); r.prepares.Store(0) }

func (r *roundTrips) configure(c *pgxpool.Config) { c.ConnConfig.Tracer = r; c.MaxConns = 1 }

func increment(n int, _ bool) (int, error) { return n + 1, nil }

// TestRoundTrips counts the round trips of occ.Update on a Store: 2 when
// uncontended (read, compare-and-swap), 1 more per conflict (the conflict
// carries the current row: no second read).
func TestRoundTrips(t *testing.T) {
	ctx := context.Background()
	var rt roundTrips
	pool := pgtest.Pool(t, rt.configure)
	s := storeOn(t, pool, pgcas.Config{})
	other := newStoreOn(t, s) // an untraced writer on the same table
	counters := cas.NewTyped[int](s, cas.JSON[int]())

	// Warm up: prepare every statement the counted calls use.
	for range 2 {
		if _, _, err := occ.Update(ctx, counters, "c", increment); err != nil {
			t.Fatal(err)
		}
	}
	interfere := func(key string) func(int, bool) (int, error) {
		first := true
		return func(n int, ok bool) (int, error) {
			if first {
				first = false
				it, _ := other.Get(ctx, key)
				if _, err := other.CompareAndSwap(ctx, key, it.Version, []byte("100")); err != nil {
					t.Fatal(err)
				}
			}
			return n + 1, nil
		}
	}
	if _, _, err := occ.Update(ctx, counters, "c", interfere("c")); err != nil {
		t.Fatal(err)
	}

	rt.reset()
	if _, _, err := occ.Update(ctx, counters, "c", increment); err != nil {
		t.Fatal(err)
	}
	if got := rt.total(); got != 2 {
		t.Errorf("uncontended occ.Update: %d round trips, want 2", got)
	}
	rt.reset()
	n, _, err := occ.Update(ctx, counters, "c", interfere("c"), occ.WithBackOff(&backoff.ZeroBackOff{}))
	if err != nil || n != 101 {
		t.Fatalf("update after a conflict = %d, %v", n, err)
	}
	if got := rt.total(); got != 3 {
		t.Errorf("occ.Update with one conflict: %d round trips, want 3 (one more, not two)", got)
	}
	rt.reset()
	if _, err := s.Commit(ctx, []cas.Op{cas.Put("a", 0, []byte("1")), cas.Put("b", 0, []byte("1")), cas.Check("c", 0)}); err == nil {
		t.Fatal("commit checking an existing key as absent succeeded")
	}
	if _, err := s.Commit(ctx, []cas.Op{cas.Put("a", 0, []byte("1")), cas.Put("b", 0, []byte("1"))}); err != nil {
		t.Fatal(err)
	}
	if q, b := rt.queries.Load(), rt.batches.Load(); q != 0 || b != 2 {
		t.Errorf("two commits: %d statements and %d batches, want 0 and 2", q, b)
	}
	// A commit of puts of rows read (a transfer) is one statement, and
	// so is its refusal (which carries the current row).
	a, _ := s.Get(ctx, "a")
	b, _ := s.Get(ctx, "b")
	transfer := []cas.Op{cas.Put("b", b.Version, []byte("0")), cas.Put("a", a.Version, []byte("2"))}
	if _, err := s.Commit(ctx, transfer); err != nil { // prepares the statement
		t.Fatal(err)
	}
	rt.reset()
	_, err = s.Commit(ctx, transfer) // both versions are gone
	var ce *cas.ConflictError
	if !errors.As(err, &ce) || ce.Key != "b" || !ce.HasCurrent || string(ce.Current.Value) != "0" {
		t.Fatalf("stale transfer: %v, want a conflict on b carrying its current row", err)
	}
	if q, b := rt.queries.Load(), rt.batches.Load(); q != 1 || b != 0 {
		t.Errorf("refused commit of two rows read: %d statements and %d batches, want 1 and 0", q, b)
	}
	a, _ = s.Get(ctx, "a")
	b, _ = s.Get(ctx, "b")
	rt.reset()
	if _, err := s.Commit(ctx, []cas.Op{cas.Put("a", a.Version, []byte("1")), cas.Put("b", b.Version, []byte("1"))}); err != nil {
		t.Fatal(err)
	}
	if q, b, p := rt.queries.Load(), rt.batches.Load(), rt.prepares.Load(); q != 1 || b != 0 || p != 0 {
		t.Errorf("commit of two rows read: %d statements, %d batches, %d prepares, want 1, 0, 0", q, b, p)
	}

	// With the version cache: cold = read + write; warm = the write alone;
	// stale (another process wrote) = a refused write + a write, no read.
	cache := occ.NewCache(s, 100)
	for _, step := range []struct {
		name   string
		mutate func(int, bool) (int, error)
		want   int64
	}{
		{"cold cache", increment, 2},
		{"warm cache", increment, 1},
		{"warm cache again", increment, 1},
	} {
		rt.reset()
		if _, _, err := occ.Update(ctx, counters, "c", step.mutate, occ.WithCache(cache)); err != nil {
			t.Fatal(err)
		}
		if got := rt.total(); got != step.want {
			t.Errorf("%s: %d round trips, want %d", step.name, got, step.want)
		}
	}
	it, _ := other.Get(ctx, "c")
	if _, err := other.CompareAndSwap(ctx, "c", it.Version, []byte("500")); err != nil {
		t.Fatal(err)
	}
	rt.reset()
	n, _, err = occ.Update(ctx, counters, "c", increment, occ.WithCache(cache), occ.WithBackOff(&backoff.ZeroBackOff{}))
	if err != nil || n != 501 {
		t.Fatalf("cached update after a foreign write = %d, %v; want 501", n, err)
	}
	if got := rt.total(); got != 2 {
		t.Errorf("stale cache entry: %d round trips, want 2 (refused write, write; no read)", got)
	}
}

// newStoreOn returns another store on s's table, through a pool of its
// own on the same schema.
func newStoreOn(t testing.TB, s *pgcas.Store) *pgcas.Store {
	t.Helper()
	cfg := s.Pool().Config()
	cfg.ConnConfig.Tracer = nil
	cfg.MaxConns = 4
	o, err := pgcas.New(pgtest.Open(t, cfg), pgcas.Config{})
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// BenchmarkCompareAndSwap compares Store.CompareAndSwap with the same
// statement hand-written with pgx and with the plain conditional UPDATE it
// replaces, on the same table, one connection, no contention (see
// docs/postgres.md):
//
//	go test -run '^$' -bench CompareAndSwap -benchtime 6000x -count 5 ./adapters/pgcas/
func BenchmarkCompareAndSwap(b *testing.B) {
	ctx := context.Background()
	pool := pgtest.Pool(b, func(c *pgxpool.Config) { c.MaxConns = 1 })
	s := storeOn(b, pool, pgcas.Config{})
	value := []byte(`{"stock":42}`)
	// start returns key's version, creating it if needed (sub-benchmarks
	// run several times).
	start := func(b *testing.B, key string) cas.Version {
		it, err := s.Get(ctx, key)
		if errors.Is(err, cas.ErrNotFound) {
			var v cas.Version
			v, err = s.CompareAndSwap(ctx, key, 0, value)
			it.Version = v
		}
		if err != nil {
			b.Fatal(err)
		}
		return it.Version
	}
	// The three alternate within each iteration so that drift in the
	// machine's load hits them alike; the metrics are per-variant
	// averages and their ratios.
	//   - pgcas: Store.CompareAndSwap;
	//   - same-sql: the statement pgcas sends, hand-written with pgx (the
	//     adapter's own overhead is the ratio to this);
	//   - plain-update: the UPDATE a user would write without the
	//     conflict's current row or a write id (what those cost).
	const sameSQL = `WITH w AS (
    UPDATE occkit_cas SET value = $2, version = DEFAULT, write_id = $3
    WHERE key = $1 AND version = $4 AND value IS NOT NULL
    RETURNING version), cur AS (
    SELECT version, value, fence_token FROM occkit_cas
    WHERE key = $1 AND NOT EXISTS (SELECT FROM w) FOR SHARE)
SELECT w.version, c.version, c.value, c.fence_token
FROM (SELECT) one LEFT JOIN w ON true LEFT JOIN cur c ON true`
	const plain = `UPDATE occkit_cas SET value = $2, version = DEFAULT WHERE key = $1 AND version = $3 RETURNING version`
	v := start(b, "k-pgcas")
	same := int64(start(b, "k-same"))
	hand := int64(start(b, "k-hand"))
	var tPgcas, tSame, tPlain time.Duration
	id := [16]byte{1, 2, 3}
	for i := 0; b.Loop(); i++ {
		t0 := time.Now()
		switch i % 3 {
		case 0:
			var err error
			if v, err = s.CompareAndSwap(ctx, "k-pgcas", v, value); err != nil {
				b.Fatal(err)
			}
			tPgcas += time.Since(t0)
		case 1:
			var nv, cv, ct *int64
			var cval []byte
			id[15]++
			if err := pool.QueryRow(ctx, sameSQL, "k-same", value, id, same).Scan(&nv, &cv, &cval, &ct); err != nil || nv == nil {
				b.Fatal(err, nv)
			}
			same = *nv
			tSame += time.Since(t0)
		case 2:
			if err := pool.QueryRow(ctx, plain, "k-hand", value, hand).Scan(&hand); err != nil {
				b.Fatal(err)
			}
			tPlain += time.Since(t0)
		}
	}
	n := float64(b.N) / 3
	b.ReportMetric(float64(tPgcas.Nanoseconds())/n, "pgcas-ns/op")
	b.ReportMetric(float64(tSame.Nanoseconds())/n, "same-sql-ns/op")
	b.ReportMetric(float64(tPlain.Nanoseconds())/n, "plain-update-ns/op")
	b.ReportMetric(float64(tPgcas)/float64(tSame), "pgcas/same-sql")
	b.ReportMetric(float64(tPgcas)/float64(tPlain), "pgcas/plain-update")
}

// BenchmarkUpdateVsSelectForUpdate increments counters on 1000 keys from
// 16 goroutines, optimistically (occ.Update over a Store) and
// pessimistically (Store.UpdateLocked: SELECT ... FOR UPDATE in a
// transaction). The sum of the counters must equal the successful
// increments at the end. Compare ns/op of the two: the throughput ratio.
func BenchmarkUpdateVsSelectForUpdate(b *testing.B) {
	const keys, workers = 1000, 16
	ctx := context.Background()
	s := newStore(b, pgcas.Config{})
	// One connection per worker, as a service would size its pool.
	s2, err := pgcas.New(pgtest.Open(b, withMaxConns(s.Pool().Config(), workers)), pgcas.Config{})
	if err != nil {
		b.Fatal(err)
	}
	seedZeros(b, s, keys)
	counters := cas.NewTyped[int](s2, cas.JSON[int]())
	cache := occ.NewCache(s2, 2*keys)
	var seed atomic.Uint64
	strategies := []struct {
		name string
		inc  func(key string) error
	}{
		{"occ.Update", func(key string) error {
			_, _, err := occ.Update(ctx, counters, key, increment, occ.WithMaxAttempts(100))
			return err
		}},
		{"occ.Update-cached", func(key string) error {
			_, _, err := occ.Update(ctx, counters, key, increment, occ.WithMaxAttempts(100), occ.WithCache(cache))
			return err
		}},
		{"SELECT-FOR-UPDATE", func(key string) error {
			_, err := s2.UpdateLocked(ctx, key, func(cur []byte, _ bool) ([]byte, error) {
				var n int
				if err := cas.JSON[int]().Unmarshal(cur, &n); err != nil {
					return nil, err
				}
				return fmt.Appendf(nil, "%d", n+1), nil
			})
			return err
		}},
	}
	var total int64 // increments over all runs
	for _, st := range strategies {
		b.Run(st.name, func(b *testing.B) {
			var done, failed atomic.Int64
			b.SetParallelism((workers + runtime.GOMAXPROCS(0) - 1) / runtime.GOMAXPROCS(0))
			b.RunParallel(func(pb *testing.PB) {
				rng := rand.New(rand.NewPCG(seed.Add(1), 3))
				for pb.Next() {
					if err := st.inc(fmt.Sprintf("k%04d", rng.IntN(keys))); err != nil {
						if !errors.Is(err, occ.ErrAttemptsExhausted) {
							b.Error(err)
						}
						failed.Add(1)
						continue
					}
					done.Add(1)
				}
			})
			total += done.Load()
			var sum int64
			if err := s.Pool().QueryRow(ctx, `SELECT coalesce(sum(convert_from(value, 'UTF8')::bigint), 0) FROM occkit_cas WHERE value IS NOT NULL`).Scan(&sum); err != nil {
				b.Fatal(err)
			}
			if sum != total {
				b.Fatalf("counters sum to %d, but %d increments succeeded: lost or doubled updates", sum, total)
			}
			b.ReportMetric(float64(failed.Load())/float64(b.N), "gaveup/op")
		})
	}
}

func withMaxConns(c *pgxpool.Config, n int32) *pgxpool.Config {
	c.MaxConns = n
	return c
}

// BenchmarkCacheForeignWriters measures the version cache on PostgreSQL
// with and without a second process writing the same 1000 counters (see
// docs/performance.md):
//
//	go test -run '^$' -bench CacheForeignWriters -benchtime 8000x -count 2 ./adapters/pgcas/
func BenchmarkCacheForeignWriters(b *testing.B) {
	for _, foreign := range []int{0, 8} {
		b.Run(fmt.Sprintf("foreign=%d", foreign), func(b *testing.B) {
			var rt roundTrips
			pool := pgtest.Pool(b, func(c *pgxpool.Config) { c.ConnConfig.Tracer = &rt; c.MaxConns = 16 })
			s := storeOn(b, pool, pgcas.Config{})
			cachebench.ForeignWriters(b, s, newStoreOn(b, s), 1000, foreign, rt.total)
		})
	}
}

// BenchmarkUpdateReplicaReads increments counters on 1000 keys from 8
// goroutines with occ.Update through two stores on the same table: one
// reading from the streaming replica (Config.ReadPool), one reading from
// the primary. Each goroutine alternates between them, so that both run
// side by side under the same load; the metrics are per variant: time
// per update, conflicts per update, and statements sent to the primary
// and to the replica per update (the load a replica takes off the
// primary). The sub-benchmarks set the primary sessions'
// synchronous_commit: the test server runs with it off, and the
// replica then lags by the WAL writer's delay (10 ms there); on, by about
// 0.1 ms on loopback. The counters must sum to the updates acknowledged
// at the end. It needs OCCKIT_PG_REPLICA_URL (docs/postgres.md):
//
//	go test -run '^$' -bench UpdateReplicaReads -benchtime 20000x -count 3 ./adapters/pgcas/
func BenchmarkUpdateReplicaReads(b *testing.B) {
	const keys, workers = 1000, 8
	for _, sc := range []string{"on", "off"} {
		b.Run("synchronous_commit="+sc, func(b *testing.B) {
			ctx := context.Background()
			var rtPrimary, rtPrimaryOnly, rtReplica roundTrips
			conf := func(rt *roundTrips) func(*pgxpool.Config) {
				return func(c *pgxpool.Config) {
					c.MaxConns = workers
					c.ConnConfig.Tracer = rt
					c.ConnConfig.RuntimeParams["synchronous_commit"] = sc
				}
			}
			pool := pgtest.Pool(b, conf(&rtPrimary))
			cfg := pool.Config()
			conf(&rtPrimaryOnly)(cfg)
			replica := pgtest.ReplicaPool(b, pool, conf(&rtReplica))
			replicaReads, err := pgcas.New(pool, pgcas.Config{ReadPool: replica})
			if err != nil {
				b.Fatal(err)
			}
			primaryOnly, err := pgcas.New(pgtest.Open(b, cfg), pgcas.Config{})
			if err != nil {
				b.Fatal(err)
			}
			if err := replicaReads.CreateTable(ctx); err != nil {
				b.Fatal(err)
			}
			seedZeros(b, replicaReads, keys)
			pgtest.CatchUp(b, pool, replica)
			type variant struct {
				counters  *cas.Typed[int]
				obs       conflictCounter
				ns, calls atomic.Int64
			}
			variants := []*variant{
				{counters: cas.NewTyped[int](replicaReads, cas.JSON[int]())},
				{counters: cas.NewTyped[int](primaryOnly, cas.JSON[int]())},
			}
			rtPrimary.reset()
			rtPrimaryOnly.reset()
			rtReplica.reset()
			var seed atomic.Uint64
			b.SetParallelism((workers + runtime.GOMAXPROCS(0) - 1) / runtime.GOMAXPROCS(0))
			b.RunParallel(func(pb *testing.PB) {
				rng := rand.New(rand.NewPCG(seed.Add(1), 7))
				for i := 0; pb.Next(); i++ {
					v := variants[i%2]
					t0 := time.Now()
					_, _, err := occ.Update(ctx, v.counters, fmt.Sprintf("k%04d", rng.IntN(keys)), increment, occ.WithObserver(&v.obs))
					if err != nil {
						b.Error(err)
						return
					}
					v.ns.Add(int64(time.Since(t0)))
					v.calls.Add(1)
				}
			})
			var sum, acked int64
			if err := pool.QueryRow(ctx, `SELECT coalesce(sum(convert_from(value, 'UTF8')::bigint), 0) FROM occkit_cas WHERE value IS NOT NULL`).Scan(&sum); err != nil {
				b.Fatal(err)
			}
			for _, v := range variants {
				acked += v.calls.Load()
			}
			if sum != acked {
				b.Fatalf("counters sum to %d, but %d increments succeeded: lost or doubled updates", sum, acked)
			}
			per := func(n int64, v *variant) float64 { return float64(n) / max(float64(v.calls.Load()), 1) }
			rep, prim := variants[0], variants[1]
			b.ReportMetric(per(rep.ns.Load(), rep), "replica-ns/op")
			b.ReportMetric(per(prim.ns.Load(), prim), "primary-ns/op")
			b.ReportMetric(per(rep.ns.Load(), rep)/per(prim.ns.Load(), prim), "replica/primary")
			b.ReportMetric(per(rep.obs.conflicts.Load(), rep), "replica-conflicts/op")
			b.ReportMetric(per(prim.obs.conflicts.Load(), prim), "primary-conflicts/op")
			b.ReportMetric(per(rtPrimary.total(), rep), "replica-variant-primary-stmts/op")
			b.ReportMetric(per(rtReplica.total(), rep), "replica-variant-replica-stmts/op")
			b.ReportMetric(per(rtPrimaryOnly.total(), prim), "primary-variant-stmts/op")
		})
	}
}

// BenchmarkModifyVsUpdate measures Table.Modify of rows of an
// application's table against occ.Update over the Store, 8 goroutines
// over 1000 keys each, where nothing conflicts: the repository path's own
// cost (read the two ns/op lines as a ratio; run with -count and
// -cpuprofile to see where a gap goes).
//
//	go test -run '^$' -bench ModifyVsUpdate -benchtime 20000x -count 3 ./adapters/pgcas/
func BenchmarkModifyVsUpdate(b *testing.B) { modifyVsUpdate(b, 8, 1000) }

// BenchmarkHotRowModifyVsUpdate is BenchmarkModifyVsUpdate on one row
// and 16 goroutines: every call waits its turn at the row, so what the
// table's path adds to a call adds to every turn.
//
//	go test -run '^$' -bench HotRowModifyVsUpdate -benchtime 10000x -count 3 ./adapters/pgcas/
func BenchmarkHotRowModifyVsUpdate(b *testing.B) { modifyVsUpdate(b, 16, 1) }

// modifyVsUpdate runs cachebench.TableVsStoreKeys on a table of counters
// and a Store, workers goroutines over keys rows.
func modifyVsUpdate(b *testing.B, workers, keys int) {
	type row struct {
		ID      string      `db:"id"`
		N       int64       `db:"n"`
		Version cas.Version `db:"version"`
	}
	ctx := context.Background()
	pool := pgtest.Pool(b, func(c *pgxpool.Config) { c.MaxConns = int32(workers) })
	s := storeOn(b, pool, pgcas.Config{})
	if _, err := pool.Exec(ctx, `CREATE TABLE bench_rows (id text PRIMARY KEY, n bigint NOT NULL, version bigserial NOT NULL)`); err != nil {
		b.Fatal(err)
	}
	tbl, err := pgcas.NewTable[row](pool, pgcas.TableConfig{Table: "bench_rows"})
	if err != nil {
		b.Fatal(err)
	}
	cachebench.TableVsStoreKeys(b, workers, keys, s,
		func(ctx context.Context, k string) error { _, err := tbl.Insert(ctx, row{ID: k}); return err },
		func(ctx context.Context, k string) error {
			_, err := tbl.Modify(ctx, k, func(r row, _ bool) (row, error) { r.N++; return r, nil })
			return err
		})
}

// BenchmarkTxnVsModifyMany measures a transfer between two rows of one
// table through Txn (the bridge over several tables) against the same
// transfer through Table.ModifyMany, 8 goroutines over 1000 rows, where
// nothing conflicts: what Txn's generality costs (read the ns/op lines as
// a ratio).
//
//	go test -run '^$' -bench TxnVsModifyMany -benchtime 8000x -count 3 ./adapters/pgcas/
func BenchmarkTxnVsModifyMany(b *testing.B) {
	type account struct {
		ID      int64 `db:"id"`
		Balance int64 `db:"balance"`
		Version int64 `db:"version"`
	}
	ctx := context.Background()
	const workers, rows = 8, 1000
	pool := pgtest.Pool(b, func(c *pgxpool.Config) { c.MaxConns = workers })
	if _, err := pool.Exec(ctx, `CREATE TABLE accounts (id bigint PRIMARY KEY, balance bigint NOT NULL, version bigserial NOT NULL)`); err != nil {
		b.Fatal(err)
	}
	tbl, err := pgcas.NewTable[account](pool, pgcas.TableConfig{Table: "accounts"})
	if err != nil {
		b.Fatal(err)
	}
	for i := range int64(rows) {
		if _, err := tbl.Insert(ctx, account{ID: i + 1, Balance: 1000}); err != nil {
			b.Fatal(err)
		}
	}
	run := func(b *testing.B, op func(from, to int64) error) {
		cachebench.Workers(b, workers, func(w, i int) error {
			from := int64((w*131+i*7)%rows) + 1
			return op(from, from%rows+1)
		})
	}
	b.Run("txn", func(b *testing.B) {
		run(b, func(from, to int64) error {
			return pgcas.Txn(ctx, func(tx *pgcas.Tx) error {
				if err := pgcas.TxPrefetch(tx, tbl, from, to); err != nil {
					return err
				}
				f, _, err := pgcas.TxGet(tx, tbl, from)
				if err != nil {
					return err
				}
				g, _, err := pgcas.TxGet(tx, tbl, to)
				if err != nil {
					return err
				}
				f.Balance--
				g.Balance++
				if err := pgcas.TxPut(tx, tbl, f); err != nil {
					return err
				}
				return pgcas.TxPut(tx, tbl, g)
			})
		})
	})
	b.Run("modify-many", func(b *testing.B) {
		run(b, func(from, to int64) error {
			_, err := tbl.ModifyMany(ctx, []any{from, to}, func(r []account, _ []bool) ([]account, error) {
				r[0].Balance--
				r[1].Balance++
				return r, nil
			})
			return err
		})
	})
	// The same transfer over the key-value Store, through occ.Txn.
	s := storeOn(b, pool, pgcas.Config{})
	skey := func(id int64) string { return "a" + strconv.FormatInt(id, 10) }
	for i := range int64(rows) {
		if _, err := s.CompareAndSwap(ctx, skey(i+1), 0, []byte("1000")); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("store-txn", func(b *testing.B) {
		run(b, func(from, to int64) error {
			return occ.Txn(ctx, s, func(tx *occ.Tx) error {
				f, t := skey(from), skey(to)
				if err := tx.Prefetch(f, t); err != nil {
					return err
				}
				var vals [2]int64
				for i, k := range []string{f, t} {
					v, _, err := tx.Get(k)
					if err != nil {
						return err
					}
					if vals[i], err = strconv.ParseInt(string(v), 10, 64); err != nil {
						return err
					}
				}
				tx.Put(f, []byte(strconv.FormatInt(vals[0]-1, 10)))
				tx.Put(t, []byte(strconv.FormatInt(vals[1]+1, 10)))
				return nil
			})
		})
	})
}

// seedZeros creates the keys k0000.. of n counters at "0" through c, in
// commits of at most 100 keys.
func seedZeros(b *testing.B, c cas.Committer, n int) {
	b.Helper()
	ops := make([]cas.Op, 0, 100)
	for i := range n {
		ops = append(ops, cas.Put(fmt.Sprintf("k%04d", i), 0, []byte("0")))
		if len(ops) == cap(ops) || i == n-1 {
			if _, err := c.Commit(context.Background(), ops); err != nil {
				b.Fatal(err)
			}
			ops = ops[:0]
		}
	}
}
