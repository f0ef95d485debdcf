// Command inventory is a small HTTP JSON API over a cas.Store: items with
// a stock, bought and restocked with occ.Update (no lock), and edited with
// If-Match preconditions (occhttp). See README.md.
//
//	go run ./examples/inventory                       # memory store on 127.0.0.1:8080
//	go run ./examples/inventory -store postgres       # PostgreSQL at $OCCKIT_PG_URL
//	go run ./examples/inventory -store sqlite         # SQLite file inventory.db (pure Go)
//	go run ./examples/inventory -compare              # lease lock vs occkit, side by side
package main

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"log"
	"net/http"
	"os"
	"os/signal"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	_ "modernc.org/sqlite" // the "sqlite" database/sql driver, pure Go

	"github.com/occkit/occkit/adapters/memcas"
	"github.com/occkit/occkit/adapters/pgcas"
	"github.com/occkit/occkit/adapters/sqlcas"
	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/hybrid"
)

func main() {
	var (
		addr     = flag.String("addr", "127.0.0.1:8080", "address to listen on")
		storeArg = flag.String("store", "memory", "memory, postgres or sqlite")
		pgURL    = flag.String("pg-url", os.Getenv("OCCKIT_PG_URL"), "PostgreSQL URL (-store postgres); default $OCCKIT_PG_URL")
		table    = flag.String("pg-table", "inventory", "PostgreSQL table (-store postgres), created if missing")
		dbFile   = flag.String("sqlite-file", "inventory.db", "SQLite database file (-store sqlite), created if missing")
		mode     = flag.String("mode", modeOCC, "how stock changes: occ (occ.Update) or lease (a lease lock with a TTL and an unconditional write, for comparison)")
		ttl      = flag.Duration("lease-ttl", 2*time.Second, "the lease's TTL in -mode lease")
		cmp      = flag.Bool("compare", false, "run the lease-lock and occkit versions side by side under concurrent buyers, print the table and exit")
	)
	load := defaultLoad()
	flag.IntVar(&load.Buyers, "buyers", load.Buyers, "concurrent buyers (-compare)")
	flag.IntVar(&load.Stock, "stock", load.Stock, "units in stock at the start (-compare)")
	flag.IntVar(&load.PauseEvery, "pause-every", load.PauseEvery, "pause every n-th write between read and write (-compare)")
	flag.DurationVar(&load.Pause, "pause", load.Pause, "how long a paused write waits (-compare)")
	flag.DurationVar(&load.TTL, "compare-ttl", load.TTL, "the lease's TTL (-compare)")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	newStore, closeStore, err := openStore(ctx, *storeArg, *pgURL, *table, *dbFile)
	if err != nil {
		log.Fatal(err)
	}
	defer closeStore()

	if *cmp {
		results, err := compare(ctx, os.Stdout, newStore, load)
		if err != nil {
			log.Fatal(err)
		}
		if err := results[1].check(); err != nil {
			log.Fatal(err)
		}
		return
	}
	if *mode != modeOCC && *mode != modeLease {
		log.Fatalf("-mode %q: want occ or lease", *mode)
	}
	svc := newService(newStore(), *mode, hybrid.NewLocalLocker(*ttl))
	if err := svc.seed(ctx, []Item{
		{SKU: "sku-42", Name: "teapot", Price: 2500, Stock: 100},
		{SKU: "sku-7", Name: "kettle", Price: 4000, Stock: 10},
	}); err != nil {
		log.Fatal(err)
	}
	srv := &http.Server{Addr: *addr, Handler: svc.handler(), ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	fmt.Printf("inventory (%s store, %s mode) on http://%s; try:\n  curl -i http://%s/items/sku-42\n", *storeArg, *mode, *addr, *addr)
	if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
		log.Fatal(err)
	}
}

// openStore returns a function making the store to use (one memory store
// each call, or the one PostgreSQL or SQLite table) and a function closing
// it.
func openStore(ctx context.Context, kind, pgURL, table, dbFile string) (func() cas.Store, func(), error) {
	switch kind {
	case "memory":
		return func() cas.Store { return memcas.New() }, func() {}, nil
	case "postgres":
		if pgURL == "" {
			return nil, nil, errors.New("-store postgres needs -pg-url or OCCKIT_PG_URL (bash scripts/servers/postgres.sh prints one)")
		}
		pool, err := pgxpool.New(ctx, pgURL)
		if err != nil {
			return nil, nil, err
		}
		s, err := pgcas.New(pool, pgcas.Config{Table: table})
		if err == nil {
			err = s.CreateTable(ctx)
		}
		if err != nil {
			pool.Close()
			return nil, nil, err
		}
		return func() cas.Store { return s }, pool.Close, nil
	case "sqlite":
		s, db, err := openSQLite(ctx, dbFile)
		if err != nil {
			return nil, nil, err
		}
		return func() cas.Store { return s }, func() { _ = db.Close() }, nil
	}
	return nil, nil, fmt.Errorf("-store %q: want memory, postgres or sqlite", kind)
}

// openSQLite opens (creating it if missing) the SQLite database in file, in
// WAL mode with a busy timeout, and the store's table in it.
func openSQLite(ctx context.Context, file string) (*sqlcas.Store, *sql.DB, error) {
	db, err := sql.Open("sqlite", "file:"+file+"?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)&_txlock=immediate")
	if err != nil {
		return nil, nil, err
	}
	s, err := sqlcas.New(db, sqlcas.Config{Dialect: sqlcas.SQLite, Table: "inventory"})
	if err == nil {
		err = s.CreateTable(ctx)
	}
	if err != nil {
		_ = db.Close()
		return nil, nil, fmt.Errorf("-store sqlite: %w", err)
	}
	return s, db, nil
}
