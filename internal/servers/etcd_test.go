package servers

import (
	"context"
	"errors"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	// Embedded etcd's peer HTTP connections outlive its shutdown (as in
	// adapters/etcdcas): occkit uses no net/http, so those frames are
	// ignored.
	goleak.VerifyTestMain(m,
		goleak.IgnoreAnyFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreAnyFunction("net/http.(*persistConn).writeLoop"),
		goleak.IgnoreAnyFunction("net/http.(*conn).serve"),
		goleak.IgnoreAnyFunction("net/http.(*connReader).backgroundRead"),
	)
}

// startCluster starts a cluster with opts, closed when the test ends, and
// returns it with a context that ends after a minute.
func startCluster(t *testing.T, opts EtcdOptions) (*EtcdCluster, context.Context) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	c, err := StartEtcdCluster(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c, ctx
}

// TestStartClusterLeaderLoss: a cluster started without a test serves
// through its proxies, elects a new leader after the leader's hard stop,
// and keeps serving; Close stops it, twice without harm.
func TestStartClusterLeaderLoss(t *testing.T) {
	c, ctx := startCluster(t, EtcdOptions{Members: 3})
	cli, err := c.NewClient()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Put(ctx, "k", "1"); err != nil {
		t.Fatal(err)
	}
	lead := c.Leader()
	if lead < 0 {
		t.Fatal("no leader after StartEtcdCluster")
	}
	c.HardStop(lead)
	if n := len(c.Endpoints()); n != 2 {
		t.Errorf("%d running endpoints after a hard stop, want 2", n)
	}
	if n := len(c.AllEndpoints()); n != 3 {
		t.Errorf("%d endpoints in all, want 3", n)
	}
	next, err := c.AwaitLeader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if next == lead {
		t.Fatalf("leader %d again after its hard stop", next)
	}
	if _, err := cli.Put(ctx, "k", "2"); err != nil {
		t.Fatal(err)
	}
	c.Close()
	c.Close()
}

// TestStartClusterNoProxy: with NoProxy the client URL is the member's
// own port; AwaitLeader on a stopped cluster gives up with ErrNoLeader.
func TestStartClusterNoProxy(t *testing.T) {
	c, ctx := startCluster(t, EtcdOptions{NoProxy: true})
	if c.members[0].proxy != nil || c.AllEndpoints()[0] != c.members[0].cfg.ListenClientUrls[0].String() {
		t.Fatalf("endpoint %s, want the member's port %s", c.AllEndpoints()[0], c.members[0].cfg.ListenClientUrls[0].String())
	}
	cli, err := c.NewClient()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Get(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	c.HardStop(0)
	sctx, scancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer scancel()
	if _, err := c.AwaitLeader(sctx); !errors.Is(err, ErrNoLeader) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("AwaitLeader with no member running: %v, want ErrNoLeader and DeadlineExceeded", err)
	}
}

// TestIsolate: an isolated follower keeps answering serializable reads
// from its old state while the other two accept writes, cannot serve a
// linearizable read, and catches up once healed; an isolated leader is
// replaced.
func TestIsolate(t *testing.T) {
	c, ctx := startCluster(t, EtcdOptions{Members: 3})
	lead := c.Leader()
	f, g := (lead+1)%3, (lead+2)%3
	eps := c.AllEndpoints()
	alone, err := c.NewClient(eps[f])
	if err != nil {
		t.Fatal(err)
	}
	rest, err := c.NewClient(eps[lead], eps[g])
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rest.Put(ctx, "k", "1"); err != nil {
		t.Fatal(err)
	}
	// serializable reads k through the isolated member until it shows want.
	serializable := func(want string) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); ; {
			resp, err := alone.Get(ctx, "k", clientv3.WithSerializable())
			if err == nil && len(resp.Kvs) == 1 && string(resp.Kvs[0].Value) == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("member %d reads %v, %v; want %q", f, resp, err, want)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	serializable("1")
	c.Isolate(f)
	if _, err := rest.Put(ctx, "k", "2"); err != nil {
		t.Fatalf("a write to the majority: %v", err)
	}
	resp, err := alone.Get(ctx, "k", clientv3.WithSerializable())
	if err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "1" {
		t.Fatalf("the isolated member's serializable read: %v, %v; want the old value 1", resp, err)
	}
	lctx, lcancel := context.WithTimeout(ctx, time.Second)
	_, err = alone.Get(lctx, "k")
	lcancel()
	if err == nil {
		t.Fatal("the isolated member served a linearizable read")
	}
	c.Heal(f)
	serializable("2")

	c.Isolate(lead)
	others, err := c.NewClient(eps[f], eps[g])
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; {
		pctx, pcancel := context.WithTimeout(ctx, time.Second)
		_, err := others.Put(pctx, "k", "3")
		pcancel()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the two members without the isolated leader take no write: %v", err)
		}
	}
	c.Heal(lead)
	if _, err := c.AwaitLeader(ctx); err != nil {
		t.Fatal(err)
	}
}
