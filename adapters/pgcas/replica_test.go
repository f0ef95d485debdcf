package pgcas_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/occkit/occkit/adapters/pgcas"
	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/cas/castest"
	"github.com/occkit/occkit/cas/tabletest"
	"github.com/occkit/occkit/internal/pgtest"
	"github.com/occkit/occkit/occ"
)

// The tests of reads from a streaming replica (Config.ReadPool,
// TableConfig.ReadPool) need OCCKIT_PG_REPLICA_URL, a hot standby of the
// server of OCCKIT_PG_URL (make test starts both), and fail without it.

// replicaStore returns a store on a fresh table of pool's schema whose
// reads go to a pool on the replica, once the replica has the table.
func replicaStore(t testing.TB, pool *pgxpool.Pool, cfg pgcas.Config) *pgcas.Store {
	t.Helper()
	cfg.ReadPool = pgtest.ReplicaPool(t, pool)
	s := storeOn(t, pool, cfg)
	pgtest.CatchUp(t, pool, cfg.ReadPool)
	return s
}

// TestReplicaConformance runs the conformance suite on stores whose Get
// and GetMany read from the replica (castest's StaleReads). The primary's
// sessions commit with synchronous_commit on (syncCommit), so that the
// replica lags by about 0.1 ms rather than the WAL writer's 10 ms: the
// suite still sees stale reads (StaleReadsAreSafe counts them), and
// TxnConservesTotal, whose final read-back takes an account the replica
// does not have yet for a wrong state, cannot finish inside the lag.
func TestReplicaConformance(t *testing.T) {
	limits := cas.Limits{MaxKeyBytes: 256, MaxValueBytes: 64 << 10, MaxCommitOps: 16}
	reopen, shortHold := castest.SameKeys(200*time.Millisecond, func(t *testing.T, s cas.Store, hold time.Duration) cas.Store {
		cfg := pgcas.Config{Limits: limits, ReadPool: s.(*pgcas.Store).ReadPool(), ExclusiveTimeout: hold}
		o, err := pgcas.New(s.(*pgcas.Store).Pool(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		return o
	})
	castest.Run(t, castest.Harness{
		NewStore: func(t *testing.T) cas.Store {
			return replicaStore(t, pgtest.Pool(t, syncCommit), pgcas.Config{Limits: limits})
		},
		Reopen:         reopen,
		ShortHold:      shortHold,
		ReturnsCurrent: true,
		StaleReads:     true,
		Limits:         limits,
		Workers:        8,
		OpsPerWorker:   50,
	})
}

// conflictCounter is an occ observer counting conflicts and calls.
type conflictCounter struct{ conflicts, calls atomic.Int64 }

func (c *conflictCounter) ObserveAttempt(_ context.Context, a occ.Attempt) {
	if a.Outcome == occ.OutcomeConflict {
		c.conflicts.Add(1)
	}
}

func (c *conflictCounter) ObserveCall(context.Context, occ.Call) { c.calls.Add(1) }

// TestReplicaReads checks where a store with a ReadPool reads and writes:
// while the replica's replay is paused, Get and GetMany return the state
// at the pause, a write expecting a version read there conflicts with the
// primary's current row, and each occ.Update after the first conflicts
// once and then succeeds from that row: nothing lost, nothing doubled.
func TestReplicaReads(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.Pool(t)
	s := replicaStore(t, pool, pgcas.Config{})
	if s.ReadPool() == nil || s.ReadPool() == s.Pool() {
		t.Fatalf("ReadPool() = %p, want the replica's pool (Pool() is %p)", s.ReadPool(), s.Pool())
	}
	if o, _ := pgcas.New(pool, pgcas.Config{}); o.ReadPool() != nil {
		t.Fatal("ReadPool() of a store without one is not nil")
	}
	v1 := mustPut(t, s, "k", 0, "1")
	if _, err := s.CompareAndSwap(ctx, "n", 0, []byte("0")); err != nil {
		t.Fatal(err)
	}
	pgtest.CatchUp(t, pool, s.ReadPool())
	if it, err := s.Get(ctx, "k"); err != nil || it.Version != v1 {
		t.Fatalf("get after catch-up = %+v, %v; want version %d", it, err, v1)
	}

	pgtest.PauseReplay(t, s.ReadPool())
	v2 := mustPut(t, s, "k", v1, "2")
	mustPut(t, s, "new", 0, "x")
	it, err := s.Get(ctx, "k")
	if err != nil || it.Version != v1 || string(it.Value) != "1" {
		t.Fatalf("get with replay paused = %+v, %v; want the replica's {1, v%d}", it, err, v1)
	}
	if _, err := s.Get(ctx, "new"); !errors.Is(err, cas.ErrNotFound) {
		t.Fatalf("get of a key created after the pause = %v; want ErrNotFound from the replica", err)
	}
	items, err := s.GetMany(ctx, []string{"k", "new"})
	if err != nil || items[0].Version != v1 || items[1].Version != 0 {
		t.Fatalf("get-many with replay paused = %+v, %v; want k at v%d, new absent", items, err, v1)
	}

	// The stale version conflicts on the primary, and the conflict carries
	// the primary's row.
	_, err = s.CompareAndSwap(ctx, "k", v1, []byte("3"))
	var ce *cas.ConflictError
	if !errors.As(err, &ce) || !ce.HasCurrent || ce.Current.Version != v2 || string(ce.Current.Value) != "2" {
		t.Fatalf("write at the replica's version = %v; want a conflict carrying {2, v%d}", err, v2)
	}
	if _, err := s.CompareAndSwap(ctx, "new", 0, []byte("y")); !errors.Is(err, cas.ErrConflict) {
		t.Fatalf("create of a key the replica does not have yet = %v; want a conflict", err)
	}

	const updates = 5
	var obs conflictCounter
	counters := cas.NewTyped(s, cas.JSON[int]())
	for i := range updates {
		n, _, err := occ.Update(ctx, counters, "n", increment, occ.WithObserver(&obs))
		if err != nil || n != i+1 {
			t.Fatalf("update %d = %d, %v; want %d", i, n, err, i+1)
		}
	}
	// The first update writes the version the replica has; each later one
	// reads it again, conflicts, and writes from the conflict's row.
	if got := obs.conflicts.Load(); got != updates-1 {
		t.Errorf("%d updates from a paused replica had %d conflicts, want %d", updates, got, updates-1)
	}
	pgtest.ResumeReplay(t, s.ReadPool())
	pgtest.CatchUp(t, pool, s.ReadPool())
	if n, _, err := counters.Get(ctx, "n"); err != nil || n != updates {
		t.Fatalf("counter after catch-up = %d, %v; want %d", n, err, updates)
	}
	if it, err := s.Get(ctx, "k"); err != nil || it.Version != v2 {
		t.Fatalf("get after catch-up = %+v, %v; want version %d", it, err, v2)
	}
}

func mustPut(t *testing.T, s cas.Store, key string, expected cas.Version, value string) cas.Version {
	t.Helper()
	v, err := s.CompareAndSwap(context.Background(), key, expected, []byte(value))
	if err != nil {
		t.Fatalf("put %q at %d: %v", key, expected, err)
	}
	return v
}

// replicaInventory returns a pool over a fresh schema holding the
// inventory table, a pool of its streaming replica, and a Table of
// inventory that reads from the replica.
func replicaInventory(t *testing.T, configure ...func(*pgxpool.Config)) (pool, replica *pgxpool.Pool, tbl *pgcas.Table[item]) {
	t.Helper()
	pool = pgtest.Pool(t, configure...)
	replica = pgtest.ReplicaPool(t, pool)
	if _, err := pool.Exec(context.Background(), inventoryDDL); err != nil {
		t.Fatal(err)
	}
	tbl, err := pgcas.NewTable[item](pool, pgcas.TableConfig{Table: "inventory", KeyColumn: "sku", ReadPool: replica})
	if err != nil {
		t.Fatal(err)
	}
	return pool, replica, tbl
}

// TestReplicaTableReads is TestReplicaReads for a Table: Get and the reads
// of Modify and ModifyMany come from the replica, every write and the
// current row of a conflict from the primary.
func TestReplicaTableReads(t *testing.T) {
	ctx := context.Background()
	pool, replica, tbl := replicaInventory(t)
	if tbl.ReadPool() != replica {
		t.Fatal("ReadPool() is not TableConfig.ReadPool")
	}
	a, err := tbl.Insert(ctx, item{SKU: "a", Name: "lamp", Stock: 100})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tbl.Insert(ctx, item{SKU: "b", Name: "desk", Stock: 100}); err != nil {
		t.Fatal(err)
	}
	pgtest.CatchUp(t, pool, replica)

	pgtest.PauseReplay(t, replica)
	a.Stock--
	if a, err = tbl.Update(ctx, a); err != nil {
		t.Fatal(err)
	}
	if got, err := tbl.Get(ctx, "a"); err != nil || got.Stock != 100 || got.Version == a.Version {
		t.Fatalf("get with replay paused = %+v, %v; want the replica's row (stock 100)", got, err)
	}

	const updates = 4
	var obs conflictCounter
	for range updates {
		if _, err := tbl.Modify(ctx, "a", func(it item, _ bool) (item, error) {
			it.Stock--
			return it, nil
		}, occ.WithObserver(&obs)); err != nil {
			t.Fatal(err)
		}
	}
	if got := obs.conflicts.Load(); got != updates {
		t.Errorf("%d modifies from a paused replica had %d conflicts, want %d (each read the replica's stale row)", updates, got, updates)
	}
	// A transfer: both rows read on the replica (a is stale), written in one
	// transaction on the primary, which refuses the stale one and runs
	// mutate again.
	var runs int
	moved, err := tbl.ModifyMany(ctx, []any{"a", "b"}, func(cur []item, _ []bool) ([]item, error) {
		runs++
		cur[0].Stock -= 10
		cur[1].Stock += 10
		return cur, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if runs < 2 || moved[0].Stock != 100-1-updates-10 || moved[1].Stock != 110 {
		t.Fatalf("transfer from stale reads: %d runs, rows %+v; want at least 2 runs and stocks %d, 110", runs, moved, 100-1-updates-10)
	}
	pgtest.ResumeReplay(t, replica)
	pgtest.CatchUp(t, pool, replica)
	for _, want := range []item{moved[0], moved[1]} {
		if got, err := tbl.Get(ctx, want.SKU); err != nil || got != want {
			t.Fatalf("get %s after catch-up = %+v, %v; want %+v", want.SKU, got, err, want)
		}
	}
}

// TestReplicaReadErrors: a read the replica cannot serve is returned, not
// sent to the primary instead; a table the replica has not replayed yet
// is one (the caller creates tables, then waits for the replica).
func TestReplicaReadErrors(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.Pool(t)
	replica := pgtest.ReplicaPool(t, pool)
	pgtest.PauseReplay(t, replica)
	s := storeOn(t, pool, pgcas.Config{ReadPool: replica})
	mustPut(t, s, "k", 0, "v")
	if _, err := s.Get(ctx, "k"); err == nil || errors.Is(err, cas.ErrNotFound) {
		t.Fatalf("get from a replica without the table = %v; want the replica's error", err)
	}
	if _, err := s.GetMany(ctx, []string{"k"}); err == nil {
		t.Fatal("get-many from a replica without the table succeeded")
	}
	// Writes and commits never touch the replica.
	if _, err := s.Commit(ctx, []cas.Op{cas.Put("k2", 0, []byte("w"))}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Add(ctx, "n", 1, cas.Bounds{}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.UpdateExclusive(ctx, "k", func(cur cas.Item) ([]byte, bool, error) {
		return slices.Concat(cur.Value, []byte("!")), true, nil
	}); err != nil {
		t.Fatal(err)
	}
}

// TestReplicaModifyManyAbsentRows: ModifyMany calls that read rows as
// absent from a replica that does not have them yet insert them in their
// commits, and fail with a conflict; the first such violation looks up
// the key's unique indexes. With every connection of the pool held by
// such a commit, that lookup once waited for a connection that never
// came: the calls must end, conflicting while the replica lacks the rows,
// and succeed once it has them.
func TestReplicaModifyManyAbsentRows(t *testing.T) {
	const calls = 6
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pool, replica, tbl := replicaInventory(t, func(c *pgxpool.Config) { c.MaxConns = 2 })
	pgtest.CatchUp(t, pool, replica)
	pgtest.PauseReplay(t, replica)
	for _, sku := range []string{"a", "b"} {
		if _, err := tbl.Insert(ctx, item{SKU: sku, Name: sku, Stock: 10}); err != nil {
			t.Fatal(err)
		}
	}
	transfer := func(cur []item, exists []bool) ([]item, error) {
		for i := range cur {
			if !exists[i] {
				cur[i].Name, cur[i].Stock = cur[i].SKU, 10 // what the replica does not show yet
			}
		}
		cur[0].Stock--
		cur[1].Stock++
		return cur, nil
	}
	var wg sync.WaitGroup
	errs := make([]error, calls)
	for i := range calls {
		wg.Go(func() {
			// Not escalated: the escalated attempt reads the rows
			// locked, on the primary, and would succeed; this test is
			// about the conflicts before it.
			_, errs[i] = tbl.ModifyMany(ctx, []any{"a", "b"}, transfer, occ.WithMaxAttempts(3), occ.WithExclusiveAfter(0))
		})
	}
	wg.Wait()
	for _, err := range errs {
		if !errors.Is(err, cas.ErrConflict) {
			t.Fatalf("ModifyMany of rows the replica lacks = %v; want a conflict (the rows exist)", err)
		}
	}
	pgtest.ResumeReplay(t, replica)
	pgtest.CatchUp(t, pool, replica)
	rows, err := tbl.ModifyMany(ctx, []any{"a", "b"}, transfer)
	if err != nil || rows[0].Stock != 9 || rows[1].Stock != 11 {
		t.Fatalf("ModifyMany once the replica has the rows = %+v, %v; want stocks 9, 11", rows, err)
	}
}

// TestReplicaTableConformance runs the table suite on Tables whose Get
// and Modify/ModifyMany reads come from the replica (tabletest's
// StaleReads), which lags by the WAL writer's 10 ms here (the primary
// commits with synchronous_commit off).
func TestReplicaTableConformance(t *testing.T) {
	newTable := func(t *testing.T, pool, replica *pgxpool.Pool) *pgcas.Table[tabletest.Row] {
		tbl, err := pgcas.NewTable[tabletest.Row](pool, pgcas.TableConfig{Table: "rows", ReadPool: replica})
		if err != nil {
			t.Fatal(err)
		}
		return tbl
	}
	tabletest.Run(t, tabletest.Harness[any]{
		New: func(t *testing.T) tabletest.Table[any] {
			pool := pgtest.Pool(t)
			if _, err := pool.Exec(context.Background(), `CREATE TABLE rows (id text PRIMARY KEY, n bigint NOT NULL, version bigserial NOT NULL)`); err != nil {
				t.Fatal(err)
			}
			replica := pgtest.ReplicaPool(t, pool)
			pgtest.CatchUp(t, pool, replica)
			return newTable(t, pool, replica)
		},
		Key: func(id string) any { return id },
		Reopen: func(t *testing.T, tbl tabletest.Table[any]) tabletest.Table[any] {
			o := tbl.(*pgcas.Table[tabletest.Row])
			return newTable(t, o.Pool(), o.ReadPool())
		},
		StaleReads: true,
	})
}
