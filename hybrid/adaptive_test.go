package hybrid_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/hybrid"
	"github.com/occkit/occkit/occ"
)

func incr(n int, _ bool) (int, error) { return n + 1, nil }

func TestAdaptiveHotAndBackWithoutFlapping(t *testing.T) {
	ctx := context.Background()
	store := newFencedMap()
	counter := cas.NewTyped[int](penaltyStore{store}, cas.JSON[int]())
	var mu sync.Mutex
	var switches []bool
	a := hybrid.NewAdaptive(hybrid.NewLocalLocker(time.Second), hybrid.AdaptiveConfig{
		OnSwitch: func(key string, locked bool, score float64) {
			mu.Lock()
			switches = append(switches, locked)
			mu.Unlock()
		},
	})
	// Cool: sequential updates never lock.
	for range 50 {
		if _, _, err := hybrid.UpdateAdaptive(ctx, a, counter, "k", incr); err != nil {
			t.Fatal(err)
		}
	}
	if st := a.Stats(); st.Switches != 0 {
		t.Fatalf("a key updated sequentially switched %d times", st.Switches)
	}
	// Hot: 8 goroutines on a store where a refused write costs the store
	// work that blocks every other write. Whether the lease path wins
	// here depends on the machine (optimistic retries with backoff
	// serialise themselves too); the policy's choice given measured rates
	// is tested in TestNextEpochPolicy. Here: correct counts, no flapping.
	var ok atomic.Int64
	var wg sync.WaitGroup
	spin := func(n int, _ bool) (int, error) {
		for start := time.Now(); time.Since(start) < 50*time.Microsecond; {
		}
		return n + 1, nil
	}
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 100 {
				if _, _, err := hybrid.UpdateAdaptive(ctx, a, counter, "k", spin, occ.WithMaxAttempts(1000)); err != nil {
					t.Error(err)
					return
				}
				ok.Add(1)
			}
		}()
	}
	wg.Wait()
	// Cool again: sequential updates bring it back to optimistic.
	for range 50 {
		if _, _, err := hybrid.UpdateAdaptive(ctx, a, counter, "k", incr); err != nil {
			t.Fatal(err)
		}
	}
	mu.Lock()
	got := fmt.Sprint(switches)
	last := len(switches) > 0 && switches[len(switches)-1]
	n := len(switches)
	mu.Unlock()
	// No flapping while hot; optimistic again once cool.
	if n > 4 || last {
		t.Fatalf("switches = %s, want at most 4 switches and optimistic at the end", got)
	}
	c, _, _ := counter.Get(ctx, "k")
	if int64(c) != 50+ok.Load()+50 {
		t.Fatalf("counter %d, want %d", c, 100+ok.Load())
	}
}

func TestAdaptiveBoundedMemory(t *testing.T) {
	ctx := context.Background()
	counter := cas.NewTyped(newFencedMap(), cas.JSON[int]())
	a := hybrid.NewAdaptive(hybrid.NewLocalLocker(time.Second), hybrid.AdaptiveConfig{MaxKeys: 64})
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 2000 {
				k := fmt.Sprintf("k%d", (w*2000+i)%5000)
				if _, _, err := hybrid.UpdateAdaptive(ctx, a, counter, k, incr); err != nil {
					t.Error(err)
					return
				}
				if st := a.Stats(); st.Keys > 64+32 {
					t.Errorf("%d keys with statistics, bound 64 (+1 per shard)", st.Keys)
					return
				}
			}
		}()
	}
	wg.Wait()
}

func TestAdaptiveNotFenced(t *testing.T) {
	type plain struct{ cas.Store }
	a := hybrid.NewAdaptive(hybrid.NewLocalLocker(time.Second), hybrid.AdaptiveConfig{})
	_, _, err := hybrid.UpdateAdaptive(context.Background(), a, cas.NewTyped[int](plain{newFencedMap()}, cas.JSON[int]()), "k", incr)
	if err == nil {
		t.Fatal("UpdateAdaptive on an unfenced store succeeded")
	}
}

// slowLocker adds a fixed cost to every grant, as a remote lock service
// whose hand-offs are slow does.
type slowLocker struct {
	hybrid.Locker
	delay time.Duration
}

func (l slowLocker) Acquire(ctx context.Context, key string) (hybrid.Lease, error) {
	time.Sleep(l.delay)
	return l.Locker.Acquire(ctx, key)
}

// TestAdaptivePicksTheCheaperPath: on a hot key, when the lease path costs
// far more than optimistic retries (here a lock whose every grant takes
// 10 ms against updates of microseconds), Adaptive measures it and brings
// the key back to optimistic updates; it must then do at least 0.75× the
// updates pure occ.Update does in the same time, with 8 writers (the rest
// is the cost of trying the lease path first and of probing it).
func TestAdaptivePicksTheCheaperPath(t *testing.T) {
	run := func(update func(ctx context.Context, counter *cas.Typed[int]) error) int64 {
		ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
		defer cancel()
		counter := cas.NewTyped(newFencedMap(), cas.JSON[int]())
		var ok atomic.Int64
		var wg sync.WaitGroup
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for ctx.Err() == nil {
					if update(ctx, counter) == nil {
						ok.Add(1)
					}
				}
			}()
		}
		wg.Wait()
		n, _, _ := counter.Get(context.Background(), "hot")
		if int64(n) != ok.Load() {
			t.Fatalf("counter %d, successes %d", n, ok.Load())
		}
		return ok.Load()
	}
	work := func(n int, _ bool) (int, error) { time.Sleep(20 * time.Microsecond); return n + 1, nil }
	pure := run(func(ctx context.Context, c *cas.Typed[int]) error {
		_, _, err := occ.Update(ctx, c, "hot", work, occ.WithMaxAttempts(1000))
		return err
	})
	a := hybrid.NewAdaptive(slowLocker{hybrid.NewLocalLocker(time.Second), 10 * time.Millisecond}, hybrid.AdaptiveConfig{})
	adaptive := run(func(ctx context.Context, c *cas.Typed[int]) error {
		_, _, err := hybrid.UpdateAdaptive(ctx, a, c, "hot", work, occ.WithMaxAttempts(1000))
		return err
	})
	t.Logf("pure occ %d updates, adaptive %d (%.2f×); adaptive stats %+v", pure, adaptive, float64(adaptive)/float64(pure), a.Stats())
	if float64(adaptive) < 0.75*float64(pure) {
		t.Fatalf("adaptive did %d updates, pure occ %d: below 0.75× while the lease path is the slower one", adaptive, pure)
	}
}

// penaltyStore makes every refused write cost the store 300 µs of work
// that nothing else can use meanwhile (a server rolling back, say).
type penaltyStore struct{ *fencedMap }

var penalty sync.Mutex

// waitPenalty waits while a refusal is being paid.
func waitPenalty() {
	penalty.Lock()
	defer penalty.Unlock()
}

func burn() {
	penalty.Lock()
	for start := time.Now(); time.Since(start) < 300*time.Microsecond; {
	}
	penalty.Unlock()
}

func (p penaltyStore) CompareAndSwap(ctx context.Context, key string, expected cas.Version, value []byte) (cas.Version, error) {
	waitPenalty() // the store is busy while a refusal is being paid
	v, err := p.fencedMap.CompareAndSwap(ctx, key, expected, value)
	if errors.Is(err, cas.ErrConflict) {
		burn()
	}
	return v, err
}

func (p penaltyStore) CompareAndSwapFenced(ctx context.Context, key string, expected cas.Version, token uint64, value []byte) (cas.Version, error) {
	waitPenalty()
	v, err := p.fencedMap.CompareAndSwapFenced(ctx, key, expected, token, value)
	if errors.Is(err, cas.ErrConflict) {
		burn()
	}
	return v, err
}
