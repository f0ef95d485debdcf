package occ

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/occkit/occkit/adapters/memcas"
	"github.com/occkit/occkit/cas"
)

// getCounter counts the reads that reach its store.
type getCounter struct {
	*bumpingStore
	gets atomic.Int64
}

func (s *getCounter) Get(ctx context.Context, key string) (cas.Item, error) {
	s.gets.Add(1)
	return s.bumpingStore.Get(ctx, key)
}

// TestRecentStateSkipsTheRead: after a key's line ends, the process's next
// Update of it starts from the state the line's last holder wrote,
// without reading, and remembers what it writes; a state overwritten
// elsewhere meanwhile costs a conflict and nothing else (the result is
// exact); past recentFor, and for a call that takes no turns, the key is
// read.
func TestRecentStateSkipsTheRead(t *testing.T) {
	unboundedHolds(t)
	t.Cleanup(func() {
		for i := range recentTable {
			if recentTable[i].p.Swap(nil) != nil {
				recentLive.Add(-1)
			}
		}
	})
	ctx := context.Background()
	inner := memcas.New()
	store := &getCounter{bumpingStore: &bumpingStore{Store: inner, n: 2}}
	counter := cas.NewTyped[int](store, cas.JSON[int]())
	update := func(want int, opts ...Option) (gets int64) {
		t.Helper()
		g0 := store.gets.Load()
		n, _, err := Update(ctx, counter, "k", incrInt, opts...)
		if err != nil || n != want {
			t.Fatalf("Update: %d, %v; want %d", n, err, want)
		}
		return store.gets.Load() - g0
	}
	// Two conflicts open the key's line; the call writes and ends it.
	update(101)
	if lineFor(store, "k") != nil {
		t.Fatal("the line outlived its only call")
	}
	if gets := update(102); gets != 0 {
		t.Fatalf("the call after the line read the key %d times, want 0", gets)
	}
	if gets := update(103); gets != 0 {
		t.Fatalf("the call after a remembered write read the key %d times, want 0", gets)
	}
	// A writer elsewhere: the remembered state is stale.
	it, _ := inner.Get(ctx, "k")
	if _, err := inner.CompareAndSwap(ctx, "k", it.Version, []byte("200")); err != nil {
		t.Fatal(err)
	}
	update(201)
	if v, _, _ := counter.Get(ctx, "k"); v != 201 {
		t.Fatalf("counter %d, want 201", v)
	}
	if gets := update(202, WithTurns(false)); gets != 1 {
		t.Fatalf("a call without turns read the key %d times, want 1", gets)
	}
	time.Sleep(recentFor + 10*time.Millisecond)
	if gets := update(203); gets != 1 {
		t.Fatalf("a call past recentFor read the key %d times, want 1", gets)
	}
}
