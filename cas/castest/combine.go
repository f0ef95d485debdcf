package castest

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/occ"
)

// writeCounter counts the conditional writes that reach the store.
type writeCounter struct {
	cas.Store
	writes atomic.Int64
}

func (s *writeCounter) CompareAndSwap(ctx context.Context, key string, expected cas.Version, value []byte) (cas.Version, error) {
	s.writes.Add(1)
	return s.Store.CompareAndSwap(ctx, key, expected, value)
}

// testCombinedIncrements runs 32 goroutines × 200 increments of one key
// through one occ.Combiner, twice: with the default combiner (the key
// queues once it has conflicted) and with occ.WithQueueFromStart. Each
// time the counter must be exact and the values handed back to the
// callers exactly 1..6400 with no repeat; queueing from the start, fewer
// conditional writes must have reached the store than updates. (By
// default a key whose batches carry one caller each cools again, and on
// an in-process store, where an update takes a microsecond, most batches
// do: there a cooled key's next conflict can cost more writes than the
// batches saved.)
func testCombinedIncrements(t *testing.T, h *Harness, s cas.Store) {
	for _, mode := range []struct {
		name string
		opts []occ.CombinerOption
	}{
		{"Default", nil},
		{"QueueFromStart", []occ.CombinerOption{occ.WithQueueFromStart()}},
	} {
		t.Run(mode.name, func(t *testing.T) {
			testCombinedIncrementsWith(t, h, s, "hot-"+mode.name, occ.NewCombiner(mode.opts...), mode.opts != nil)
		})
	}
}

func testCombinedIncrementsWith(t *testing.T, h *Harness, s cas.Store, key string, cb *occ.Combiner, fewerWrites bool) {
	const workers, each = 32, 200
	ctx := context.Background()
	store := &writeCounter{Store: s}
	counter := cas.NewTyped(cas.Store(store), cas.JSON[int]())
	got := make([][]int, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				n, _, err := occ.Update(ctx, counter, key, func(n int, _ bool) (int, error) { return n + 1, nil },
					occ.WithCombiner(cb), occ.WithMaxAttempts(1000))
				if err != nil {
					t.Errorf("combined update: %v", err)
					return
				}
				got[w] = append(got[w], n)
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	h.settle(t, func() error {
		final, _, err := counter.Get(ctx, key)
		switch {
		case errors.Is(err, cas.ErrNotFound):
			return fmt.Errorf("get: %w", err)
		case err != nil:
			return wrong("get: %w", err)
		case final < workers*each:
			// A stale read shows fewer.
			return fmt.Errorf("counter = %d after %d combined increments: updates lost", final, workers*each)
		case final > workers*each:
			return wrong("counter = %d after %d combined increments: updates doubled", final, workers*each)
		}
		return nil
	})
	var all []int
	for _, g := range got {
		all = append(all, g...)
	}
	sort.Ints(all)
	for i, n := range all {
		if n != i+1 {
			t.Fatalf("values returned to callers: position %d holds %d, want %d (a repeat or a gap)", i, n, i+1)
		}
	}
	writes := store.writes.Load()
	t.Logf("%d combined updates, %d writes reached the store (%+v)", workers*each, writes, cb.Stats())
	if fewerWrites && h.StaleReads {
		// A batch whose read was stale conflicts and writes again: count
		// the batches, each one turn of one write.
		if b := cb.Stats().Batches; b >= workers*each {
			t.Fatalf("%d batches for %d updates: nothing was combined", b, workers*each)
		}
		return
	}
	if fewerWrites && writes >= workers*each {
		t.Fatalf("%d writes for %d updates: nothing was combined", writes, workers*each)
	}
}
