package backends

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/internal/etcdtest"
	"github.com/occkit/occkit/internal/servers"
)

func TestMain(m *testing.M) {
	// Embedded etcd's and minidyn's HTTP connections, and the peer
	// connections of etcd3's members, outlive their shutdown briefly (as
	// in package lab).
	etcdtest.VerifyTestMain(m)
}

// TestSystems opens every system with a cas store on the test servers
// (PostgreSQL, Redis, MariaDB and dynalite from the variables `make test`
// sets, which fail the test when missing; etcd, minidyn and SQLite in
// process): a store written through a proxy with a delay is read by a
// second client in the same namespace, a second namespace is apart, Drop
// removes the data, the locker grants a lease, and a scope is created and
// dropped.
func TestSystems(t *testing.T) {
	for _, system := range []string{Memory, Postgres, Redis, Etcd, DynamoDB, MySQL, SQLite} {
		t.Run(system, func(t *testing.T) {
			ctx := t.Context()
			srv := reach(t, system)
			opts := ClientOptions{Conns: 4, DialTimeout: 5 * time.Second}
			if system == Postgres || system == MySQL {
				opts.Scope, opts.CreateScope = newScope("backends_test_"), true
			}
			if system != Memory && system != SQLite {
				p, err := srv.Proxy(time.Millisecond)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = p.Close() })
				opts.Via = p.Addr()
			}
			ops := connectOwner(t, srv, opts)
			direct := connect(t, srv, ClientOptions{Scope: opts.Scope})
			if _, durable, err := direct.Describe(ctx); err != nil || durable == "" {
				t.Fatalf("Describe: %q, %v", durable, err)
			}

			s, err := ops.CreateStore(ctx, "ns_a")
			if err != nil {
				t.Fatal(err)
			}
			other, err := ops.CreateStore(ctx, "ns_b")
			if err != nil {
				t.Fatal(err)
			}
			if _, err := s.CompareAndSwap(ctx, "k", 0, []byte("v1")); err != nil {
				t.Fatal(err)
			}
			seen, err := direct.Store("ns_a")
			if err != nil {
				t.Fatal(err)
			}
			if it, err := seen.Get(ctx, "k"); err != nil || string(it.Value) != "v1" {
				t.Fatalf("the direct client reads %q, %v; want v1", it.Value, err)
			}
			if _, err := other.Get(ctx, "k"); !errors.Is(err, cas.ErrNotFound) {
				t.Fatalf("another namespace reads %v, want cas.ErrNotFound", err)
			}

			lockOnce(t, direct, "ns_a", "k")

			for _, ns := range []string{"ns_a", "ns_b"} {
				if err := direct.Drop(ctx, ns); err != nil {
					t.Fatalf("Drop(%s): %v", ns, err)
				}
			}
			after, err := direct.Store("ns_a")
			if err != nil {
				t.Fatal(err)
			}
			_, err = after.Get(ctx, "k")
			switch system {
			case Memory, Redis, Etcd: // key spaces: the key is gone
				if !errors.Is(err, cas.ErrNotFound) {
					t.Fatalf("after Drop: %v, want cas.ErrNotFound", err)
				}
			default: // the table is gone
				if err == nil {
					t.Fatal("after Drop: the table still answers")
				}
			}
		})
	}
}

// reach reaches system's server as Env{} does (from the variables of the
// test servers), and closes it when the test ends.
func reach(t *testing.T, system string) *Server {
	t.Helper()
	srv, err := Env{}.Reach(t.Context(), system)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := srv.Close(context.Background()); err != nil {
			t.Error(err)
		}
	})
	return srv
}

// newScope returns a scope name of the test's own: prefix and a random
// suffix.
func newScope(prefix string) string {
	var r [4]byte
	_, _ = rand.Read(r[:])
	return prefix + hex.EncodeToString(r[:])
}

func connect(t *testing.T, srv *Server, opts ClientOptions) *Client {
	t.Helper()
	c, err := srv.Connect(t.Context(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// connectOwner is connect for the client that creates opts.Scope, which
// its Close drops when the test ends: the test fails if that does.
func connectOwner(t *testing.T, srv *Server, opts ClientOptions) *Client {
	t.Helper()
	c, err := srv.Connect(t.Context(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return c
}

// lockOnce takes and releases a lease on key from c's locker of
// namespace ns, then closes the locker.
func lockOnce(t *testing.T, c *Client, ns, key string) {
	t.Helper()
	ctx := t.Context()
	l, closeLocker, err := c.NewLocker(ctx, LockerConfig{Name: ns, TTL: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	g, err := l.Acquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := closeLocker(); err != nil {
		t.Fatal(err)
	}
}

// TestStartAndRestart: with no variable set and StartServers, Reach
// starts a throwaway Redis with its script and Close stops it; a server
// of StartOwn's comes back from Restart with its data; a system without a
// script cannot be restarted.
func TestStartAndRestart(t *testing.T) {
	ctx := t.Context()
	env := Env{StartServers: true, Getenv: func(string) string { return "" }}
	if _, err := (Env{Getenv: env.Getenv}).Reach(ctx, Redis); !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), EnvRedisURL) {
		t.Fatalf("Reach without the variable nor StartServers: %v, want ErrUnavailable naming %s", err, EnvRedisURL)
	}
	srv, err := env.Reach(ctx, Redis)
	if err != nil {
		t.Fatal(err)
	}
	if !srv.Started() {
		t.Fatal("Reach did not start the server")
	}
	addr, err := srv.Addr()
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if conn, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		_ = conn.Close()
		t.Fatal("the server listens after Close")
	}

	own, err := env.StartOwn(ctx, Redis)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = own.Close(context.Background()) }()
	c := connect(t, own, ClientOptions{})
	s, err := c.CreateStore(ctx, "restart")
	if err != nil {
		t.Fatal(err)
	}
	v, err := s.CompareAndSwap(ctx, "k", 0, []byte("kept"))
	if err != nil {
		t.Fatal(err)
	}
	if err := own.Restart(ctx, 100*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if it, err := s.Get(ctx, "k"); err != nil || string(it.Value) != "kept" || it.Version != v {
		t.Fatalf("after Restart: %q at %d, %v; want kept at %d", it.Value, it.Version, err, v)
	}
	if _, err := env.StartOwn(ctx, Etcd); !errors.Is(err, servers.ErrNoRestart) {
		t.Errorf("StartOwn(etcd): %v, want servers.ErrNoRestart", err)
	}
}
