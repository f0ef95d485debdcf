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
	"github.com/occkit/occkit/occ"
)

// redisBackend is a fenced store and two lockers on one Redis server, the
// lockers on clients of their own (two processes, A and B, contending for
// the same locks). expireA deletes A's lock, as its expiry after a pause
// of process A past the TTL would.
func redisBackend(t *testing.T, ttl time.Duration) (fs cas.FencedStore, a, b *rediscas.Locker, expireA func(ctx context.Context, key string)) {
	t.Helper()
	admin := redistest.Client(t)
	prefix := redistest.Prefix(t)
	s, err := rediscas.New(admin, rediscas.Config{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	a = newLocker(t, redistest.Client(t), prefix, ttl)
	b = newLocker(t, redistest.Client(t), prefix, ttl)
	expireA = func(ctx context.Context, key string) {
		if err := admin.Del(ctx, a.LockKey(key)).Err(); err != nil {
			t.Error(err)
		}
	}
	return s, a, b, expireA
}

// pausingStore pauses the first fenced write of the goroutine that arms it
// before sending it, as a GC pause between the lease check and the write
// would; the request is then sent regardless of the caller's context, as
// one already in the socket would be.
type pausingStore struct {
	cas.FencedStore
	armed   atomic.Bool
	paused  chan struct{} // closed when the pause starts
	pause   time.Duration
	refused atomic.Int64
}

func (p *pausingStore) CompareAndSwapFenced(ctx context.Context, key string, expected cas.Version, token uint64, value []byte) (cas.Version, error) {
	if p.armed.CompareAndSwap(true, false) {
		close(p.paused)
		time.Sleep(p.pause)
		ctx = context.WithoutCancel(ctx)
	}
	v, err := p.FencedStore.CompareAndSwapFenced(ctx, key, expected, token, value)
	if errors.Is(err, cas.ErrFenced) {
		p.refused.Add(1)
	}
	return v, err
}

func sell(n int, _ bool) (int, error) {
	if n == 0 {
		return 0, errors.New("sold out")
	}
	return n - 1, nil
}

// TestStory is hybrid's story on Redis, in one process: stock 10; buyer A
// takes the lease, reads 10 and pauses past the TTL just before its write;
// buyer B takes the lease (a larger token), sells, writes 9; A wakes and
// sends its write with its old token: refused with ErrFenced; A retries with
// a fresh lease and writes 8. remaining = initial - sales.
func TestStory(t *testing.T) {
	const ttl = time.Second
	fs, lockerA, lockerB, expireA := redisBackend(t, ttl)
	ps := &pausingStore{FencedStore: fs, paused: make(chan struct{}), pause: 2 * ttl}
	stock := cas.NewTyped[int](ps, cas.JSON[int]())
	ctx := redistest.Ctx(t, 60*time.Second)
	if _, err := stock.CompareAndSwap(ctx, "stock", 0, 10); err != nil {
		t.Fatal(err)
	}
	ps.armed.Store(true)
	var aAttempts int
	aDone := make(chan error, 1)
	go func() {
		_, _, err := hybrid.Update(ctx, lockerA, stock, "stock", sell,
			occ.WithObserver(occ.ObserverFuncs{Call: func(_ context.Context, c occ.Call) { aAttempts = c.Attempts }}))
		aDone <- err
	}()
	<-ps.paused // A has read 10 and holds its write
	expireA(ctx, "stock")
	if _, _, err := hybrid.Update(ctx, lockerB, stock, "stock", sell); err != nil {
		t.Fatalf("buyer B: %v", err)
	}
	mid, _, _ := stock.Get(ctx, "stock")
	if err := <-aDone; err != nil {
		t.Fatalf("buyer A: %v", err)
	}
	final, _, err := stock.Get(ctx, "stock")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("redis: after B stock %d; A's late write refused %d time(s) with ErrFenced; A took %d attempts; final stock %d",
		mid, ps.refused.Load(), aAttempts, final)
	if mid != 9 {
		t.Errorf("after B's sale the stock is %d, want 9", mid)
	}
	if ps.refused.Load() != 1 {
		t.Errorf("A's stale write was refused %d times, want 1", ps.refused.Load())
	}
	if final != 10-2 {
		t.Fatalf("final stock %d after two reported sales, want 8", final)
	}
}

// TestHotKey: 8 goroutines, through two lockers (two processes), update one
// key with hybrid.Update; nothing is lost.
func TestHotKey(t *testing.T) {
	fs, lockerA, lockerB, _ := redisBackend(t, time.Second)
	lockers := []hybrid.Locker{lockerA, lockerB}
	counter := cas.NewTyped[int](fs, cas.JSON[int]())
	ctx := redistest.Ctx(t, 60*time.Second)
	var ok atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 25 {
				if _, _, err := hybrid.Update(ctx, lockers[w%2], counter, "hot", func(n int, _ bool) (int, error) { return n + 1, nil }); err != nil {
					t.Error(err)
					return
				}
				ok.Add(1)
			}
		}()
	}
	wg.Wait()
	n, _, err := counter.Get(ctx, "hot")
	if err != nil || int64(n) != ok.Load() || n != 200 {
		t.Fatalf("counter %d (%v), successes %d, want 200", n, err, ok.Load())
	}
	t.Logf("redis: 200 locked updates of one key by 8 goroutines in %v", time.Since(start).Round(time.Millisecond))
}
