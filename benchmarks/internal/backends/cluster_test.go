package backends

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/internal/pgtest"
	"github.com/occkit/occkit/internal/redistest"
)

// TestClusters opens each cluster as the lab does: the Redis Cluster and
// the PostgreSQL primary with its replica from the variables `make test`
// sets (failing, saying how to get them, when they are unset), etcd's
// three members in process. A store writes where writes go and a second
// client reads it; the follower store (etcd3, postgres-replica) reads the
// write once the followers caught up, and the Redis Cluster has none; the
// variables Server.Env gives a child reach the same servers; the locker
// grants a lease; Drop removes the data (on every master of the cluster,
// over which a store's keys spread); no cluster has a single address for
// a proxy.
func TestClusters(t *testing.T) {
	for _, system := range []string{RedisCluster, Etcd3, PostgresReplica} {
		t.Run(system, func(t *testing.T) {
			switch system {
			case RedisCluster:
				redistest.ClusterURL(t)
			case PostgresReplica:
				pgtest.URL(t)
				pgtest.ReplicaURL(t)
			}
			ctx := t.Context()
			srv := reach(t, system)
			if _, err := srv.Addr(); err == nil {
				t.Error("Addr: a cluster gave one address")
			}
			opts := ClientOptions{Conns: 4}
			if system == PostgresReplica {
				opts.Scope, opts.CreateScope = newScope("backends_cluster_"), true
			}
			ops := connectOwner(t, srv, opts)
			if version, durable, err := ops.Describe(ctx); err != nil || durable == "" {
				t.Fatalf("Describe: %q %q, %v", version, durable, err)
			}

			// A child's view: only the variables Server.Env gives.
			vars := map[string]string{}
			for _, kv := range srv.Env() {
				k, v, _ := strings.Cut(kv, "=")
				vars[k] = v
			}
			child, err := Env{Getenv: func(k string) string { return vars[k] }}.Reach(ctx, system)
			if err != nil {
				t.Fatalf("Reach from %v: %v", srv.Env(), err)
			}
			if child.Started() || child.URL != srv.URL || child.ReplicaURL != srv.ReplicaURL {
				t.Fatalf("a child reaches %q %q (started %v), want %q %q", child.URL, child.ReplicaURL, child.Started(), srv.URL, srv.ReplicaURL)
			}
			childOpts := ClientOptions{Scope: opts.Scope, Pinned: true, Member: 1}
			direct := connect(t, child, childOpts)
			if system == Etcd3 {
				if eps := direct.Etcd().Endpoints(); len(eps) != 1 || eps[0] != strings.Split(srv.URL, ",")[1] {
					t.Errorf("a pinned client talks to %v, want member 1 of %s", eps, srv.URL)
				}
				if eps := ops.Etcd().Endpoints(); len(eps) != 3 {
					t.Errorf("a client talks to %v, want the three members", eps)
				}
			}

			const ns = "ns_a"
			s, err := ops.CreateStore(ctx, ns)
			if err != nil {
				t.Fatal(err)
			}
			// Keys spread over a cluster's slots.
			const n = 30
			for i := range n {
				if _, err := s.CompareAndSwap(ctx, fmt.Sprintf("k%d", i), 0, []byte("v1")); err != nil {
					t.Fatal(err)
				}
			}
			seen, err := direct.Store(ns)
			if err != nil {
				t.Fatal(err)
			}
			if it, err := seen.Get(ctx, "k0"); err != nil || string(it.Value) != "v1" {
				t.Fatalf("the second client reads %q, %v; want v1", it.Value, err)
			}
			follower, err := direct.FollowerStore(ns)
			if system == RedisCluster {
				if !errors.Is(err, errors.ErrUnsupported) {
					t.Errorf("FollowerStore on the Redis Cluster: %v, want errors.ErrUnsupported", err)
				}
				if masters := mastersHolding(t, ops.RedisCluster(), ns+":"); masters < 2 {
					t.Errorf("%d keys on %d master(s): the store's keys do not spread over the slots", n, masters)
				}
			} else {
				if err != nil {
					t.Fatal(err)
				}
				if err := direct.CatchUp(ctx); err != nil {
					t.Fatal(err)
				}
				if it, err := follower.Get(ctx, "k0"); err != nil || string(it.Value) != "v1" {
					t.Fatalf("the follower store reads %q, %v; want v1", it.Value, err)
				}
			}

			lockOnce(t, direct, ns, "{g1}k0") // a key with a hash tag of its own

			if err := direct.Drop(ctx, ns); err != nil {
				t.Fatalf("Drop: %v", err)
			}
			_, err = seen.Get(ctx, "k0")
			if system == PostgresReplica {
				if err == nil {
					t.Fatal("after Drop: the table still answers")
				}
			} else if !errors.Is(err, cas.ErrNotFound) {
				t.Fatalf("after Drop: %v, want cas.ErrNotFound", err)
			}
			if system == RedisCluster {
				if masters := mastersHolding(t, ops.RedisCluster(), ns+":"); masters != 0 {
					t.Errorf("after Drop, %d master(s) hold keys under %s:", masters, ns)
				}
			}
		})
	}
}

// mastersHolding returns how many of the cluster's masters hold keys
// under prefix.
func mastersHolding(t *testing.T, cli *redis.ClusterClient, prefix string) int {
	t.Helper()
	var n atomic.Int64
	err := cli.ForEachMaster(t.Context(), func(ctx context.Context, m *redis.Client) error {
		it := m.Scan(ctx, 0, prefix+"*", 1000).Iterator()
		if it.Next(ctx) {
			n.Add(1)
		}
		return it.Err()
	})
	if err != nil {
		t.Fatal(err)
	}
	return int(n.Load())
}
