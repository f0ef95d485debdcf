package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// ExamplePool is Pool for Example functions, which have no testing.T: it
// connects to the server at OCCKIT_PG_URL and returns a pool whose
// connections work in a fresh schema (first on their search_path), with a
// function that closes the pool and drops the schema. Having no test to
// fail, it panics when OCCKIT_PG_URL is unset or the server refuses, so
// that a missing server never passes for a passing example.
func ExamplePool() (*pgxpool.Pool, func()) {
	ctx := context.Background()
	url := os.Getenv(EnvURL)
	if url == "" {
		panic(EnvURL + " is not set: the examples need a PostgreSQL server (make test starts one; see docs/postgres.md)")
	}
	admin, err := pgx.Connect(ctx, url)
	if err != nil {
		panic(err)
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	schema := "occkit_example_" + hex.EncodeToString(b[:])
	if _, err := admin.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		panic(err)
	}
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		panic(err)
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		panic(err)
	}
	return pool, func() {
		pool.Close()
		_, _ = admin.Exec(ctx, "DROP SCHEMA "+schema+" CASCADE")
		_ = admin.Close(ctx)
	}
}
