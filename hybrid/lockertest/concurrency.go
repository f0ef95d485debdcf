package lockertest

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/occkit/occkit/hybrid"
)

var concurrencyTests = []test{
	{"MutualExclusion", func(t *testing.T, h *Harness) {
		ls := h.lockers(t, 2)
		workers, rounds := h.workers(), h.rounds()
		var (
			mu      sync.Mutex
			holder  hybrid.Lease // the live lease inside, if any
			tokens  []uint64     // in the order the holders entered
			counter int          // read and written in two steps: a second holder inside loses an update
			lost    int          // leases that ended while their holder was inside
			wg      sync.WaitGroup
		)
		ctx := h.ctx(t)
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range rounds {
					g, err := ls[w%2].Acquire(ctx, "k")
					if err != nil {
						t.Errorf("worker %d: acquire: %v", w, err)
						return
					}
					mu.Lock()
					if holder != nil && holder.Context().Err() == nil {
						t.Errorf("lease %d granted while lease %d is held", g.Token(), holder.Token())
					}
					holder = g
					tokens = append(tokens, g.Token())
					v := counter
					mu.Unlock()
					runtime.Gosched()
					mu.Lock()
					counter = v + 1
					if holder == g {
						holder = nil
					}
					if g.Context().Err() != nil {
						lost++
					}
					mu.Unlock()
					rctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
					if err := g.Release(rctx); err != nil && g.Context().Err() == nil {
						t.Errorf("worker %d: release: %v", w, err)
					}
					cancel()
				}
			}()
		}
		wg.Wait()
		if t.Failed() {
			return
		}
		for i := 1; i < len(tokens); i++ {
			if tokens[i] <= tokens[i-1] {
				t.Fatalf("grant %d has token %d after %d: tokens must grow with every grant of a key", i, tokens[i], tokens[i-1])
			}
		}
		want := workers * rounds
		switch {
		case lost > 0 && counter < want-lost:
			t.Fatalf("counter %d after %d grants, %d of them lost inside: more updates lost than leases", counter, want, lost)
		case lost > 0:
			t.Logf("%d of %d leases ended while held (the machine stalled past the TTL); counter %d", lost, want, counter)
		case counter != want:
			t.Fatalf("counter %d after %d exclusive grants: two holders were inside at once", counter, want)
		}
	}},
	{"WaitersWoken", func(t *testing.T, h *Harness) {
		// A waiter is woken by the release it waits for: it gets the lease
		// well before the released lease would have expired (a locker that
		// renews: within seconds, where a waiter left asleep would wait for
		// ever or a whole TTL).
		bound := max(h.TTL, 2*time.Second)
		if !h.Renews {
			if h.TTL < time.Second {
				t.Skipf("skipped: a TTL of %v is too short to tell a waiter woken by a release from one woken by the expiry", h.TTL)
			}
			bound = h.TTL / 2
		}
		ls := h.lockers(t, 2)
		ctx := h.ctx(t)
		first := h.acquire(t, ls[0], "k")
		const waiters = 3
		type grant struct {
			g   hybrid.Lease
			at  time.Time
			err error
		}
		granted := make(chan grant, waiters) // the test releases each grant in turn
		for w := range waiters {
			go func() {
				g, err := ls[(w+1)%2].Acquire(ctx, "k")
				granted <- grant{g, time.Now(), err}
			}()
		}
		// Give the waiters time to start waiting; one that has not yet
		// only makes the check weaker.
		time.Sleep(50 * time.Millisecond)
		prev := first
		for i := range waiters {
			released := time.Now()
			release(t, prev)
			var gr grant
			select {
			case gr = <-granted:
			case <-time.After(h.waitLimit()):
				t.Fatalf("waiter %d not granted %v after the release", i, h.waitLimit())
			}
			if gr.err != nil {
				t.Fatalf("waiter %d: %v", i, gr.err)
			}
			t.Cleanup(func() { _ = gr.g.Release(context.Background()) })
			if d := gr.at.Sub(released); d > bound {
				t.Errorf("waiter %d got the lease %v after the release of lease %d, want within %v: %s",
					i, d.Round(time.Millisecond), prev.Token(), bound, wokenHint(h))
			}
			if gr.g.Token() <= prev.Token() {
				t.Errorf("waiter %d got token %d after %d", i, gr.g.Token(), prev.Token())
			}
			prev = gr.g
		}
		release(t, prev)
	}},
}

func wokenHint(h *Harness) string {
	if h.Renews {
		return "the waiter was not woken by the release"
	}
	return fmt.Sprintf("the waiter was woken by the expiry (TTL %v), not by the release", h.TTL)
}
