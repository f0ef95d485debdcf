package sqlcas_test

import (
	"context"
	"database/sql"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/occkit/occkit/adapters/sqlcas"
	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/cas/castest"
	"github.com/occkit/occkit/internal/pgtest"
	"github.com/occkit/occkit/occ"
)

// replicaStore returns a PostgreSQL store on a fresh table whose Get and
// GetMany read from the streaming replica (OCCKIT_PG_REPLICA_URL; the
// test fails without it), once the replica has the table, with pools on
// the primary and the replica for the test's own control (catching up,
// pausing replay). The primary's sessions commit with synchronous_commit
// on: the test server runs with it off, which keeps the replica 10 ms
// behind (the WAL writer's delay) rather than about 0.1 ms.
func replicaStore(t testing.TB, cfg sqlcas.Config) (s *sqlcas.Store, primary, replica *pgxpool.Pool) {
	t.Helper()
	pcfg := pgtest.Config(t)
	pcfg.ConnConfig.RuntimeParams["synchronous_commit"] = "on"
	primary = pgtest.Open(t, pcfg)
	replica = pgtest.ReplicaPool(t, primary)
	open := func(cfg *pgxpool.Config) *sql.DB {
		db := stdlib.OpenDB(*cfg.ConnConfig)
		t.Cleanup(func() { _ = db.Close() })
		return db
	}
	cfg.Dialect = sqlcas.Postgres
	cfg.ReadDB = open(replica.Config())
	s = storeOn(t, open(pcfg), cfg)
	pgtest.CatchUp(t, primary, replica)
	return s, primary, replica
}

// TestReplicaConformance runs the conformance suite on PostgreSQL stores
// whose Get and GetMany read from the replica (castest's StaleReads).
func TestReplicaConformance(t *testing.T) {
	limits := cas.Limits{MaxKeyBytes: 256, MaxValueBytes: 64 << 10, MaxCommitOps: 16}
	castest.Run(t, castest.Harness{
		NewStore: func(t *testing.T) cas.Store {
			s, _, _ := replicaStore(t, sqlcas.Config{Limits: limits})
			return s
		},
		Reopen: func(t *testing.T, s cas.Store) cas.Store {
			o, err := sqlcas.New(s.(*sqlcas.Store).DB(), sqlcas.Config{Dialect: sqlcas.Postgres, Limits: limits, ReadDB: s.(*sqlcas.Store).ReadDB()})
			if err != nil {
				t.Fatal(err)
			}
			return o
		},
		ShortHold:      shortHold(sqlcas.Postgres, limits),
		ReturnsCurrent: true,
		StaleReads:     true,
		Limits:         limits,
		Workers:        8,
		OpsPerWorker:   40,
	})
}

// conflicts is an occ observer counting conflicts.
type conflicts struct{ n atomic.Int64 }

func (c *conflicts) ObserveAttempt(_ context.Context, a occ.Attempt) {
	if a.Outcome == occ.OutcomeConflict {
		c.n.Add(1)
	}
}

func (c *conflicts) ObserveCall(context.Context, occ.Call) {}

// TestReplicaReads checks where a PostgreSQL store with a ReadDB reads:
// while the replica's replay is paused, Get and GetMany return the state
// at the pause (a store made by With reads in its transaction, on the
// primary), a write expecting a version read there conflicts with the
// primary's current row, and each occ.Update after the first conflicts
// once and then succeeds from that row.
func TestReplicaReads(t *testing.T) {
	ctx := context.Background()
	s, primary, replica := replicaStore(t, sqlcas.Config{})
	if s.ReadDB() == nil {
		t.Fatal("ReadDB() is nil")
	}
	put := func(key string, expected cas.Version, value string) cas.Version {
		t.Helper()
		v, err := s.CompareAndSwap(ctx, key, expected, []byte(value))
		if err != nil {
			t.Fatalf("put %q at %d: %v", key, expected, err)
		}
		return v
	}
	v1 := put("k", 0, "1")
	put("n", 0, "0")
	pgtest.CatchUp(t, primary, replica)

	pgtest.PauseReplay(t, replica)
	v2 := put("k", v1, "2")
	if it, err := s.Get(ctx, "k"); err != nil || it.Version != v1 || string(it.Value) != "1" {
		t.Fatalf("get with replay paused = %+v, %v; want the replica's {1, v%d}", it, err, v1)
	}
	if items, err := s.GetMany(ctx, []string{"k"}); err != nil || items[0].Version != v1 {
		t.Fatalf("get-many with replay paused = %+v, %v; want v%d", items, err, v1)
	}
	tx, err := s.DB().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	it, err := s.With(tx).Get(ctx, "k")
	_ = tx.Rollback()
	if err != nil || it.Version != v2 {
		t.Fatalf("get in the caller's transaction = %+v, %v; want the primary's v%d", it, err, v2)
	}
	_, err = s.CompareAndSwap(ctx, "k", v1, []byte("3"))
	var ce *cas.ConflictError
	if !errors.As(err, &ce) || !ce.HasCurrent || ce.Current.Version != v2 {
		t.Fatalf("write at the replica's version = %v; want a conflict carrying v%d", err, v2)
	}

	const updates = 5
	var obs conflicts
	counters := cas.NewTyped(s, cas.JSON[int]())
	for i := range updates {
		n, _, err := occ.Update(ctx, counters, "n", func(n int, _ bool) (int, error) { return n + 1, nil }, occ.WithObserver(&obs))
		if err != nil || n != i+1 {
			t.Fatalf("update %d = %d, %v; want %d", i, n, err, i+1)
		}
	}
	if got := obs.n.Load(); got != updates-1 {
		t.Errorf("%d updates from a paused replica had %d conflicts, want %d", updates, got, updates-1)
	}
	pgtest.ResumeReplay(t, replica)
	pgtest.CatchUp(t, primary, replica)
	if n, _, err := counters.Get(ctx, "n"); err != nil || n != updates {
		t.Fatalf("counter after catch-up = %d, %v; want %d", n, err, updates)
	}
}
