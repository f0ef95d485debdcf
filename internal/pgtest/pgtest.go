// Package pgtest gives tests a real PostgreSQL to work in: the server named
// by OCCKIT_PG_URL (started by `make test`, see scripts/servers/postgres.sh),
// a fresh schema private to each test, dropped when the test ends, and a
// connection pool whose connections work in that schema.
//
// A test that needs PostgreSQL and finds OCCKIT_PG_URL unset fails, loudly
// and with the way to get one: a missing server must never pass for a
// passing test.
package pgtest

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/occkit/occkit/internal/testenv"
)

// EnvURL is the environment variable holding the test server's URL.
const EnvURL = "OCCKIT_PG_URL"

// URL returns the test server's URL from OCCKIT_PG_URL, or fails the test.
func URL(t testing.TB) string {
	t.Helper()
	return testenv.Server{Env: EnvURL, What: "a PostgreSQL server", Script: "postgres.sh",
		Own: "postgres://user:pass@host:port/db"}.Lookup(t)
}

// Schema creates a fresh, uniquely named, empty schema and returns its
// name (a plain lower-case identifier, safe to use unquoted). The schema
// and everything in it are dropped when the test ends.
func Schema(t testing.TB) string {
	t.Helper()
	url := URL(t)
	name := testenv.UniqueName("occkit_test_")
	admin(t, url, "CREATE SCHEMA "+pgx.Identifier{name}.Sanitize())
	t.Cleanup(func() {
		admin(t, url, "DROP SCHEMA IF EXISTS "+pgx.Identifier{name}.Sanitize()+" CASCADE")
	})
	return name
}

// admin runs one statement on a connection of its own.
func admin(t testing.TB, url, sql string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatalf("pgtest: connect to %s: %v", EnvURL, err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, sql); err != nil {
		t.Fatalf("pgtest: %s: %v", sql, err)
	}
}

// Config returns a pool configuration for the test server whose
// connections work in a fresh schema (it is first on their search_path, so
// unqualified CREATE TABLE and queries use it). The schema is dropped when
// the test ends.
func Config(t testing.TB) *pgxpool.Config {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(URL(t))
	if err != nil {
		t.Fatalf("pgtest: parse %s: %v", EnvURL, err)
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = Schema(t)
	return cfg
}

// Pool returns a pool over a fresh schema (see Config), after letting each
// configure function adjust its configuration. The pool is closed, then
// the schema dropped, when the test ends.
func Pool(t testing.TB, configure ...func(*pgxpool.Config)) *pgxpool.Pool {
	t.Helper()
	cfg := Config(t)
	for _, f := range configure {
		f(cfg)
	}
	return Open(t, cfg)
}

// Open opens a pool with cfg, checks that it reaches the server, and
// closes it when the test ends. A connection the test never released
// fails the test instead of hanging it: pgxpool's Close waits for every
// connection, so Open gives up waiting after closeWait.
func Open(t testing.TB, cfg *pgxpool.Config) *pgxpool.Pool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatalf("pgtest: open pool: %v", err)
	}
	t.Cleanup(func() { closePool(t, pool) })
	if err := pool.Ping(ctx); err != nil {
		t.Fatalf("pgtest: ping %s: %v", EnvURL, err)
	}
	return pool
}

// closeWait is how long closing a test's pool waits for connections still
// in use.
const closeWait = 10 * time.Second

// closePool closes pool, or fails the test if that has not finished
// after closeWait, leaving the pool's goroutines behind.
func closePool(t testing.TB, pool *pgxpool.Pool) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		pool.Close()
	}()
	select {
	case <-done:
	case <-time.After(closeWait):
		t.Errorf("pgtest: closing the pool: %d connections were never released", pool.Stat().AcquiredConns())
	}
}
