// Package servers starts the throwaway servers of the contention lab and
// of the fault-injection runs (benchmarks/cmd/occfaults) outside of tests:
// an in-process etcd member or cluster (whose leader can be crashed), and
// PostgreSQL or Redis through the repository's scripts/servers/<name>.sh
// run standalone (which can be restarted with their data). The etcd
// servers are internal/etcdtest's, which the tests use too.
package servers

import (
	"context"
	"fmt"

	"github.com/occkit/occkit/internal/etcdtest"
)

// Etcd is a running in-process etcd member.
type Etcd struct {
	// Endpoint is the member's client URL (http://127.0.0.1:port).
	Endpoint string
	// Version is the embedded server's version.
	Version string
	c       *etcdtest.Cluster
}

// StartEtcd starts a one-member etcd in process, on free 127.0.0.1 ports,
// with its data in a temporary directory and fsync off (UnsafeNoFsync:
// throwaway data, and the same durability as the lab's PostgreSQL with
// fsync=off), etcd's default raft timings, and clients connecting to its
// port directly. It waits until the member serves.
func StartEtcd(ctx context.Context) (*Etcd, error) {
	c, err := etcdtest.StartCluster(ctx, etcdtest.Options{TickMs: 100, ElectionMs: 1000, NoProxy: true})
	if err != nil {
		return nil, err
	}
	return &Etcd{Endpoint: c.AllEndpoints()[0], Version: etcdtest.Version(), c: c}, nil
}

// Close stops the member and removes its data. Close its clients first,
// or the shutdown waits for them.
func (e *Etcd) Close() { e.c.Close() }

// EtcdCluster is a running in-process etcd cluster of several members, for
// leader-loss faults: each member's client port sits behind a TCP proxy,
// so that a member stopped with HardStop is gone for its clients at once,
// as a crashed host would be. Its methods are safe for concurrent use.
type EtcdCluster = etcdtest.Cluster

// StartEtcdCluster starts n members (n >= 1) on free 127.0.0.1 ports with
// their data in a temporary directory and fsync off, with fast raft
// timings (ticks of 50 ms, elections after 500 ms: a lost leader is
// replaced within about a second), and waits until they serve and agree
// on a leader. The caller must Close it.
func StartEtcdCluster(ctx context.Context, n int) (*EtcdCluster, error) {
	if n < 1 {
		return nil, fmt.Errorf("etcd cluster: %d members", n)
	}
	return etcdtest.StartCluster(ctx, etcdtest.Options{Members: n, TickMs: 50, ElectionMs: 500})
}

// ErrNoLeader reports that the running members of an EtcdCluster did not
// agree on a leader in time.
var ErrNoLeader = etcdtest.ErrNoLeader
