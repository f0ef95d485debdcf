package etcdcas_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/occkit/occkit/adapters/etcdcas"
	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/hybrid"
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

func TestLockMutualExclusion(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.Options{})
	// Two lockers on two clients: two processes contending for one key.
	lockers := []*etcdcas.Locker{newLocker(t, c.Client(), 0), newLocker(t, c.Client(), 0)}
	var (
		inside  atomic.Int32
		mu      sync.Mutex
		tokens  []uint64
		counter int // deliberately unsynchronised: the lock must protect it
	)
	var wg sync.WaitGroup
	for w := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 10 {
				ctx := etcdtest.Ctx(t, 20*time.Second)
				lease, err := lockers[w%2].Acquire(ctx, "res")
				if err != nil {
					t.Error(err)
					return
				}
				if n := inside.Add(1); n != 1 {
					t.Errorf("%d holders at once", n)
				}
				counter++
				mu.Lock()
				tokens = append(tokens, lease.Token())
				mu.Unlock()
				inside.Add(-1)
				if err := lease.Release(ctx); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	if counter != 60 {
		t.Fatalf("counter = %d, want 60", counter)
	}
	for i := 1; i < len(tokens); i++ {
		if tokens[i] <= tokens[i-1] {
			t.Fatalf("grant %d has token %d after %d: tokens must grow with every grant", i, tokens[i], tokens[i-1])
		}
	}
}

func TestLockStaleReleaseKeepsNewerHolder(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.Options{})
	l := newLocker(t, c.Client(), 0)
	ctx := etcdtest.Ctx(t, 20*time.Second)
	a, err := l.Acquire(ctx, "res")
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
	b, err := l.Acquire(ctx, "res")
	if err != nil {
		t.Fatal(err)
	}
	if b.Token() <= a.Token() {
		t.Fatalf("second grant token %d not above first %d", b.Token(), a.Token())
	}
	// A retried release of the first grant must not free the lock.
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	if c, err := l.Acquire(short, "res"); err == nil {
		t.Fatalf("acquired a lock still held by the second grant (token %d)", c.Token())
	} else if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("acquire while held: %v, want a deadline", err)
	}
	if err := b.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// The waiter that gave up must not block the next one.
	d, err := l.Acquire(ctx, "res")
	if err != nil {
		t.Fatal(err)
	}
	d.Release(ctx)
}

// TestLockLossAndFencing: a holder whose session is lost (as when a GC
// pause outlasts the TTL) has its context cancelled; a new holder gets a
// larger token, and the old holder's late fenced write is refused.
func TestLockLossAndFencing(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.Options{})
	cli := c.Client()
	slow := newLocker(t, c.ClientOf(c.Endpoints()...), time.Second)
	fast := newLocker(t, cli, 0)
	store := newStore(t, cli, etcdcas.Config{})
	ctx := etcdtest.Ctx(t, 30*time.Second)

	first, err := slow.Acquire(ctx, "stock")
	if err != nil {
		t.Fatal(err)
	}
	v, err := store.CompareAndSwapFenced(ctx, "stock", 0, first.Token(), []byte("10"))
	if err != nil {
		t.Fatal(err)
	}
	// The holder "pauses": its lease is revoked behind its back.
	leases, err := cli.Leases(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range leases.Leases {
		cli.Revoke(ctx, l.ID)
	}
	select {
	case <-first.Context().Done():
		if !errors.Is(context.Cause(first.Context()), etcdcas.ErrSessionLost) {
			t.Fatalf("lease context cause = %v, want ErrSessionLost", context.Cause(first.Context()))
		}
	case <-time.After(10 * time.Second):
		t.Fatal("lost lease's context not cancelled")
	}
	second, err := fast.Acquire(ctx, "stock")
	if err != nil {
		t.Fatal(err)
	}
	if second.Token() <= first.Token() {
		t.Fatalf("new token %d not above old %d", second.Token(), first.Token())
	}
	v2, err := store.CompareAndSwapFenced(ctx, "stock", v, second.Token(), []byte("9"))
	if err != nil {
		t.Fatal(err)
	}
	// The old holder wakes up and writes what it computed before pausing,
	// even with the right version: refused by the fence.
	_, err = store.CompareAndSwapFenced(ctx, "stock", v2, first.Token(), []byte("9"))
	if !errors.Is(err, cas.ErrFenced) {
		t.Fatalf("late write of the old holder: %v, want ErrFenced", err)
	}
	it, err := store.Get(ctx, "stock")
	if err != nil || string(it.Value) != "9" || it.Version != v2 {
		t.Fatalf("stock = %q v%d, %v; want the new holder's 9 at v%d", it.Value, it.Version, err, v2)
	}
	second.Release(ctx)
}

func TestLockExpiresReported(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.Options{})
	l := newLocker(t, c.Client(), 2*time.Second)
	ctx := etcdtest.Ctx(t, 10*time.Second)
	g, err := l.Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	defer g.Release(ctx)
	exp := g.(interface{ Expires() time.Time }).Expires()
	if d := time.Until(exp); d <= 0 || d > 2*time.Second {
		t.Fatalf("lease expires in %v, want within the 2s TTL", d)
	}
	var _ hybrid.Lease = g
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
