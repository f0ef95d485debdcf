package migrate_test

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/occkit/occkit/adapters/etcdcas"
	"github.com/occkit/occkit/adapters/memcas"
	"github.com/occkit/occkit/adapters/pgcas"
	"github.com/occkit/occkit/adapters/rediscas"
	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/examples/migrate"
	"github.com/occkit/occkit/internal/etcdtest"
	"github.com/occkit/occkit/internal/pgtest"
	"github.com/occkit/occkit/internal/redistest"
)

const buyers, units = 8, 40

// sellOut runs buyers until they are told the SKU is sold out and checks
// the invariant: exactly one accepted sale per unit, and the store agrees
// (left reads the stock at the end).
func sellOut(t *testing.T, buy func(ctx context.Context) (int, error), left func(ctx context.Context) int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		accepted int
		firstErr error
	)
	for range buyers {
		wg.Go(func() {
			for range 10 * units { // bounded
				_, err := buy(ctx)
				mu.Lock()
				if err == nil {
					accepted++
				} else if !errors.Is(err, migrate.ErrSoldOut) && firstErr == nil {
					firstErr = err
				}
				mu.Unlock()
				if err != nil {
					return
				}
			}
		})
	}
	wg.Wait()
	if firstErr != nil {
		t.Fatal(firstErr)
	}
	if n := left(ctx); accepted != units || n != 0 {
		t.Fatalf("%d sales accepted, %d units left; want %d and 0", accepted, n, units)
	}
}

// sellOutStore runs migrate.Buy on a store.
func sellOutStore(t *testing.T, store cas.Store) {
	t.Helper()
	stock := cas.NewTyped(store, cas.JSON[int]())
	ctx := context.Background()
	if _, err := stock.CompareAndSwap(ctx, "stock/teapot", 0, units); err != nil {
		t.Fatal(err)
	}
	sellOut(t, func(ctx context.Context) (int, error) { return migrate.Buy(ctx, stock, "teapot") },
		func(ctx context.Context) int {
			n, _, err := stock.Get(ctx, "stock/teapot")
			if err != nil {
				t.Fatal(err)
			}
			return n
		})
}

func TestMemory(t *testing.T) {
	sellOutStore(t, memcas.New())
}

func TestRedis(t *testing.T) {
	rdb := redistest.Client(t)
	prefix := redistest.Prefix(t)
	t.Run("before: SET NX lock", func(t *testing.T) {
		ctx := context.Background()
		sku := prefix + "teapot"
		t.Cleanup(func() { rdb.Del(context.Background(), "stock:"+sku, "lock:"+sku) })
		if err := rdb.Set(ctx, "stock:"+sku, units, 0).Err(); err != nil {
			t.Fatal(err)
		}
		sellOut(t, func(ctx context.Context) (int, error) { return migrate.BuyRedisLocked(ctx, rdb, sku) },
			func(ctx context.Context) int {
				n, err := rdb.Get(ctx, "stock:"+sku).Int()
				if err != nil {
					t.Fatal(err)
				}
				return n
			})
	})
	t.Run("after: rediscas", func(t *testing.T) {
		store, err := rediscas.New(rdb, rediscas.Config{Prefix: prefix + "shop:"})
		if err != nil {
			t.Fatal(err)
		}
		sellOutStore(t, store)
	})
}

func TestEtcd(t *testing.T) {
	cluster := etcdtest.Start(t, etcdtest.Options{NoProxy: true})
	cli := cluster.Client()
	t.Run("before: concurrency.Mutex", func(t *testing.T) {
		ctx := context.Background()
		if _, err := cli.Put(ctx, "/stock/teapot", strconv.Itoa(units)); err != nil {
			t.Fatal(err)
		}
		sellOut(t, func(ctx context.Context) (int, error) { return migrate.BuyEtcdMutex(ctx, cli, "teapot") },
			func(ctx context.Context) int {
				resp, err := cli.Get(ctx, "/stock/teapot")
				if err != nil || len(resp.Kvs) == 0 {
					t.Fatal(err)
				}
				n, _ := strconv.Atoi(string(resp.Kvs[0].Value))
				return n
			})
	})
	t.Run("after: etcdcas", func(t *testing.T) {
		store, err := etcdcas.New(cli, etcdcas.Config{Prefix: "shop/"})
		if err != nil {
			t.Fatal(err)
		}
		sellOutStore(t, store)
	})
}

func TestPostgres(t *testing.T) {
	pool := pgtest.Pool(t)
	ctx := context.Background()
	if _, err := pool.Exec(ctx, migrate.ItemsDDL); err != nil {
		t.Fatal(err)
	}
	row := func(t *testing.T, sku string) func(ctx context.Context) int {
		if _, err := pool.Exec(ctx, `INSERT INTO items (sku, stock) VALUES ($1, $2)`, sku, units); err != nil {
			t.Fatal(err)
		}
		return func(ctx context.Context) int {
			var n int
			if err := pool.QueryRow(ctx, `SELECT stock FROM items WHERE sku = $1`, sku).Scan(&n); err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Run("before: SELECT FOR UPDATE", func(t *testing.T) {
		left := row(t, "for-update")
		sellOut(t, func(ctx context.Context) (int, error) { return migrate.BuyForUpdate(ctx, pool, "for-update") }, left)
	})
	t.Run("before: pg_advisory_lock", func(t *testing.T) {
		left := row(t, "advisory")
		sellOut(t, func(ctx context.Context) (int, error) { return migrate.BuyAdvisoryLocked(ctx, pool, "advisory") }, left)
	})
	t.Run("after: version column", func(t *testing.T) {
		left := row(t, "versioned")
		sellOut(t, func(ctx context.Context) (int, error) { return migrate.BuyVersioned(ctx, pool, "versioned") }, left)
		var v int64
		if err := pool.QueryRow(ctx, `SELECT version FROM items WHERE sku = 'versioned'`).Scan(&v); err != nil || v != 1+units {
			t.Fatalf("version %d (%v), want %d: one per sale", v, err, 1+units)
		}
	})
	t.Run("after: pgcas", func(t *testing.T) {
		store, err := pgcas.New(pool, pgcas.Config{})
		if err != nil {
			t.Fatal(err)
		}
		if err := store.CreateTable(ctx); err != nil {
			t.Fatal(err)
		}
		sellOutStore(t, store)
	})
	t.Run("after: a missing row", func(t *testing.T) {
		if _, err := migrate.BuyVersioned(ctx, pool, "nope"); !errors.Is(err, cas.ErrNotFound) {
			t.Fatalf("BuyVersioned of a missing SKU: %v", err)
		}
	})
}
