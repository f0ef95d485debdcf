package pgcas_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/occkit/occkit/adapters/pgcas"
	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/internal/pgtest"
	"github.com/occkit/occkit/occ"
)

// TestExclusiveHolderPausedPastItsTimeout is the fault of a process
// pause: the holder of an exclusive update (occ.Update's escalation)
// stops for longer than Config.ExclusiveTimeout between its locking read
// and its write. The others wait for the row only that long: the server
// ends the holder's idle session, which frees the row, and they proceed.
// When the holder resumes, its write is refused (a conflict: nothing
// written); the increments of the others all count, none twice.
func TestExclusiveHolderPausedPastItsTimeout(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pool := pgtest.Pool(t)
	s, err := pgcas.New(pool, pgcas.Config{ExclusiveTimeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.CreateTable(ctx); err != nil {
		t.Fatal(err)
	}
	counters := cas.NewTyped(cas.Store(s), cas.JSON[int]())
	if _, err := counters.CompareAndSwap(ctx, "n", 0, 100); err != nil {
		t.Fatal(err)
	}

	held := make(chan struct{})
	paused := make(chan error, 1)
	go func() {
		_, err := s.UpdateExclusive(ctx, "n", func(cur cas.Item) ([]byte, bool, error) {
			close(held)
			time.Sleep(time.Second) // the pause: five times the timeout
			return []byte("1000"), true, nil
		})
		paused <- err
	}()
	<-held

	// The others: another "process" (its own Store, so no turns shared)
	// increments 20 times through occ.Update at default options.
	other, err := pgcas.New(pool, pgcas.Config{})
	if err != nil {
		t.Fatal(err)
	}
	others := cas.NewTyped(cas.Store(other), cas.JSON[int]())
	start := time.Now()
	var wg sync.WaitGroup
	var firstDone time.Duration
	var mu sync.Mutex
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

	err = <-paused
	if !errors.Is(err, cas.ErrConflict) {
		t.Fatalf("the paused holder's write: %v, want a conflict (its hold ended, nothing written)", err)
	}
	got, _, err := counters.Get(ctx, "n")
	if err != nil || got != 120 {
		t.Fatalf("counter = %d (%v), want 100 + the others' 20 and not the paused holder's 1000", got, err)
	}
	if firstDone >= time.Second {
		t.Fatalf("the others waited %v, until the holder resumed: the timeout freed nothing", firstDone)
	}
	t.Logf("the others' first increment after %v (timeout 200ms, pause 1s)", firstDone)
}
