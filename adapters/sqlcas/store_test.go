package sqlcas_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/occkit/occkit/adapters/sqlcas"
	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/cas/castest"
)

func TestConformance(t *testing.T) {
	limits := cas.Limits{MaxKeyBytes: 256, MaxValueBytes: 64 << 10, MaxCommitOps: 16}
	eachDialect(t, func(t *testing.T, d sqlcas.Dialect) {
		castest.Run(t, castest.Harness{
			NewStore: func(t *testing.T) cas.Store { return newStore(t, d, sqlcas.Config{Limits: limits}) },
			Reopen: func(t *testing.T, s cas.Store) cas.Store {
				o, err := sqlcas.New(s.(*sqlcas.Store).DB(), sqlcas.Config{Dialect: d, Limits: limits})
				if err != nil {
					t.Fatal(err)
				}
				return o
			},
			ShortHold:      shortHold(d, limits),
			ReturnsCurrent: true,
			Limits:         limits,
			Workers:        8,
			OpsPerWorker:   40,
		})
	})
}

func TestConformanceDefaultLimits(t *testing.T) {
	eachDialect(t, func(t *testing.T, d sqlcas.Dialect) {
		castest.Run(t, castest.Harness{
			NewStore:       func(t *testing.T) cas.Store { return newStore(t, d, sqlcas.Config{}) },
			ReturnsCurrent: true,
		})
	})
}

// TestHostileTableName gives the store a table name full of quotes and
// SQL: it must be one table of exactly that name, and the table y next to
// it must be untouched.
func TestHostileTableName(t *testing.T) {
	eachDialect(t, func(t *testing.T, d sqlcas.Dialect) {
		ctx := context.Background()
		db := openDB(t, d)
		if _, err := db.ExecContext(ctx, `CREATE TABLE y (id INT)`); err != nil {
			t.Fatal(err)
		}
		const hostile = "x\"`; DROP TABLE y; -- ?$1@k{T}"
		s := storeOn(t, db, sqlcas.Config{Dialect: d, Table: hostile})
		v, err := s.CompareAndSwap(ctx, "k", 0, []byte("v"))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Commit(ctx, []cas.Op{cas.Put("k", v, []byte("w")), cas.Check("other", 0)}); err != nil {
			t.Fatal(err)
		}
		if err := s.CompareAndDelete(ctx, "k", v+1); err != nil {
			t.Fatal(err)
		}
		var n int
		if err := db.QueryRowContext(ctx, `SELECT count(*) FROM y`).Scan(&n); err != nil {
			t.Fatalf("table y: %v", err)
		}
	})
}

func TestConfigErrors(t *testing.T) {
	db := openSQLite(t)
	tests := []struct {
		name string
		cfg  sqlcas.Config
		want string
	}{
		{"NoDialect", sqlcas.Config{}, "Dialect"},
		{"NUL", sqlcas.Config{Dialect: sqlcas.SQLite, Table: "a\x00b"}, "NUL"},
		{"MySQLName", sqlcas.Config{Dialect: sqlcas.MySQL, Table: strings.Repeat("t", 65)}, "limit is 64"},
		{"PostgresName", sqlcas.Config{Dialect: sqlcas.Postgres, Table: strings.Repeat("t", 64)}, "limit is 63"},
		{"KeyLimit", sqlcas.Config{Dialect: sqlcas.SQLite, Limits: cas.Limits{MaxKeyBytes: sqlcas.MaxKeyBytesLimit + 1}}, "MaxKeyBytes"},
		{"ValueLimit", sqlcas.Config{Dialect: sqlcas.SQLite, Limits: cas.Limits{MaxValueBytes: sqlcas.MaxValueBytesLimit + 1}}, "MaxValueBytes"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := sqlcas.New(db, tc.cfg)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New(%+v) = %v, want an error saying %q", tc.cfg, err, tc.want)
			}
		})
	}
	if _, err := sqlcas.New(nil, sqlcas.Config{Dialect: sqlcas.SQLite}); err == nil {
		t.Fatal("New(nil) succeeded")
	}
}

// TestMissingTable: a write to a table never created says how to create
// it.
func TestMissingTable(t *testing.T) {
	eachDialect(t, func(t *testing.T, d sqlcas.Dialect) {
		s, err := sqlcas.New(openDB(t, d), sqlcas.Config{Dialect: d})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.CompareAndSwap(context.Background(), "k", 0, []byte("v")); err == nil || !strings.Contains(err.Error(), "CreateTable") {
			t.Fatalf("write to a missing table: %v, want advice to create it", err)
		}
	})
}

// TestTombstones checks the layout the package documents: a delete leaves
// a row with a NULL value keeping its version and fencing token, and a
// create over it continues above its version.
func TestTombstones(t *testing.T) {
	eachDialect(t, func(t *testing.T, d sqlcas.Dialect) {
		ctx := context.Background()
		s := newStore(t, d, sqlcas.Config{})
		v, _ := s.CompareAndSwapFenced(ctx, "k", 0, 7, []byte("a"))
		v, _ = s.CompareAndSwap(ctx, "k", v, []byte("b"))
		if err := s.CompareAndDelete(ctx, "k", v); err != nil {
			t.Fatal(err)
		}
		var version, token int64
		var isNull bool
		if err := s.DB().QueryRowContext(ctx, `SELECT version, fence_token, value IS NULL FROM occkit_cas`).Scan(&version, &token, &isNull); err != nil {
			t.Fatal(err)
		}
		if !isNull || version != int64(v) || token != 7 {
			t.Fatalf("tombstone = version %d, token %d, null %v; want version %d, token 7, null", version, token, isNull, v)
		}
		if _, err := s.CompareAndSwapFenced(ctx, "k", 0, 6, []byte("stale")); !errors.Is(err, cas.ErrFenced) {
			t.Fatalf("stale token after delete: %v", err)
		}
		w, err := s.CompareAndSwap(ctx, "k", 0, []byte("c"))
		if err != nil || w <= v {
			t.Fatalf("re-create = v%d, %v; want above v%d", w, err, v)
		}
	})
}

func TestTokenAboveInt64(t *testing.T) {
	s := newStore(t, sqlcas.SQLite, sqlcas.Config{})
	if _, err := s.CompareAndSwapFenced(context.Background(), "k", 0, math.MaxInt64+1, []byte("v")); !errors.Is(err, cas.ErrTooLarge) {
		t.Fatalf("token above int64: %v, want ErrTooLarge", err)
	}
}

// shortHold is the castest harness's ShortHold: PostgreSQL bounds a
// silent holder (ExclusiveTimeout); MySQL and SQLite do not (nil).
func shortHold(d sqlcas.Dialect, limits cas.Limits) func(*testing.T, cas.Store) (cas.Store, time.Duration) {
	if d != sqlcas.Postgres {
		return nil
	}
	return func(t *testing.T, s cas.Store) (cas.Store, time.Duration) {
		const bound = 200 * time.Millisecond
		o, err := sqlcas.New(s.(*sqlcas.Store).DB(), sqlcas.Config{Dialect: d, Limits: limits, ExclusiveTimeout: bound})
		if err != nil {
			t.Fatal(err)
		}
		return o, bound
	}
}

// TestPreparedStatementsClosed: on SQLite a store prepares its statements
// on the database's connections; once the store is gone they are closed,
// so that stores made and dropped (a store per request, per tenant's
// table) leave no statements open behind them.
func TestPreparedStatementsClosed(t *testing.T) {
	ctx := context.Background()
	db := openDB(t, sqlcas.SQLite)
	// settle collects the stores earlier tests dropped, until the count
	// of open statements stops moving, and returns it.
	settle := func() int64 {
		last, same := int64(-1), 0
		for deadline := time.Now().Add(3 * time.Second); same < 3 && time.Now().Before(deadline); {
			runtime.GC()
			time.Sleep(10 * time.Millisecond)
			n, _ := sqlcas.OpenPrepared()
			if n == last {
				same++
			} else {
				last, same = n, 0
			}
		}
		return last
	}
	before := settle()
	_, total0 := sqlcas.OpenPrepared()
	func() {
		for i := range 50 {
			s := storeOn(t, db, sqlcas.Config{Dialect: sqlcas.SQLite, Table: fmt.Sprintf("t%d", i)})
			if _, err := s.CompareAndSwap(ctx, "k", 0, []byte("v")); err != nil {
				t.Fatal(err)
			}
			if _, err := s.Get(ctx, "k"); err != nil {
				t.Fatal(err)
			}
		}
	}()
	if _, total := sqlcas.OpenPrepared(); total-total0 < 100 {
		t.Fatalf("50 stores prepared %d statements, want at least 2 each", total-total0)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		runtime.GC()
		open, _ := sqlcas.OpenPrepared()
		if open <= before {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d statements of 50 dropped stores still open", open-before)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
