package etcdcas_test

import (
	"testing"
	"time"

	"github.com/occkit/occkit/adapters/etcdcas"
	"github.com/occkit/occkit/internal/etcdtest"
	clientv3 "go.etcd.io/etcd/client/v3"
)

func newLocker(t *testing.T, cli *clientv3.Client, ttl time.Duration) *etcdcas.Locker {
	t.Helper()
	l, err := etcdcas.NewLocker(cli, etcdcas.LockerConfig{Prefix: t.Name() + "/", TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// TestLockAfterSessionRevoked: when the Locker's session lease ends on the
// server before the keepalive loop notices (revoked here; expired after a
// pause or a partition in production), the next Acquire takes a new
// session instead of failing with "requested lease not found".
func TestLockAfterSessionRevoked(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.Options{})
	cli := c.Client()
	l := newLocker(t, cli, time.Second)
	ctx := etcdtest.Ctx(t, 30*time.Second)
	g, err := l.Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Release(ctx); err != nil {
		t.Fatal(err)
	}
	leases, err := cli.Leases(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, ls := range leases.Leases {
		if _, err := cli.Revoke(ctx, ls.ID); err != nil {
			t.Fatal(err)
		}
	}
	g2, err := l.Acquire(ctx, "k")
	if err != nil {
		t.Fatalf("Acquire after the session lease was revoked: %v; want a grant on a new session", err)
	}
	defer g2.Release(ctx)
	if g2.Token() <= g.Token() {
		t.Errorf("token after the new session %d, want above %d", g2.Token(), g.Token())
	}
	if err := g2.Context().Err(); err != nil {
		t.Errorf("new grant's context already ended: %v", err)
	}
}

func TestLockerConfig(t *testing.T) {
	if _, err := etcdcas.NewLocker(nil, etcdcas.LockerConfig{}); err == nil {
		t.Error("a nil client was accepted")
	}
	c := etcdtest.Start(t, etcdtest.Options{})
	if _, err := etcdcas.NewLocker(c.Client(), etcdcas.LockerConfig{TTL: 500 * time.Millisecond}); err == nil {
		t.Error("a TTL below etcd's 1 s granularity was accepted")
	}
}
