package rediscas_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/occkit/occkit/adapters/rediscas"
	"github.com/occkit/occkit/cas"
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

func TestLockMutualExclusion(t *testing.T) {
	prefix := redistest.Prefix(t)
	// Two lockers on two clients: two processes contending for one key.
	lockers := []*rediscas.Locker{
		newLocker(t, redistest.Client(t), prefix, 0),
		newLocker(t, redistest.Client(t), prefix, 0),
	}
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
				ctx := redistest.Ctx(t, 20*time.Second)
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
	cli := redistest.Client(t)
	l := newLocker(t, cli, redistest.Prefix(t), 0)
	ctx := redistest.Ctx(t, 20*time.Second)
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
	if n := cli.Exists(ctx, l.LockKey("res")).Val(); n != 1 {
		t.Fatalf("the lock key is gone after a stale release")
	}
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if c, err := l.Acquire(short, "res"); err == nil {
		c.Release(ctx)
		t.Fatalf("acquired a lock still held by the second grant (token %d)", c.Token())
	} else if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("acquire while held: %v, want a deadline", err)
	}
	if err := b.Release(ctx); err != nil {
		t.Fatal(err)
	}
	d, err := l.Acquire(ctx, "res")
	if err != nil {
		t.Fatal(err)
	}
	d.Release(ctx)
}

// TestLockWatchdogKeepsHolder: a holder that keeps its lease three times
// its TTL keeps it, thanks to the renewals, and nobody else gets it.
func TestLockWatchdogKeepsHolder(t *testing.T) {
	cli := redistest.Client(t)
	prefix := redistest.Prefix(t)
	const ttl = time.Second
	holder := newLocker(t, cli, prefix, ttl)
	other := newLocker(t, redistest.Client(t), prefix, ttl)
	ctx := redistest.Ctx(t, 20*time.Second)
	g, err := holder.Acquire(ctx, "long")
	if err != nil {
		t.Fatal(err)
	}
	defer g.Release(ctx)
	wait, cancel := context.WithTimeout(ctx, 3*ttl)
	defer cancel()
	if o, err := other.Acquire(wait, "long"); err == nil {
		o.Release(ctx)
		t.Fatalf("another holder got the lock (token %d) while the first kept renewing it", o.Token())
	}
	if err := g.Context().Err(); err != nil {
		t.Fatalf("a renewed lease was reported lost: %v", context.Cause(g.Context()))
	}
	if left := time.Until(g.(interface{ Expires() time.Time }).Expires()); left <= 0 || left > ttl {
		t.Fatalf("lease expires in %v after renewals, want within (0, %v]", left, ttl)
	}
	if pttl := cli.PTTL(ctx, holder.LockKey("long")).Val(); pttl <= 0 {
		t.Fatalf("lock key TTL %v, want it renewed", pttl)
	}
}

// TestLockLossDetected: the lock key deleted behind the holder's back (as
// its expiry during a pause, or a failover that lost it, would) cancels
// the lease's context at the next renewal; the old holder's late fenced
// write is refused after a new holder wrote.
func TestLockLossDetected(t *testing.T) {
	cli := redistest.Client(t)
	prefix := redistest.Prefix(t)
	const ttl = 600 * time.Millisecond
	l := newLocker(t, cli, prefix, ttl)
	store := newStore(t, cli, rediscas.Config{})
	ctx := redistest.Ctx(t, 20*time.Second)
	first, err := l.Acquire(ctx, "stock")
	if err != nil {
		t.Fatal(err)
	}
	v, err := store.CompareAndSwapFenced(ctx, "stock", 0, first.Token(), []byte("10"))
	if err != nil {
		t.Fatal(err)
	}
	if err := cli.Del(ctx, l.LockKey("stock")).Err(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-first.Context().Done():
		if cause := context.Cause(first.Context()); !errors.Is(cause, rediscas.ErrLockLost) {
			t.Fatalf("lost lease's cause = %v, want ErrLockLost", cause)
		}
	case <-time.After(2 * ttl):
		t.Fatal("lost lease's context not cancelled within two TTLs")
	}
	second, err := l.Acquire(ctx, "stock")
	if err != nil {
		t.Fatal(err)
	}
	defer second.Release(ctx)
	if second.Token() <= first.Token() {
		t.Fatalf("new token %d not above old %d", second.Token(), first.Token())
	}
	v2, err := store.CompareAndSwapFenced(ctx, "stock", v, second.Token(), []byte("9"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = store.CompareAndSwapFenced(ctx, "stock", v2, first.Token(), []byte("9"))
	if !errors.Is(err, cas.ErrFenced) {
		t.Fatalf("late write of the old holder: %v, want ErrFenced", err)
	}
	if err := first.Release(ctx); err != nil {
		t.Fatalf("releasing a lost lease: %v", err)
	}
	if n := cli.Exists(ctx, l.LockKey("stock")).Val(); n != 1 {
		t.Fatal("releasing the lost lease removed the new holder's lock")
	}
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
	exp := g.(interface{ Expires() time.Time }).Expires()
	select {
	case <-g.Context().Done():
		if time.Now().Before(exp) {
			t.Fatalf("lease reported lost %v before it expired", time.Until(exp))
		}
		if cause := context.Cause(g.Context()); !errors.Is(cause, rediscas.ErrLockLost) {
			t.Fatalf("cause = %v, want ErrLockLost", cause)
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
