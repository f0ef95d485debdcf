package rediscas_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
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

// The examples run against the server the tests use (OCCKIT_REDIS_URL,
// redis://host:port), under a key prefix of their own that exampleRedis
// deletes at their end.

// exampleRedis connects to the server at OCCKIT_REDIS_URL and returns a
// client, a key prefix no other run uses, and a function that deletes the
// keys under the prefix and closes the client.
func exampleRedis() (cli *redis.Client, ns string, done func()) {
	url := os.Getenv("OCCKIT_REDIS_URL")
	if url == "" {
		log.Fatal("OCCKIT_REDIS_URL is not set: the examples need a Redis server (make test starts one)")
	}
	opt, err := redis.ParseURL(url)
	if err != nil {
		log.Fatal(err)
	}
	cli = redis.NewClient(opt)
	var b [8]byte
	_, _ = rand.Read(b[:])
	ns = "occkit-example-" + hex.EncodeToString(b[:]) + ":"
	return cli, ns, func() {
		ctx := context.Background()
		iter := cli.Scan(ctx, 0, ns+"*", 100).Iterator()
		for iter.Next(ctx) {
			cli.Del(ctx, iter.Val())
		}
		_ = cli.Close()
	}
}

// An optimistic counter on Redis, without WATCH/MULTI/EXEC: one script
// compares the version and writes.
func Example() {
	cli, ns, done := exampleRedis() // in an application: redis.NewClient(opt), and no ns
	defer done()
	store, err := rediscas.New(cli, rediscas.Config{Prefix: ns + "myapp:"})
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
	// Versions come from the server's clock (microseconds) and only ever
	// grow: keep one to compare, never compute with it.
	fmt.Println(n, version > 0)
	// Output: 1 true
}

// A hot key behind a Redis lease lock: the lock makes conflicts rare, the
// fenced write makes a lost lock harmless (a holder paused past the TTL
// has its late write refused with cas.ErrFenced, and hybrid.Update retries
// it with a fresh lease).
func ExampleNewLocker() {
	cli, ns, done := exampleRedis()
	defer done()
	store, err := rediscas.New(cli, rediscas.Config{Prefix: ns + "shop:"})
	if err != nil {
		log.Fatal(err)
	}
	locker, err := rediscas.NewLocker(cli, rediscas.LockerConfig{Prefix: ns + "shop-lock:", TTL: 5 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	stock := cas.NewTyped(store, cas.JSON[int]())
	errSoldOut := errors.New("sold out")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := stock.CompareAndSwap(ctx, "sku-42", 0, 10); err != nil { // 10 in stock
		log.Fatal(err)
	}
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
	// Output: left: 9
}

// Holding a lease by hand: the token goes into every fenced write, the
// lease's context ends when the lease is lost.
func ExampleLocker_Acquire() {
	cli, ns, done := exampleRedis()
	defer done()
	store, _ := rediscas.New(cli, rediscas.Config{Prefix: ns})
	locker, _ := rediscas.NewLocker(cli, rediscas.LockerConfig{Prefix: ns + "lock:"})
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
	default:
		fmt.Println("rebuilt")
	}
	// Output: rebuilt
}

// A store on a Redis Cluster (OCCKIT_REDIS_CLUSTER_URL in the examples),
// its keys spread over the slots: the keys of one commit share a hash tag,
// a commit over two slots is refused before anything is sent, and
// WaitReplicas makes each write wait for a replica.
func ExampleNew_cluster() {
	url := os.Getenv("OCCKIT_REDIS_CLUSTER_URL")
	if url == "" {
		log.Fatal("OCCKIT_REDIS_CLUSTER_URL is not set: this example needs a Redis Cluster (make test starts one)")
	}
	opt, err := redis.ParseClusterURL(url)
	if err != nil {
		log.Fatal(err)
	}
	cli := redis.NewClusterClient(opt)
	defer cli.Close()
	var b [8]byte
	_, _ = rand.Read(b[:])
	prefix := "occkit-example-" + hex.EncodeToString(b[:]) + ":" // no hash tag: keys spread over the slots

	store, err := rediscas.New(cli, rediscas.Config{Prefix: prefix, WaitReplicas: 1})
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	defer func() {
		_ = cli.ForEachMaster(context.Background(), func(ctx context.Context, m *redis.Client) error {
			iter := m.Scan(ctx, 0, prefix+"*", 100).Iterator()
			for iter.Next(ctx) {
				m.Del(ctx, iter.Val())
			}
			return iter.Err()
		})
	}()

	// An order and its line share the tag {order:7}: one slot, one commit.
	_, err = store.Commit(ctx, []cas.Op{
		cas.Put("{order:7}:head", 0, []byte("open")),
		cas.Put("{order:7}:line:1", 0, []byte("2 x tea")),
	})
	fmt.Println("commit in one slot:", err)

	// Two users' keys, tagged {user:1} and {user:2}, are in different
	// slots (10778 and 6777): they cannot commit together on a cluster.
	_, err = store.Commit(ctx, []cas.Op{
		cas.Put("{user:1}:profile", 0, []byte("a")),
		cas.Put("{user:2}:profile", 0, []byte("b")),
	})
	var cse *rediscas.CrossSlotError
	fmt.Println("commit over two slots refused:", errors.Is(err, rediscas.ErrCrossSlot), errors.As(err, &cse))
	// Output:
	// commit in one slot: <nil>
	// commit over two slots refused: true true
}
