package rediscas_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/occkit/occkit/adapters/rediscas"
	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/internal/redistest"
	"github.com/occkit/occkit/occ"
)

// TestExclusiveHolderPausedPastItsTTL is the fault of a process pause:
// the holder of an exclusive update stops between its read and its write
// for five times Config.ExclusiveTTL. The others are refused only until
// the hold expires by the server's clock, then proceed; the holder's late
// write is refused (its version is gone); every increment of the others
// counts, none twice.
func TestExclusiveHolderPausedPastItsTTL(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cli := redistest.Client(t)
	prefix := redistest.Prefix(t)
	s, err := rediscas.New(cli, rediscas.Config{Prefix: prefix, ExclusiveTTL: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	counters := cas.NewTyped(cas.Store(s), cas.JSON[int]())
	if _, err := counters.CompareAndSwap(ctx, "n", 0, 100); err != nil {
		t.Fatal(err)
	}
	held := make(chan struct{})
	paused := make(chan error, 1)
	go func() {
		_, err := s.UpdateExclusive(ctx, "n", func(cas.Item) ([]byte, bool, error) {
			close(held)
			time.Sleep(time.Second)
			return []byte("1000"), true, nil
		})
		paused <- err
	}()
	<-held

	other, err := rediscas.New(cli, rediscas.Config{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	others := cas.NewTyped(cas.Store(other), cas.JSON[int]())
	start := time.Now()
	var mu sync.Mutex
	var firstDone time.Duration
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 5 {
				if _, _, err := occ.Update(ctx, others, "n", func(n int, _ bool) (int, error) { return n + 1, nil }); err != nil {
					t.Errorf("an increment of the others: %v", err)
					return
				}
				mu.Lock()
				if firstDone == 0 {
					firstDone = time.Since(start)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if err := <-paused; !errors.Is(err, cas.ErrConflict) {
		t.Fatalf("the paused holder's write: %v, want a conflict", err)
	}
	got, _, err := counters.Get(ctx, "n")
	if err != nil || got != 120 {
		t.Fatalf("counter = %d (%v), want 100 + the others' 20 and not the paused holder's 1000", got, err)
	}
	if firstDone >= time.Second {
		t.Fatalf("the others waited %v, until the holder resumed: the hold never expired", firstDone)
	}
	t.Logf("the others' first increment after %v (TTL 200ms, pause 1s)", firstDone)
}
