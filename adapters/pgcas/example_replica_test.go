package pgcas_test

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/occkit/occkit/adapters/pgcas"
	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/occ"
)

// Reads from a streaming replica (Config.ReadPool), writes to the primary:
// the conditional write is checked on the primary, so a read that the
// replica had not replayed yet only makes it conflict, and the retry
// starts from the primary's current row. The example needs the hot
// standby make test starts beside the primary (OCCKIT_PG_REPLICA_URL,
// docs/postgres.md).
func ExampleConfig_readPool() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	primary, done := examplePool() // in an application: pgxpool.New(ctx, primaryURL)
	defer done()
	replica := exampleReplicaPool(ctx, primary)
	defer replica.Close()

	store, err := pgcas.New(primary, pgcas.Config{Table: "stock", ReadPool: replica})
	if err != nil {
		panic(err)
	}
	if err := store.CreateTable(ctx); err != nil {
		panic(err)
	}
	waitReplayed(ctx, primary, replica) // the new table reaches the replica
	stock := cas.NewTyped(store, cas.JSON[int]())
	for range 3 {
		n, _, err := occ.Update(ctx, stock, "sku-42", func(n int, exists bool) (int, error) {
			if !exists {
				return 10, nil
			}
			return n - 1, nil
		}, occ.WithRetryable(pgcas.Retryable))
		if err != nil {
			panic(err)
		}
		fmt.Println(n)
	}
	// Output:
	// 10
	// 9
	// 8
}

// exampleReplicaPool connects to the replica at OCCKIT_PG_REPLICA_URL,
// reading the schema primary's connections work in.
func exampleReplicaPool(ctx context.Context, primary *pgxpool.Pool) *pgxpool.Pool {
	url := os.Getenv("OCCKIT_PG_REPLICA_URL")
	if url == "" {
		panic("OCCKIT_PG_REPLICA_URL is not set: the example needs a PostgreSQL hot standby (make test starts one; scripts/servers/postgres.sh --replica)")
	}
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		panic(err)
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = primary.Config().ConnConfig.RuntimeParams["search_path"]
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		panic(err)
	}
	return pool
}

// waitReplayed waits until the replica has replayed everything the
// primary has written so far.
func waitReplayed(ctx context.Context, primary, replica *pgxpool.Pool) {
	var lsn string
	// The insert position, not the write position: with
	// synchronous_commit off (the test servers) a commit record can still
	// be in the WAL buffers, behind the write position, when the call
	// returns, and a replica replayed up to the write position would not
	// have the commit yet.
	if err := primary.QueryRow(ctx, "SELECT pg_current_wal_insert_lsn()::text").Scan(&lsn); err != nil {
		panic(err)
	}
	for {
		var done bool
		if err := replica.QueryRow(ctx, "SELECT pg_last_wal_replay_lsn() >= $1::pg_lsn", lsn).Scan(&done); err != nil {
			panic(err)
		}
		if done {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}
