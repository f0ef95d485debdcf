package etcdcas_test

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/occkit/occkit/adapters/etcdcas"
	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/cas/castest"
	"github.com/occkit/occkit/internal/etcdtest"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestMain checks for goroutine leaks, those of the embedded etcd
// members' peer connections aside (TestLeaderLoss hard-stops a member).
func TestMain(m *testing.M) { etcdtest.VerifyTestMain(m) }

var prefixes atomic.Int64

// newStore returns a store under a prefix no other test uses.
func newStore(t testing.TB, cli *clientv3.Client, cfg etcdcas.Config) *etcdcas.Store {
	t.Helper()
	cfg.Prefix = fmt.Sprintf("test%d/", prefixes.Add(1))
	return openStore(t, cli, cfg)
}

// openStore returns a store with cfg, its prefix as given.
func openStore(t testing.TB, cli *clientv3.Client, cfg etcdcas.Config) *etcdcas.Store {
	t.Helper()
	s, err := etcdcas.New(cli, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestConformance(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.Options{})
	cli := c.Client()
	probe := newStore(t, cli, etcdcas.Config{})
	// etcd's minimum lease TTL with default flags bounds the short hold.
	reopen, shortHold := castest.SameKeys(2*time.Second, func(t *testing.T, s cas.Store, hold time.Duration) cas.Store {
		return openStore(t, cli, etcdcas.Config{Prefix: s.(*etcdcas.Store).Prefix(), ExclusiveTTL: hold})
	})
	castest.Run(t, castest.Harness{
		NewStore:       func(t *testing.T) cas.Store { return newStore(t, cli, etcdcas.Config{}) },
		Reopen:         reopen,
		ShortHold:      shortHold,
		ReturnsCurrent: true,
		Limits:         probe.Limits(),
		Workers:        8,
		OpsPerWorker:   40,
	})
}

// TestConformanceCluster runs the suite on a three-member cluster with
// serializable reads (Config.SerializableReads), as castest's StaleReads:
// each store talks to one member only, the stores NewStore makes take
// the members in turn, and Reopen and ShortHold return a store on a member
// other than the store's, so that the cross-process tests write through
// one member and read through another.
func TestConformanceCluster(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.Options{Members: 3})
	var clients []*clientv3.Client
	for _, ep := range c.AllEndpoints() {
		clients = append(clients, c.ClientOf(ep))
	}
	type placed struct {
		prefix  string
		member  int
		reopens int
	}
	stores := map[cas.Store]*placed{}
	var made int
	open := func(t *testing.T, p *placed, member int, ttl time.Duration) *etcdcas.Store {
		return openStore(t, clients[member%len(clients)], etcdcas.Config{Prefix: p.prefix, SerializableReads: true, ExclusiveTTL: ttl})
	}
	// elsewhere returns a member other than p's, a different one each time.
	elsewhere := func(p *placed) int {
		p.reopens++
		return p.member + 1 + (p.reopens-1)%(len(clients)-1)
	}
	probe := newStore(t, clients[0], etcdcas.Config{})
	reopen, shortHold := castest.SameKeys(2*time.Second, func(t *testing.T, s cas.Store, hold time.Duration) cas.Store {
		p := stores[s]
		return open(t, p, elsewhere(p), hold)
	})
	castest.Run(t, castest.Harness{
		NewStore: func(t *testing.T) cas.Store {
			p := &placed{prefix: fmt.Sprintf("test%d/", prefixes.Add(1)), member: made % len(clients)}
			made++
			s := open(t, p, p.member, 0)
			stores[s] = p
			return s
		},
		Reopen:         reopen,
		ShortHold:      shortHold,
		ReturnsCurrent: true,
		StaleReads:     true,
		Limits:         probe.Limits(),
		Workers:        8,
		OpsPerWorker:   40,
	})
}

// TestConformanceSmallLimits runs the suite with a server configured with
// small request and transaction limits, so that the limits the store
// derives from its Config are checked against what the server accepts.
func TestConformanceSmallLimits(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.Options{MaxRequestBytes: 128 << 10, MaxTxnOps: 16})
	cli := c.Client()
	limits, err := etcdcas.ServerLimits(128<<10, 16, 200)
	if err != nil {
		t.Fatal(err)
	}
	cfg := etcdcas.Config{Limits: limits}
	probe := newStore(t, cli, cfg)
	castest.Run(t, castest.Harness{
		NewStore:       func(t *testing.T) cas.Store { return newStore(t, cli, cfg) },
		ReturnsCurrent: true,
		Limits:         probe.Limits(),
		Workers:        4,
		OpsPerWorker:   20,
	})
}

// A limit no etcd server can honour fails at construction, and so do
// server flags that leave no room for values.
func TestConfigLimits(t *testing.T) {
	if _, err := etcdcas.New(&clientv3.Client{}, etcdcas.Config{Limits: cas.Limits{MaxValueBytes: 1 << 31}}); err == nil || !strings.Contains(err.Error(), "MaxValueBytes") {
		t.Fatalf("a 2 GiB value limit: %v, want an error naming MaxValueBytes", err)
	}
	if _, err := etcdcas.ServerLimits(32<<10, 128, 0); err == nil {
		t.Fatal("a 32 KiB request limit was accepted")
	}
	l, err := etcdcas.ServerLimits(etcdcas.DefaultMaxRequestBytes, etcdcas.DefaultMaxTxnOps, 0)
	if err != nil {
		t.Fatal(err)
	}
	s, err := etcdcas.New(&clientv3.Client{}, etcdcas.Config{Limits: cas.Limits{MaxCommitOps: 8}})
	if err != nil {
		t.Fatal(err)
	}
	if got := s.Limits(); got.MaxCommitOps != 8 || got.MaxValueBytes != l.MaxValueBytes || got.MaxKeyBytes != cas.DefaultMaxKeyBytes {
		t.Fatalf("limits %+v: want MaxCommitOps 8 and the rest of %+v", got, l)
	}
}
