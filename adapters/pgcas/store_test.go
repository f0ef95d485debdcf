package pgcas_test

import (
	"context"
	"errors"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/occkit/occkit/adapters/pgcas"
	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/cas/castest"
	"github.com/occkit/occkit/internal/pgtest"
)

// newStore returns a store on a fresh table in a fresh schema.
func newStore(t testing.TB, cfg pgcas.Config) *pgcas.Store {
	t.Helper()
	return storeOn(t, pgtest.Pool(t), cfg)
}

// storeOn returns a store with cfg on pool, its tables created.
func storeOn(t testing.TB, pool *pgxpool.Pool, cfg pgcas.Config) *pgcas.Store {
	t.Helper()
	s, err := pgcas.New(pool, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.CreateTable(context.Background()); err != nil {
		t.Fatal(err)
	}
	return s
}

func TestConformance(t *testing.T) {
	limits := cas.Limits{MaxKeyBytes: 256, MaxValueBytes: 64 << 10, MaxCommitOps: 16}
	reopen, shortHold := castest.SameKeys(200*time.Millisecond, func(t *testing.T, s cas.Store, hold time.Duration) cas.Store {
		o, err := pgcas.New(s.(*pgcas.Store).Pool(), pgcas.Config{Limits: limits, ExclusiveTimeout: hold})
		if err != nil {
			t.Fatal(err)
		}
		return o
	})
	castest.Run(t, castest.Harness{
		NewStore:       func(t *testing.T) cas.Store { return newStore(t, pgcas.Config{Limits: limits}) },
		Reopen:         reopen,
		ShortHold:      shortHold,
		ReturnsCurrent: true,
		Limits:         limits,
		Workers:        8,
		OpsPerWorker:   50,
	})
}

func TestConformanceDefaultLimits(t *testing.T) {
	castest.Run(t, castest.Harness{
		NewStore:       func(t *testing.T) cas.Store { return newStore(t, pgcas.Config{}) },
		ReturnsCurrent: true,
	})
}

func TestHostileTableName(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.Pool(t)
	if _, err := pool.Exec(ctx, `CREATE TABLE y (id int)`); err != nil {
		t.Fatal(err)
	}
	const hostile = `x"; DROP TABLE y; --`
	s := storeOn(t, pool, pgcas.Config{Table: hostile})
	v, err := s.CompareAndSwap(ctx, "k", 0, []byte("v"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Commit(ctx, []cas.Op{cas.Put("k", v, []byte("w")), cas.Check("other", 0)}); err != nil {
		t.Fatal(err)
	}
	var names []string
	rows, _ := pool.Query(ctx, `SELECT tablename FROM pg_tables WHERE schemaname = current_schema() ORDER BY 1`)
	names, err = pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Add(ctx, "n", 1, cas.Bounds{}); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(names, []string{hostile, hostile + "_deltas", "y"}) {
		t.Fatalf("tables = %q, want the hostile name as one table, its delta table, and y untouched", names)
	}
}

func TestConfigErrors(t *testing.T) {
	pool := pgtest.Pool(t)
	tests := []struct {
		name string
		cfg  pgcas.Config
		want string
	}{
		{"TooLongName", pgcas.Config{Table: strings.Repeat("t", 64)}, "limit is 63"},
		{"NUL", pgcas.Config{Table: "a\x00b"}, "NUL"},
		{"EmptySchemaPartIsFine", pgcas.Config{Schema: "", Table: "ok"}, ""},
		{"KeyLimit", pgcas.Config{Limits: cas.Limits{MaxKeyBytes: pgcas.MaxKeyBytesLimit + 1}}, "MaxKeyBytes"},
		{"ValueLimit", pgcas.Config{Limits: cas.Limits{MaxValueBytes: pgcas.MaxValueBytesLimit + 1}}, "MaxValueBytes"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := pgcas.New(pool, tc.cfg)
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New(%+v) = %v, want an error saying %q", tc.cfg, err, tc.want)
			}
		})
	}
	if _, err := pgcas.New(nil, pgcas.Config{}); err == nil {
		t.Fatal("New(nil pool) succeeded")
	}
}

func TestSchemaAndMissingTable(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.Pool(t)
	schema := pgtest.Schema(t) // another schema, not on the pool's search_path
	s, err := pgcas.New(pool, pgcas.Config{Schema: schema, Table: "kv"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.CompareAndSwap(ctx, "k", 0, []byte("v")); err == nil || !strings.Contains(err.Error(), "CreateTable") {
		t.Fatalf("write to a missing table: %v, want advice to create it", err)
	}
	if err := s.CreateTable(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CompareAndSwap(ctx, "k", 0, []byte("v")); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM `+pgx.Identifier{schema, "kv"}.Sanitize()).Scan(&n); err != nil || n != 1 {
		t.Fatalf("rows in %s.kv = %d, %v", schema, n, err)
	}
}

func TestTokenAboveBigint(t *testing.T) {
	s := newStore(t, pgcas.Config{})
	_, err := s.CompareAndSwapFenced(context.Background(), "k", 0, math.MaxInt64+1, []byte("v"))
	if !errors.Is(err, cas.ErrTooLarge) {
		t.Fatalf("token above bigint: %v, want ErrTooLarge", err)
	}
}

// TestTombstones checks the table layout the package documents: a delete
// leaves a row with a NULL value that keeps the fencing token, and such a
// row can be removed by hand when its token is 0.
func TestTombstones(t *testing.T) {
	ctx := context.Background()
	s := newStore(t, pgcas.Config{})
	v, _ := s.CompareAndSwapFenced(ctx, "fenced", 0, 7, []byte("a"))
	w, _ := s.CompareAndSwap(ctx, "plain", 0, []byte("b"))
	if err := s.CompareAndDelete(ctx, "fenced", v); err != nil {
		t.Fatal(err)
	}
	if err := s.CompareAndDelete(ctx, "plain", w); err != nil {
		t.Fatal(err)
	}
	var tombstones, purged int
	if err := s.Pool().QueryRow(ctx, `SELECT count(*) FROM occkit_cas WHERE value IS NULL`).Scan(&tombstones); err != nil {
		t.Fatal(err)
	}
	if tombstones != 2 {
		t.Fatalf("%d tombstones, want 2", tombstones)
	}
	tag, err := s.Pool().Exec(ctx, `DELETE FROM occkit_cas WHERE value IS NULL AND fence_token = 0`)
	if err != nil {
		t.Fatal(err)
	}
	purged = int(tag.RowsAffected())
	if purged != 1 {
		t.Fatalf("purged %d tombstones, want 1", purged)
	}
	v2, err := s.CompareAndSwap(ctx, "plain", 0, []byte("again"))
	if err != nil || v2 <= w {
		t.Fatalf("re-create after purge = v%d, %v; want a version above %d", v2, err, w)
	}
	if _, err := s.CompareAndSwapFenced(ctx, "fenced", 0, 6, []byte("stale")); !errors.Is(err, cas.ErrFenced) {
		t.Fatalf("stale token after delete: %v", err)
	}
}
