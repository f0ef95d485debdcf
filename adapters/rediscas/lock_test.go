package rediscas_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/occkit/occkit/adapters/rediscas"
	"github.com/occkit/occkit/hybrid"
	"github.com/occkit/occkit/internal/redistest"
	"github.com/redis/go-redis/v9"
)

func newLocker(t testing.TB, cli redis.UniversalClient, prefix string, ttl time.Duration) *rediscas.Locker {
	t.Helper()
	l, err := rediscas.NewLocker(cli, rediscas.LockerConfig{Prefix: prefix + "lock:", TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// TestLockUnreachable: when Redis cannot be reached, the lease's context
// is cancelled once the lease has run out, not before.
func TestLockUnreachable(t *testing.T) {
	const ttl = 400 * time.Millisecond
	cli := redis.NewClient(redistest.Options(t))
	l := newLocker(t, cli, redistest.Prefix(t), ttl)
	ctx := redistest.Ctx(t, 20*time.Second)
	g, err := l.Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	cli.Close() // every renewal fails from now on
	exp := g.(hybrid.ExpiringLease).Expires()
	select {
	case <-g.Context().Done():
		if time.Now().Before(exp) {
			t.Fatalf("lease reported lost %v before it expired", time.Until(exp))
		}
		if cause := context.Cause(g.Context()); !errors.Is(cause, hybrid.ErrLeaseLost) {
			t.Fatalf("cause = %v, want hybrid.ErrLeaseLost", cause)
		}
	case <-time.After(3 * ttl):
		t.Fatal("lease not reported lost after Redis became unreachable")
	}
	if err := g.Release(ctx); err == nil {
		t.Fatal("release through a closed client succeeded")
	}
}

// TestLockHolderContextEnds: a holder's context that ends stops the
// renewals; the lease runs out after its TTL and another holder gets it.
func TestLockHolderContextEnds(t *testing.T) {
	const ttl = 300 * time.Millisecond
	l := newLocker(t, redistest.Client(t), redistest.Prefix(t), ttl)
	ctx := redistest.Ctx(t, 20*time.Second)
	hctx, cancel := context.WithCancel(ctx)
	g, err := l.Acquire(hctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	defer g.Release(ctx)
	cancel()
	select {
	case <-g.Context().Done():
	case <-time.After(3 * ttl):
		t.Fatal("lease of an ended holder context not cancelled after its TTL")
	}
	h, err := l.Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	h.Release(ctx)
	if h.Token() <= g.Token() {
		t.Fatalf("token %d after %d", h.Token(), g.Token())
	}
}

func TestLockerConfig(t *testing.T) {
	cli := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer cli.Close()
	if _, err := rediscas.NewLocker(cli, rediscas.LockerConfig{TTL: time.Millisecond}); err == nil {
		t.Error("a 1ms TTL was accepted")
	}
	if _, err := rediscas.NewLocker(nil, rediscas.LockerConfig{}); err == nil {
		t.Error("a nil client was accepted")
	}
	l, err := rediscas.NewLocker(cli, rediscas.LockerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if got := l.LockKey("sku-1"); got != "occkit-lock:{sku-1}" {
		t.Errorf("LockKey = %q", got)
	}
	var _ hybrid.Locker = l
}

// TestLockerCloseDeletesLocks: Close ends the leases still held and
// deletes their locks at once (another locker gets the key without
// waiting for the TTL), and ends an Acquire waiting for a lock.
func TestLockerCloseDeletesLocks(t *testing.T) {
	const ttl = 10 * time.Second
	cli := redistest.Client(t)
	prefix := redistest.Prefix(t)
	l := newLocker(t, cli, prefix, ttl)
	other := newLocker(t, cli, prefix, ttl)
	ctx := redistest.Ctx(t, 20*time.Second)
	held, err := l.Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	held2, err := other.Acquire(ctx, "k2")
	if err != nil {
		t.Fatal(err)
	}
	waiting := make(chan error, 1)
	go func() {
		g, err := l.Acquire(ctx, "k2")
		if err == nil {
			_ = g.Release(ctx)
		}
		waiting <- err
	}()
	time.Sleep(100 * time.Millisecond) // the Acquire waits for k2
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-waiting; !errors.Is(err, hybrid.ErrLeaseLost) {
		t.Errorf("an Acquire waiting on a closed locker ended with %v, want an error matching hybrid.ErrLeaseLost", err)
	}
	if cause := context.Cause(held.Context()); !errors.Is(cause, hybrid.ErrLeaseLost) {
		t.Fatalf("a lease of the closed locker ended with %v", cause)
	}
	wctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	next, err := other.Acquire(wctx, "k")
	if err != nil {
		t.Fatalf("the lock of a closed locker's lease is still held: %v", err)
	}
	for _, g := range []hybrid.Lease{next, held2, held} {
		if err := g.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := l.Acquire(ctx, "k3"); err == nil {
		t.Fatal("Acquire on a closed locker succeeded")
	}
	if err := l.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}
