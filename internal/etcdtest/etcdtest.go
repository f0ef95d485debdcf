// Package etcdtest starts in-process etcd servers for tests: one member,
// or a cluster of several for failover (internal/servers' etcd cluster),
// each on free 127.0.0.1 ports with its data in a temporary directory and
// fsync off (throwaway data).
//
// Start fails the test if the cluster does not come up and stops it
// (clients first, so that the shutdown does not stall) when the test
// ends:
//
//	c := etcdtest.Start(t, etcdtest.Options{Members: 3})
//	cli := c.Client()
//	...
//	c.HardStop(c.WaitLeader(10 * time.Second)) // the leader crashes
//
// Programs use servers.StartEtcdCluster, which returns an error instead
// and does not link package testing.
package etcdtest

import (
	"context"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"

	"github.com/occkit/occkit/internal/servers"
)

// VerifyTestMain runs m's tests, then fails if goroutines leaked
// (goleak), for the TestMain of a package whose tests run embedded etcd.
// It ignores the HTTP keep-alive connections of etcd's raft peer
// transport, which outlive a member's shutdown (a hard-stopped member's
// stay open in the surviving members): occkit uses no net/http, so those
// goroutines are etcd's. opts are further goleak options.
func VerifyTestMain(m *testing.M, opts ...goleak.Option) {
	goleak.VerifyTestMain(m, append([]goleak.Option{
		goleak.IgnoreAnyFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreAnyFunction("net/http.(*persistConn).writeLoop"),
		goleak.IgnoreAnyFunction("net/http.(*conn).serve"),
		goleak.IgnoreAnyFunction("net/http.(*connReader).backgroundRead"),
	}, opts...)...)
}

// Options configure a cluster (servers.EtcdOptions). The zero value is one
// member with fast raft timings behind a proxy.
type Options = servers.EtcdOptions

// Version returns the embedded etcd server's version.
func Version() string { return servers.EtcdVersion() }

// Cluster is a running set of in-process etcd members started for a test;
// the methods it adds fail the test instead of returning an error. Its
// methods are safe for concurrent use.
type Cluster struct {
	*servers.EtcdCluster
	t testing.TB
}

// Start starts a cluster for the test t and registers its Close with
// t.Cleanup. It fails the test if the cluster does not serve and elect a
// leader within 30 s.
func Start(t testing.TB, opts Options) *Cluster {
	t.Helper()
	c, err := servers.StartEtcdCluster(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return &Cluster{EtcdCluster: c, t: t}
}

// Client returns a client of every member that is closed before the
// servers stop, or fails the test.
func (c *Cluster) Client() *clientv3.Client {
	c.t.Helper()
	return c.ClientOf(c.AllEndpoints()...)
}

// ClientOf returns a client of the given endpoints, closed before the
// servers stop, or fails the test.
func (c *Cluster) ClientOf(endpoints ...string) *clientv3.Client {
	c.t.Helper()
	cli, err := c.NewClient(endpoints...)
	if err != nil {
		c.t.Fatal(err)
	}
	return cli
}

// WaitLeader waits until the running members agree on a leader and
// returns its index; it fails the test after timeout.
func (c *Cluster) WaitLeader(timeout time.Duration) int {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	l, err := c.AwaitLeader(ctx)
	if err != nil {
		c.t.Fatal(err)
	}
	return l
}

// Ctx returns a context for a test step, cancelled after d.
func Ctx(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}
