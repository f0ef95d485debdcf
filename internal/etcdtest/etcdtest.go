// Package etcdtest starts in-process etcd servers for tests and the
// contention lab: one member, or a cluster of several for failover tests,
// each on free 127.0.0.1 ports in a temporary directory, stopped (clients
// first, so shutdown does not stall) when the test ends.
package etcdtest

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// Options configure a cluster.
type Options struct {
	// Members is the number of members (default 1).
	Members int
	// ElectionMs and TickMs are the raft timings (defaults 300 and 30: a
	// lost leader is replaced in about a third of a second).
	ElectionMs, TickMs uint
	// MaxRequestBytes and MaxTxnOps are the server's limits (0: etcd's
	// defaults, 1.5 MiB and 128).
	MaxRequestBytes, MaxTxnOps uint
}

// Cluster is a running set of in-process etcd members. Its methods are safe
// for concurrent use.
type Cluster struct {
	t       testing.TB
	dir     string
	mu      sync.Mutex
	members []*member
	clients []*clientv3.Client
}

type member struct {
	name      string
	cfg       *embed.Config
	etcd      *embed.Etcd
	clientURL string // the proxy in front of the member's client port
	proxy     *proxy
	stopped   bool
	closed    chan struct{} // closed when the member's shutdown is complete
}

// Start starts a cluster and registers its shutdown with t.Cleanup. It
// fails the test if the cluster does not elect a leader within 30 s.
func Start(t testing.TB, opts Options) *Cluster {
	t.Helper()
	// Free ports are found by binding and releasing them, so another
	// process may take one before etcd binds it: try again with new ports.
	for attempt := 1; ; attempt++ {
		c, err := start(t, opts)
		if err == nil {
			return c
		}
		if attempt == 3 || !strings.Contains(err.Error(), "address already in use") {
			t.Fatalf("etcdtest: %v", err)
		}
	}
}

func start(t testing.TB, opts Options) (*Cluster, error) {
	if opts.Members <= 0 {
		opts.Members = 1
	}
	if opts.ElectionMs == 0 {
		opts.ElectionMs = 300
	}
	if opts.TickMs == 0 {
		opts.TickMs = 30
	}
	dir, err := os.MkdirTemp("", "occkit-etcd-")
	if err != nil {
		return nil, err
	}
	c := &Cluster{t: t, dir: dir}

	var initial []string
	for i := range opts.Members {
		peer, client := freeURL(t), freeURL(t)
		name := fmt.Sprintf("m%d", i)
		cfg := embed.NewConfig()
		cfg.Name = name
		cfg.Dir = fmt.Sprintf("%s/%s", dir, name)
		cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*peer}, []url.URL{*peer}
		cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*client}, []url.URL{*client}
		cfg.ElectionMs, cfg.TickMs = opts.ElectionMs, opts.TickMs
		cfg.InitialClusterToken = "occkit-test"
		cfg.UnsafeNoFsync = true
		cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
		if opts.MaxRequestBytes > 0 {
			cfg.MaxRequestBytes = opts.MaxRequestBytes
		}
		if opts.MaxTxnOps > 0 {
			cfg.MaxTxnOps = opts.MaxTxnOps
		}
		initial = append(initial, fmt.Sprintf("%s=%s", name, peer))
		px, err := newProxy(client.Host)
		if err != nil {
			c.close()
			return nil, fmt.Errorf("proxy: %w", err)
		}
		c.members = append(c.members, &member{name: name, cfg: cfg, clientURL: "http://" + px.addr(), proxy: px, closed: make(chan struct{})})
	}
	for _, m := range c.members {
		m.cfg.InitialCluster = strings.Join(initial, ",")
	}
	// Members of a new cluster wait for each other: start them together.
	errs := make(chan error, len(c.members))
	for _, m := range c.members {
		go func() {
			e, err := embed.StartEtcd(m.cfg)
			if err == nil {
				c.mu.Lock()
				m.etcd = e
				c.mu.Unlock()
			}
			errs <- err
		}()
	}
	var startErr error
	for range c.members {
		if err := <-errs; err != nil && startErr == nil {
			startErr = fmt.Errorf("starting member: %w", err)
		}
	}
	if startErr != nil {
		c.close()
		return nil, startErr
	}
	t.Cleanup(c.close)
	for _, m := range c.members {
		select {
		case <-m.etcd.Server.ReadyNotify():
		case <-time.After(30 * time.Second):
			t.Fatalf("etcdtest: member %s not ready after 30s", m.name)
		}
	}
	c.WaitLeader(30 * time.Second)
	return c, nil
}

// freeURL returns an http URL on a free loopback port.
func freeURL(t testing.TB) *url.URL {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("etcdtest: finding a free port: %v", err)
	}
	addr := l.Addr().String()
	l.Close()
	return &url.URL{Scheme: "http", Host: addr}
}

// Endpoints returns the client URLs of the members that are running.
func (c *Cluster) Endpoints() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var eps []string
	for _, m := range c.members {
		if !m.stopped {
			eps = append(eps, m.clientURL)
		}
	}
	return eps
}

// AllEndpoints returns the client URLs of every member, stopped or not.
func (c *Cluster) AllEndpoints() []string {
	var eps []string
	for _, m := range c.members {
		eps = append(eps, m.clientURL)
	}
	return eps
}

// Client returns a client of the cluster that is closed before the servers
// stop.
func (c *Cluster) Client() *clientv3.Client {
	c.t.Helper()
	return c.ClientOf(c.AllEndpoints()...)
}

// ClientOf returns a client of the given endpoints, closed before the
// servers stop.
func (c *Cluster) ClientOf(endpoints ...string) *clientv3.Client {
	c.t.Helper()
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   endpoints,
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
	})
	if err != nil {
		c.t.Fatalf("etcdtest: client: %v", err)
	}
	c.mu.Lock()
	c.clients = append(c.clients, cli)
	c.mu.Unlock()
	return cli
}

// Leader returns the index of the current leader, or -1 if the running
// members do not agree on one.
func (c *Cluster) Leader() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	lead := -1
	for _, m := range c.members {
		if m.stopped {
			continue
		}
		id := m.etcd.Server.Leader()
		if id == 0 {
			return -1
		}
		idx := -1
		for j, o := range c.members {
			if !o.stopped && o.etcd.Server.MemberID() == id {
				idx = j
			}
		}
		if idx < 0 || (lead >= 0 && idx != lead) {
			return -1
		}
		lead = idx
	}
	return lead
}

// WaitLeader waits until the running members agree on a leader and
// returns its index; it fails the test after timeout.
func (c *Cluster) WaitLeader(timeout time.Duration) int {
	c.t.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if l := c.Leader(); l >= 0 {
			return l
		}
		time.Sleep(10 * time.Millisecond)
	}
	c.t.Fatalf("etcdtest: no leader after %v", timeout)
	return -1
}

// HardStop stops member i abruptly, without handing over leadership: the
// crash of a leader, as the rest of the cluster sees it.
func (c *Cluster) HardStop(i int) {
	c.mu.Lock()
	m := c.members[i]
	if m.stopped {
		c.mu.Unlock()
		return
	}
	m.stopped = true
	c.mu.Unlock()
	// Cut the clients off first, as a crash would, then stop raft without
	// handing leadership over. The embedded server's own shutdown can take
	// seconds; it finishes in the background.
	m.proxy.cut()
	m.etcd.Server.HardStop()
	go func() {
		m.etcd.Close()
		close(m.closed)
	}()
}

// close stops clients, then members.
func (c *Cluster) close() {
	c.mu.Lock()
	clients := c.clients
	c.clients = nil
	c.mu.Unlock()
	for _, cli := range clients {
		cli.Close()
	}
	for _, m := range c.members {
		c.mu.Lock()
		stopped := m.stopped
		m.stopped = true
		c.mu.Unlock()
		if !stopped {
			m.proxy.cut()
			if m.etcd != nil {
				m.etcd.Close()
			}
			close(m.closed)
		}
	}
	for _, m := range c.members {
		<-m.closed
	}
	os.RemoveAll(c.dir)
}

// Ctx returns a context for a test step, cancelled after d.
func Ctx(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}
