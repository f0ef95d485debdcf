package hybrid_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/occkit/occkit/adapters/memcas"
	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/hybrid"
	"github.com/occkit/occkit/occ"
)

func incr(n int, _ bool) (int, error) { return n + 1, nil }

func TestAdaptiveSwitchesHotKeyAndBack(t *testing.T) {
	ctx := context.Background()
	store := memcas.New()
	counter := cas.NewTyped(store, cas.JSON[int]())
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
	// Hot: 8 goroutines with work inside the critical section.
	var ok atomic.Int64
	var wg sync.WaitGroup
	slow := func(n int, _ bool) (int, error) { time.Sleep(200 * time.Microsecond); return n + 1, nil }
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 40 {
				if _, _, err := hybrid.UpdateAdaptive(ctx, a, counter, "k", slow, occ.WithMaxAttempts(100)); err != nil {
					t.Error(err)
					return
				}
				ok.Add(1)
			}
		}()
	}
	wg.Wait()
	mu.Lock()
	hot := len(switches) > 0 && switches[0]
	mu.Unlock()
	if !hot {
		t.Fatalf("8 concurrent writers did not make the key switch to the lease path")
	}
	// Cool again: sequential updates bring it back to optimistic.
	for range 50 {
		if _, _, err := hybrid.UpdateAdaptive(ctx, a, counter, "k", incr); err != nil {
			t.Fatal(err)
		}
	}
	mu.Lock()
	got := fmt.Sprint(switches)
	mu.Unlock()
	if got != "[true false]" {
		t.Fatalf("switches = %s, want [true false] (locked when hot, back when cool, no flapping)", got)
	}
	n, _, _ := counter.Get(ctx, "k")
	if int64(n) != 50+ok.Load()+50 {
		t.Fatalf("counter %d, want %d", n, 100+ok.Load())
	}
}

func TestAdaptiveBoundedMemory(t *testing.T) {
	ctx := context.Background()
	counter := cas.NewTyped(memcas.New(), cas.JSON[int]())
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
	_, _, err := hybrid.UpdateAdaptive(context.Background(), a, cas.NewTyped[int](plain{memcas.New()}, cas.JSON[int]()), "k", incr)
	if err == nil {
		t.Fatal("UpdateAdaptive on an unfenced store succeeded")
	}
}
