package lab

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/occkit/occkit/adapters/etcdcas"
	"github.com/occkit/occkit/adapters/pgcas"
	"github.com/occkit/occkit/adapters/rediscas"
	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/internal/pgtest"
	"github.com/occkit/occkit/internal/redistest"
	"github.com/occkit/occkit/occ"
)

// clusterCell is a cell of the clusters' smoke tests.
type clusterCell struct {
	strategy, workload string
	keys, procs        int
}

// runClusterCells runs cells of ops operations on backend: every
// operation must commit or be declined, none fail, and the invariant
// must hold.
func runClusterCells(t *testing.T, l *Lab, backend string, ops int64, cells []clusterCell) {
	t.Helper()
	for _, c := range cells {
		name := c.strategy + "/" + c.workload
		if c.procs > 1 {
			name += "/procs"
		}
		t.Run(name, func(t *testing.T) {
			r := runCell(t, l, Cell{Backend: backend, Strategy: c.strategy, Workload: c.workload, Workers: 4, Keys: c.keys, Ops: ops, Seed: 29, MaxAttempts: 1000, Procs: c.procs})
			if !r.InvariantOK || r.TotalFailedOps != 0 || r.Ops+r.DeclinedOps != ops {
				t.Errorf("invariant %v %s; %d committed, %d declined, %d failed (%s)", r.InvariantOK, r.Invariant, r.Ops, r.DeclinedOps, r.TotalFailedOps, r.Error)
			}
		})
	}
}

// followerStore returns the follower store of backend's client.
func followerStore(t *testing.T, l *Lab, backend string) cas.Store {
	t.Helper()
	be, _ := l.backend(backend)
	s, err := be.FollowerStore("any")
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestRedisClusterSmoke runs small cells on the Redis Cluster named by
// OCCKIT_REDIS_CLUSTER_URL (`make test` starts one with
// scripts/servers/redis-cluster.sh): it fails, saying how to get one,
// when the variable is unset. Transfers run over four groups of accounts
// (40 keys): every transfer commits within its group's hash slot. A
// commit across slots is refused with rediscas's typed error, also
// through occ.Txn, which does not retry it.
func TestRedisClusterSmoke(t *testing.T) {
	redistest.ClusterURL(t) // fails loudly without a cluster
	l := openLab(t, "redis-cluster")
	runClusterCells(t, l, "redis-cluster", 120, []clusterCell{
		{"occ", "counter", 8, 1}, {"occ-cached", "inventory", 8, 1}, {"occ-combine", "counter", 8, 1},
		{"adaptive", "inventory", 8, 1}, {"hybrid", "counter", 8, 1}, {"lock-redis", "counter", 8, 1},
		{"occ-txn", "transfer", 40, 1}, {"occ-cached", "transfer", 40, 1}, {"lock-redis", "transfer", 40, 1},
		{"occ-cached", "transfer", 40, 2},
	})

	ctx := t.Context()
	be, _ := l.backend("redis-cluster")
	rs := be.RedisCluster()
	if rs == nil {
		t.Fatal("the redis-cluster backend lends no Redis Cluster client")
	}
	// Two groups' tags in different slots: a transfer between them would
	// cross slots.
	ks := newKeySpace(be.Spec().KeyGroup, builtinWorkloads[2], 40)
	a, b := ks.names[0], ks.names[len(ks.names)-1]
	slotA, errA := rs.ClusterKeySlot(ctx, a).Result()
	slotB, errB := rs.ClusterKeySlot(ctx, b).Result()
	if err := errors.Join(errA, errB); err != nil {
		t.Fatal(err)
	}
	if slotA == slotB {
		t.Fatalf("keys %s and %s share slot %d: pick keys of other groups", a, b, slotA)
	}
	ns := l.namespace()
	store, err := be.CreateStore(ctx, ns)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = be.Drop(context.Background(), ns) })
	_, err = store.(cas.Committer).Commit(ctx, []cas.Op{cas.Put(a, 0, []byte("1")), cas.Put(b, 0, []byte("1"))})
	var cs *rediscas.CrossSlotError
	if !errors.Is(err, rediscas.ErrCrossSlot) || !errors.As(err, &cs) {
		t.Fatalf("a commit across slots: %v, want a *rediscas.CrossSlotError", err)
	}
	attempts := 0
	err = occ.Txn(ctx, store, func(tx *occ.Tx) error {
		attempts++
		tx.Put(a, []byte("1"))
		tx.Put(b, []byte("1"))
		return nil
	}, occ.WithRetryable(be.Spec().Retryable))
	if !errors.Is(err, rediscas.ErrCrossSlot) || attempts != 1 {
		t.Fatalf("occ.Txn across slots: %v after %d attempts, want rediscas.ErrCrossSlot after 1", err, attempts)
	}
	if _, err := store.Get(ctx, a); !errors.Is(err, cas.ErrNotFound) {
		t.Fatalf("after the refused commits, %s: %v, want cas.ErrNotFound", a, err)
	}
}

// TestEtcd3Smoke runs small cells on three etcd members in process, the
// follower reads beside the linearizable ones, and across two processes
// (each child's client pinned to one member).
func TestEtcd3Smoke(t *testing.T) {
	l := openLab(t, "etcd3")
	// Fewer operations: three members under the race detector take
	// milliseconds a write, an etcd mutex several.
	runClusterCells(t, l, "etcd3", 60, []clusterCell{
		{"occ", "counter", 8, 1}, {"occ-follower-reads", "counter", 8, 1}, {"occ-cached", "inventory", 8, 1},
		{"occ-combine", "counter", 8, 1}, {"adaptive", "inventory", 8, 1}, {"lock-etcd-mutex", "counter", 8, 1},
		{"occ-txn", "transfer", 8, 1}, {"occ-follower-reads", "transfer", 8, 1}, {"lock-etcd-mutex", "transfer", 8, 1},
		{"occ-follower-reads", "counter", 8, 2},
	})
	s := followerStore(t, l, "etcd3")
	if _, ok := s.(*etcdcas.Store); !ok {
		t.Fatalf("etcd3's follower store is %T", s)
	}
	if info := l.Infos()[0]; !strings.Contains(info.Server, "three members") || !strings.Contains(info.Durability, "every member") {
		t.Errorf("etcd3 described as %+v", info)
	}
}

// TestPostgresReplicaSmoke runs small cells on a PostgreSQL primary and
// its streaming replica (OCCKIT_PG_URL and OCCKIT_PG_REPLICA_URL, which
// `make test` sets): it fails, saying how to get them, when they are
// unset. occ-follower-reads reads from the replica; its stale reads cost
// conflicts, never updates.
func TestPostgresReplicaSmoke(t *testing.T) {
	pgtest.URL(t)
	pgtest.ReplicaURL(t) // fails loudly without a replica
	l := openLab(t, "postgres-replica")
	runClusterCells(t, l, "postgres-replica", 120, []clusterCell{
		{"occ", "counter", 8, 1}, {"occ-follower-reads", "counter", 8, 1}, {"occ-follower-reads", "inventory", 8, 1},
		{"occ-cached", "inventory", 8, 1}, {"occ-combine", "counter", 8, 1}, {"adaptive", "counter", 8, 1},
		{"lock-pg-for-update", "counter", 8, 1}, {"lock-pg-advisory", "counter", 8, 1},
		{"occ-txn", "transfer", 8, 1}, {"occ-follower-reads", "transfer", 8, 1}, {"lock-pg-for-update", "transfer", 8, 1},
		{"occ-follower-reads", "counter", 8, 2},
	})
	s := followerStore(t, l, "postgres-replica")
	if ps, ok := s.(*pgcas.Store); !ok || ps.ReadPool() == nil || ps.ReadPool() == ps.Pool() {
		t.Fatalf("postgres-replica's follower store %T does not read from a pool of its own", s)
	}
	if info := l.Infos()[0]; !strings.Contains(info.Server, "streaming hot standby") {
		t.Errorf("postgres-replica described as %+v", info)
	}
}

// TestFollowerReadsElsewhere: occ-follower-reads is not applicable on a
// backend without followers, and the default grid runs it on the two
// backends that have them.
func TestFollowerReadsElsewhere(t *testing.T) {
	l := openIsolatedLab(t, "memory")
	wantNotApplicable(t, l, Cell{Backend: "memory", Strategy: "occ-follower-reads", Workload: "counter", Workers: 1, Keys: 1, Ops: 1})
	spec, _ := lookupStrategy("occ-follower-reads")
	for _, b := range Backends() {
		want := b == "etcd3" || b == "postgres-replica"
		if got := spec.DefaultOn(b, false); got != want {
			t.Errorf("occ-follower-reads default on %s: %v, want %v", b, got, want)
		}
	}
}

// TestKeySpaceGroups: on a backend whose commits keep to a group, a
// transfer's keys carry their group's hash tag and an operation picks
// them within one group (the last group takes the remainder); single-key
// workloads and other backends keep plain names.
func TestKeySpaceGroups(t *testing.T) {
	const grouped, plain = 10, 0
	counter, transfer := builtinWorkloads[0], builtinWorkloads[2]
	if ks := newKeySpace(grouped, counter, 25); ks.group != 0 || ks.names[24] != "k24" {
		t.Errorf("counter on a grouped backend: group %d, names %v", ks.group, ks.names)
	}
	if ks := newKeySpace(plain, transfer, 25); ks.group != 0 || ks.names[24] != "k24" {
		t.Errorf("transfer on a plain backend: group %d, names %v", ks.group, ks.names)
	}
	ks := newKeySpace(grouped, transfer, 25)
	// 25 keys in groups of 10: {g0} 0–9, {g1} 10–24.
	if ks.names[0] != "{g0}k0" || ks.names[9] != "{g0}k9" || ks.names[10] != "{g1}k10" || ks.names[24] != "{g1}k24" {
		t.Fatalf("names %v", ks.names)
	}
	z, err := newZipf(25, 0.99)
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(3, 0))
	buf := make([]string, 2)
	seen := map[string]bool{}
	for range 5000 {
		keys := ks.pick(r, z, buf)
		tag := func(k string) string { return k[:strings.IndexByte(k, '}')+1] }
		if keys[0] == keys[1] || tag(keys[0]) != tag(keys[1]) {
			t.Fatalf("picked %v: not two keys of one group", keys)
		}
		seen[keys[0]], seen[keys[1]] = true, true
	}
	if len(seen) != 25 {
		t.Errorf("%d of 25 keys picked in 5000 operations", len(seen))
	}
	// Two keys: one group of both.
	if ks := newKeySpace(grouped, transfer, 2); !slices.Equal(ks.names, []string{"{g0}k0", "{g0}k1"}) {
		t.Errorf("2 keys: %v", ks.names)
	}
}

// TestClusterGoalChecks: the clusters' goals judge the named pairs at the
// low point, on their own backend, and the replica's only with four
// processes.
func TestClusterGoalChecks(t *testing.T) {
	cell := func(backend, strategy string, ops float64, procs int) Result {
		return Result{Backend: backend, Workload: "counter", Strategy: strategy, Workers: 8, Keys: 1000, Throughput: ops, InvariantOK: true, Procs: procs, WorkersCommitted: 8}
	}
	results := []Result{
		cell("etcd3", "occ", 1000, 1), cell("etcd3", "occ-follower-reads", 1400, 1),
		cell("etcd3", "occ-cached", 2900, 1), cell("etcd3", "lock-etcd-mutex", 1000, 1),
		cell("redis-cluster", "occ-cached", 31000, 1), cell("redis-cluster", "lock-redis", 10000, 1),
		cell("postgres-replica", "occ", 1000, 4), cell("postgres-replica", "occ-follower-reads", 1250, 4),
		// One process: no replica goal.
		cell("postgres-replica", "occ", 1000, 1), cell("postgres-replica", "occ-follower-reads", 500, 1),
		// Another backend: no cluster goal.
		cell("etcd", "occ", 1000, 1), cell("etcd", "occ-cached", 1000, 1), cell("etcd", "lock-etcd-mutex", 1000, 1),
	}
	want := map[string]string{
		goalFollowerEtcd + "|etcd3|1":               goalMet,
		goalCachedEtcd3 + "|etcd3|1":                goalNotMet,
		goalCachedRedisCluster + "|redis-cluster|1": goalMet,
		goalReplicaPG + "|postgres-replica|4":       goalMet,
	}
	got := map[string]string{}
	for _, c := range checkGoals(results) {
		switch c.Goal {
		case goalFollowerEtcd, goalCachedEtcd3, goalCachedRedisCluster, goalReplicaPG:
			procs := "1"
			if c.Setup == "4 processes" {
				procs = "4"
			}
			got[c.Goal+"|"+c.Backend+"|"+procs] = c.Status
		}
	}
	for k, w := range want {
		if got[k] != w {
			t.Errorf("%s: %q, want %q", k, got[k], w)
		}
	}
	if len(got) != len(want) {
		t.Errorf("checks %v, want only %v", got, want)
	}
}
