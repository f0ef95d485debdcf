package etcdcas_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/occkit/occkit/adapters/etcdcas"
	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/internal/cachebench"
	"github.com/occkit/occkit/internal/etcdtest"
	"github.com/occkit/occkit/occ"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
)

// countingClient returns a client that counts its unary RPCs (round trips).
func countingClient(t testing.TB, c *etcdtest.Cluster) (*clientv3.Client, *atomic.Int64) {
	t.Helper()
	var n atomic.Int64
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   c.Endpoints(),
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
		DialOptions: []grpc.DialOption{grpc.WithChainUnaryInterceptor(
			func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
				n.Add(1)
				return invoker(ctx, method, req, reply, cc, opts...)
			})},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() }) // runs before the cluster's cleanup
	return cli, &n
}

// TestRoundTrips counts round trips per occ.Update: uncached = read +
// write; with a warm cache = the write alone; a conflict costs one more
// write and no read, with or without the cache, because the refused
// transaction returns the current item.
func TestRoundTrips(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.Options{})
	cli, rts := countingClient(t, c)
	other := c.Client()
	store := newStore(t, cli, etcdcas.Config{})
	counters := cas.NewTyped(store, cas.JSON[int]())
	cache := occ.NewCache(store, 100)
	ctx := etcdtest.Ctx(t, 30*time.Second)
	incr := func(n int, _ bool) (int, error) { return n + 1, nil }
	measure := func(name string, want int64, opts ...occ.Option) {
		t.Helper()
		before := rts.Load()
		if _, _, err := occ.Update(ctx, counters, "k", incr, opts...); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if got := rts.Load() - before; got != want {
			t.Errorf("%s: %d round trips, want %d", name, got, want)
		} else {
			t.Logf("%s: %d round trips", name, got)
		}
	}
	measure("uncached create", 2)
	measure("uncached update", 2)
	measure("cold cache", 2, occ.WithCache(cache))
	measure("warm cache", 1, occ.WithCache(cache))
	measure("warm cache again", 1, occ.WithCache(cache))

	// Another process writes the key: the cached version is stale.
	foreignWrite := func() {
		resp, err := other.Get(ctx, store.DataKey("k"))
		if err != nil {
			t.Fatal(err)
		}
		kv := resp.Kvs[0]
		r, err := other.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(store.DataKey("k")), "=", kv.ModRevision)).
			Then(clientv3.OpPut(store.DataKey("k"), string(kv.Value))).Commit()
		if err != nil || !r.Succeeded {
			t.Fatalf("foreign write: %v", err)
		}
	}
	foreignWrite()
	measure("stale cache (refused write + write, no read)", 2, occ.WithCache(cache), occ.WithBackOff(&backoff.ZeroBackOff{}))

	// Uncached, with another process writing between the read and the
	// write: read + refused write + write, and no second read.
	first := true
	before := rts.Load()
	_, _, err := occ.Update(ctx, counters, "k", func(n int, _ bool) (int, error) {
		if first {
			first = false
			foreignWrite()
		}
		return n + 1, nil
	}, occ.WithBackOff(&backoff.ZeroBackOff{}))
	if err != nil {
		t.Fatal(err)
	}
	if got := rts.Load() - before; got != 3 {
		t.Errorf("uncached update with a conflict: %d round trips, want 3 (read, refused write, write)", got)
	} else {
		t.Logf("uncached update with a conflict: %d round trips", got)
	}
}

// BenchmarkCacheForeignWriters measures what the version cache costs when
// another process writes the same keys: 16 workers with a shared cache
// increment counters on 1000 keys, alone and then with 8 more workers that
// stand for a second process (their own client, no cache). It reports the
// round trips per update of the cached workers and their throughput.
//
//	go test -run '^$' -bench CacheForeignWriters -benchtime 8000x -count 3 ./adapters/etcdcas/
func BenchmarkCacheForeignWriters(b *testing.B) {
	for _, foreign := range []int{0, 8} {
		b.Run(fmt.Sprintf("foreign=%d", foreign), func(b *testing.B) {
			c := etcdtest.Start(b, etcdtest.Options{})
			cli, rts := countingClient(b, c)
			store := newStore(b, cli, etcdcas.Config{})
			other, err := etcdcas.New(c.Client(), etcdcas.Config{Prefix: store.Prefix()})
			if err != nil {
				b.Fatal(err)
			}
			cachebench.ForeignWriters(b, store, other, 1000, foreign, rts.Load)
		})
	}
}
