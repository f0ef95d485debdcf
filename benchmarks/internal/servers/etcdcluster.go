package servers

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/version"
	"go.etcd.io/etcd/server/v3/embed"

	"github.com/occkit/occkit/internal/faultproxy"
)

// EtcdCluster is a running in-process etcd cluster of several members, for
// leader-loss faults. Each member's client port sits behind a TCP proxy
// (internal/faultproxy), so that a member stopped with HardStop is gone for
// its clients at once, as a crashed host would be. The members use fast
// raft timings (ticks of 50 ms, elections after 500 ms): a lost leader is
// replaced within about a second. Its methods are safe for concurrent use.
//
// (internal/etcdtest starts the same kind of cluster for tests, but needs
// a testing.TB; this one returns errors.)
type EtcdCluster struct {
	// Version is the embedded server's version.
	Version string

	dir     string
	mu      sync.Mutex
	members []*clusterMember
}

type clusterMember struct {
	name     string
	cfg      *embed.Config
	etcd     *embed.Etcd
	proxy    *faultproxy.Proxy
	endpoint string // http://<proxy address>
	stopped  bool
	closed   chan struct{} // closed when the member's shutdown is complete
}

// StartEtcdCluster starts n members (n >= 1) on free 127.0.0.1 ports with
// their data in a temporary directory and fsync off, and waits until they
// serve and agree on a leader.
func StartEtcdCluster(ctx context.Context, n int) (*EtcdCluster, error) {
	if n < 1 {
		return nil, fmt.Errorf("etcd cluster: %d members", n)
	}
	var err error
	for attempt := 1; attempt <= 3; attempt++ {
		var c *EtcdCluster
		if c, err = startEtcdCluster(ctx, n); err == nil {
			return c, nil
		}
		if !strings.Contains(err.Error(), "address already in use") {
			break
		}
	}
	return nil, err
}

func startEtcdCluster(ctx context.Context, n int) (*EtcdCluster, error) {
	dir, err := os.MkdirTemp("", "occbench-etcd-cluster-")
	if err != nil {
		return nil, err
	}
	c := &EtcdCluster{Version: version.Version, dir: dir}
	var initial []string
	for i := range n {
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
		cfg := memberConfig(name, filepath.Join(dir, name), peer, client)
		cfg.TickMs, cfg.ElectionMs = 50, 500
		px, err := faultproxy.New(client.Host)
		if err != nil {
			c.Close()
			return nil, err
		}
		initial = append(initial, fmt.Sprintf("%s=%s", name, peer))
		c.members = append(c.members, &clusterMember{name: name, cfg: cfg, proxy: px, endpoint: "http://" + px.Addr(), closed: make(chan struct{})})
	}
	for _, m := range c.members {
		m.cfg.InitialCluster = strings.Join(initial, ",")
	}
	// The members of a new cluster wait for each other: start them together.
	errs := make(chan error, n)
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
	for range n {
		if err := <-errs; err != nil && startErr == nil {
			startErr = fmt.Errorf("etcd: %w", err)
		}
	}
	if startErr != nil {
		c.Close()
		return nil, startErr
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for _, m := range c.members {
		select {
		case <-m.etcd.Server.ReadyNotify():
		case err := <-m.etcd.Err():
			c.Close()
			return nil, fmt.Errorf("etcd: member %s: %w", m.name, err)
		case <-wctx.Done():
			c.Close()
			return nil, fmt.Errorf("etcd: member %s not ready: %w", m.name, wctx.Err())
		}
	}
	if _, err := c.WaitLeader(wctx); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// Endpoints returns the client URLs of every member, stopped or not (a
// stopped member's refuses connections).
func (c *EtcdCluster) Endpoints() []string {
	eps := make([]string, len(c.members))
	for i, m := range c.members {
		eps[i] = m.endpoint
	}
	return eps
}

// Leader returns the index of the leader the running members agree on, or
// -1 if they do not agree on one.
func (c *EtcdCluster) Leader() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	lead := -1
	for _, m := range c.members {
		if m.stopped {
			continue
		}
		id := m.etcd.Server.Leader()
		idx := -1
		for j, o := range c.members {
			if !o.stopped && id != 0 && o.etcd.Server.MemberID() == id {
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

// ErrNoLeader reports that the running members did not agree on a leader
// in time.
var ErrNoLeader = errors.New("etcd: no leader")

// WaitLeader waits until the running members agree on a leader and
// returns its index.
func (c *EtcdCluster) WaitLeader(ctx context.Context) (int, error) {
	for {
		if l := c.Leader(); l >= 0 {
			return l, nil
		}
		select {
		case <-ctx.Done():
			return -1, fmt.Errorf("%w: %w", ErrNoLeader, ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// HardStop stops member i abruptly, without handing its leadership over:
// its clients' connections are reset and new ones refused, and its raft
// node stops at once — a crash, as the rest of the cluster and the
// clients see it. The member's own shutdown finishes in the background.
func (c *EtcdCluster) HardStop(i int) {
	c.mu.Lock()
	m := c.members[i]
	if m.stopped {
		c.mu.Unlock()
		return
	}
	m.stopped = true
	c.mu.Unlock()
	m.proxy.Close()
	m.etcd.Server.HardStop()
	go func() {
		m.etcd.Close()
		close(m.closed)
	}()
}

// Close stops every member and removes their data. Close the cluster's
// clients first, or the shutdown waits for them.
func (c *EtcdCluster) Close() {
	for _, m := range c.members {
		c.mu.Lock()
		stopped := m.stopped
		m.stopped = true
		e := m.etcd
		c.mu.Unlock()
		if !stopped {
			m.proxy.Close()
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
