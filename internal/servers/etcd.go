// Package servers starts the throwaway servers of occkit's tests, the
// contention lab (benchmarks/cmd/occbench) and the fault-injection runs
// (benchmarks/cmd/occfaults), without package testing, so that the
// programs do not link it: in-process etcd members and clusters (whose
// leader can be crashed, and whose members can be partitioned from each
// other), a standalone ZooKeeper from Debian's package,
// minidyn's DynamoDB-compatible server in process and SDK clients for any
// such server, and PostgreSQL or Redis through the repository's
// scripts/servers/<name>.sh run standalone (which can be restarted with
// their data).
//
// The test helpers (internal/etcdtest, internal/zktest,
// internal/dynamotest) wrap these with a testing.TB that fails the test
// and cleans up when it ends; programs call these and clean up themselves.
package servers

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/version"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"

	"github.com/occkit/occkit/internal/faultproxy"
)

// EtcdOptions configure an etcd cluster. The zero value is one member
// with fast raft timings behind a proxy.
type EtcdOptions struct {
	// Members is the number of members (default 1).
	Members int
	// ElectionMs and TickMs are the raft timings (defaults 300 and 30: a
	// lost leader is replaced in about a third of a second).
	ElectionMs, TickMs uint
	// MaxRequestBytes and MaxTxnOps are the server's limits (0: etcd's
	// defaults, 1.5 MiB and 128).
	MaxRequestBytes, MaxTxnOps uint
	// NoProxy makes the client URLs the members' own ports. By default
	// each member's client port sits behind a TCP proxy
	// (internal/faultproxy), so that HardStop cuts the member's clients
	// off at once, as a crashed host would; without it, a hard-stopped
	// member's clients notice when its shutdown closes their connections.
	// The lab sets it to spare every request a hop.
	NoProxy bool
}

// startTimeout bounds the wait for the members to serve and agree on a
// leader.
const startTimeout = 30 * time.Second

// ErrNoLeader reports that the running members did not agree on a leader
// in time.
var ErrNoLeader = errors.New("etcd: no leader")

// EtcdVersion returns the embedded etcd server's version.
func EtcdVersion() string { return version.Version }

// EtcdCluster is a running set of in-process etcd members. Its methods are
// safe for concurrent use.
type EtcdCluster struct {
	dir     string
	mu      sync.Mutex
	members []*member
	clients []*clientv3.Client
}

type member struct {
	name      string
	cfg       *embed.Config
	etcd      *embed.Etcd
	clientURL string            // the proxy in front of the member's client port, or the port
	proxy     *faultproxy.Proxy // nil with EtcdOptions.NoProxy
	stopped   bool
	closed    chan struct{} // closed when the member's shutdown is complete
}

// StartEtcdCluster starts a cluster and waits until its members serve and
// agree on a leader (30 s at most, or until ctx ends). The caller must
// Close it.
func StartEtcdCluster(ctx context.Context, opts EtcdOptions) (*EtcdCluster, error) {
	// Free ports are found by binding and releasing them, so another
	// process may take one before etcd binds it: try again with new ports.
	for attempt := 1; ; attempt++ {
		c, err := startEtcd(ctx, opts)
		if err == nil {
			return c, nil
		}
		if attempt == 3 || !strings.Contains(err.Error(), "address already in use") {
			return nil, fmt.Errorf("etcd: %w", err)
		}
	}
}

func startEtcd(ctx context.Context, opts EtcdOptions) (*EtcdCluster, error) {
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
	c := &EtcdCluster{dir: dir}

	var initial []string
	for i := range opts.Members {
		peer, err := freeURL()
		if err != nil {
			c.Close()
			return nil, err
		}
		client, err := freeURL()
		if err != nil {
			c.Close()
			return nil, err
		}
		name := fmt.Sprintf("m%d", i)
		cfg := embed.NewConfig()
		cfg.Name = name
		cfg.Dir = filepath.Join(dir, name)
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
		m := &member{name: name, cfg: cfg, clientURL: client.String(), closed: make(chan struct{})}
		if !opts.NoProxy {
			if m.proxy, err = faultproxy.New(client.Host); err != nil {
				c.Close()
				return nil, fmt.Errorf("proxy: %w", err)
			}
			m.clientURL = "http://" + m.proxy.Addr()
		}
		c.members = append(c.members, m)
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
		c.Close()
		return nil, startErr
	}
	wctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	for _, m := range c.members {
		select {
		case <-m.etcd.Server.ReadyNotify():
		case err := <-m.etcd.Err():
			c.Close()
			return nil, fmt.Errorf("member %s: %w", m.name, err)
		case <-wctx.Done():
			c.Close()
			return nil, fmt.Errorf("member %s not ready: %w", m.name, wctx.Err())
		}
	}
	if _, err := c.AwaitLeader(wctx); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// freeURL returns an http URL on a free loopback port.
func freeURL() (*url.URL, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("finding a free port: %w", err)
	}
	addr := l.Addr().String()
	l.Close()
	return &url.URL{Scheme: "http", Host: addr}, nil
}

// Endpoints returns the client URLs of the members that are running.
func (c *EtcdCluster) Endpoints() []string {
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

// AllEndpoints returns the client URLs of every member, stopped or not (a
// stopped member's refuses connections).
func (c *EtcdCluster) AllEndpoints() []string {
	var eps []string
	for _, m := range c.members {
		eps = append(eps, m.clientURL)
	}
	return eps
}

// NewClient returns a client of the given endpoints (default every
// member's), which Close closes before it stops the members.
func (c *EtcdCluster) NewClient(endpoints ...string) (*clientv3.Client, error) {
	if len(endpoints) == 0 {
		endpoints = c.AllEndpoints()
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   endpoints,
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
	})
	if err != nil {
		return nil, fmt.Errorf("etcd: client: %w", err)
	}
	c.mu.Lock()
	c.clients = append(c.clients, cli)
	c.mu.Unlock()
	return cli, nil
}

// Leader returns the index of the current leader, or -1 if the running
// members do not agree on one.
func (c *EtcdCluster) Leader() int {
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

// AwaitLeader waits until the running members agree on a leader and
// returns its index. When ctx ends first, the error matches ErrNoLeader
// and ctx.Err().
func (c *EtcdCluster) AwaitLeader(ctx context.Context) (int, error) {
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for {
		if l := c.Leader(); l >= 0 {
			return l, nil
		}
		select {
		case <-ctx.Done():
			return -1, fmt.Errorf("%w: %w", ErrNoLeader, ctx.Err())
		case <-t.C:
		}
	}
}

// HardStop stops member i abruptly, without handing over leadership: the
// crash of a leader, as the rest of the cluster sees it. Its clients are
// cut off at once (unless Options.NoProxy), and its raft node stops; the
// member's own shutdown finishes in the background.
func (c *EtcdCluster) HardStop(i int) {
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
	// seconds.
	if m.proxy != nil {
		m.proxy.Close()
	}
	m.etcd.Server.HardStop()
	go func() {
		m.etcd.Close()
		close(m.closed)
	}()
}

// Isolate cuts member i off from the other members, both ways, as a
// network partition between it and the rest would: each side's raft
// transport drops every message it would send to the other (etcd's own
// peer cut, EtcdServer.CutPeer, as etcd's integration tests partition a
// cluster). Member i keeps serving its client port: it answers
// serializable reads from its state as it was, while its writes and
// linearizable reads fail once it sees no leader (after an election
// timeout; if it led, the others elect another leader). Heal ends it.
// Stopped members are left alone.
func (c *EtcdCluster) Isolate(i int) { c.cut(i, true) }

// Heal ends Isolate(i): the members exchange messages again, and member
// i catches up with the log it missed.
func (c *EtcdCluster) Heal(i int) { c.cut(i, false) }

func (c *EtcdCluster) cut(i int, cut bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := c.members[i]
	if m.stopped {
		return
	}
	for j, o := range c.members {
		if j == i || o.stopped {
			continue
		}
		if cut {
			m.etcd.Server.CutPeer(o.etcd.Server.MemberID())
			o.etcd.Server.CutPeer(m.etcd.Server.MemberID())
		} else {
			m.etcd.Server.MendPeer(o.etcd.Server.MemberID())
			o.etcd.Server.MendPeer(m.etcd.Server.MemberID())
		}
	}
}

// Close closes the clients made by NewClient, stops
// every member, waits for their shutdown and removes their data. Close
// the other clients first, or the shutdown waits for them. Calling Close
// again does nothing.
func (c *EtcdCluster) Close() {
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
		e := m.etcd
		c.mu.Unlock()
		if !stopped {
			if m.proxy != nil {
				m.proxy.Close()
			}
			if e != nil {
				e.Close()
			}
			close(m.closed)
		}
	}
	for _, m := range c.members {
		<-m.closed
	}
	os.RemoveAll(c.dir)
}

// Etcd is a running one-member etcd in process, as the lab runs it.
type Etcd struct {
	// Endpoint is the member's client URL (http://127.0.0.1:port).
	Endpoint string
	// Version is the embedded server's version.
	Version string
	c       *EtcdCluster
}

// StartEtcd starts a one-member etcd in process, on free 127.0.0.1 ports,
// with its data in a temporary directory and fsync off (UnsafeNoFsync:
// throwaway data, and the same durability as the lab's PostgreSQL with
// fsync=off), etcd's default raft timings, and clients connecting to its
// port directly. It waits until the member serves.
func StartEtcd(ctx context.Context) (*Etcd, error) {
	c, err := StartEtcdCluster(ctx, EtcdOptions{TickMs: 100, ElectionMs: 1000, NoProxy: true})
	if err != nil {
		return nil, err
	}
	return &Etcd{Endpoint: c.AllEndpoints()[0], Version: EtcdVersion(), c: c}, nil
}

// Close stops the member and removes its data. Close its clients first,
// or the shutdown waits for them.
func (e *Etcd) Close() { e.c.Close() }
