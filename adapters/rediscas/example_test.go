package rediscas_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/occkit/occkit/adapters/rediscas"
	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/hybrid"
	"github.com/occkit/occkit/occ"
	"github.com/redis/go-redis/v9"
)

// An optimistic counter on Redis, without WATCH/MULTI/EXEC: one script
// compares the version and writes. The server comes from OCCKIT_REDIS_URL
// (redis://host:port); this example is compiled, not run, by go test.
func Example() {
	opt, err := redis.ParseURL(os.Getenv("OCCKIT_REDIS_URL"))
	if err != nil {
		log.Fatal(err)
	}
	cli := redis.NewClient(opt)
	defer cli.Close()
	store, err := rediscas.New(cli, rediscas.Config{Prefix: "myapp:"})
	if err != nil {
		log.Fatal(err)
	}
	counters := cas.NewTyped(store, cas.JSON[int]())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	n, version, err := occ.Update(ctx, counters, "visits", func(n int, _ bool) (int, error) {
		return n + 1, nil
	}, occ.WithRetryable(rediscas.Retryable))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(n, version)
}

// A hot key behind a Redis lease lock: the lock makes conflicts rare, the
// fenced write makes a lost lock harmless (a holder paused past the TTL
// has its late write refused with cas.ErrFenced, and hybrid.Update retries
// it with a fresh lease). Compiled, not run, by go test.
func ExampleNewLocker() {
	opt, err := redis.ParseURL(os.Getenv("OCCKIT_REDIS_URL"))
	if err != nil {
		log.Fatal(err)
	}
	cli := redis.NewClient(opt)
	defer cli.Close()
	store, err := rediscas.New(cli, rediscas.Config{Prefix: "shop:"})
	if err != nil {
		log.Fatal(err)
	}
	locker, err := rediscas.NewLocker(cli, rediscas.LockerConfig{Prefix: "shop-lock:", TTL: 5 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	stock := cas.NewTyped(store, cas.JSON[int]())
	errSoldOut := errors.New("sold out")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	left, _, err := hybrid.Update(ctx, locker, stock, "sku-42", func(n int, _ bool) (int, error) {
		if n == 0 {
			return 0, errSoldOut
		}
		return n - 1, nil
	}, occ.WithRetryable(rediscas.Retryable))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("left:", left)
}

// Holding a lease by hand: the token goes into every fenced write, the
// lease's context ends when the lease is lost. Compiled, not run.
func ExampleLocker_Acquire() {
	opt, err := redis.ParseURL(os.Getenv("OCCKIT_REDIS_URL"))
	if err != nil {
		log.Fatal(err)
	}
	cli := redis.NewClient(opt)
	defer cli.Close()
	store, _ := rediscas.New(cli, rediscas.Config{})
	locker, _ := rediscas.NewLocker(cli, rediscas.LockerConfig{})
	ctx := context.Background()
	lease, err := locker.Acquire(ctx, "report")
	if err != nil {
		log.Fatal(err)
	}
	defer lease.Release(ctx)
	it, err := store.Get(lease.Context(), "report")
	if err != nil && !errors.Is(err, cas.ErrNotFound) {
		log.Fatal(err)
	}
	_, err = store.CompareAndSwapFenced(lease.Context(), "report", it.Version, lease.Token(), []byte("rebuilt"))
	switch {
	case errors.Is(err, cas.ErrFenced):
		fmt.Println("lost the lease; a newer holder wrote")
	case err != nil:
		log.Fatal(err)
	}
}
