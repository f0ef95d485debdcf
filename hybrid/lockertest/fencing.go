package lockertest

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/hybrid"
	"github.com/occkit/occkit/occ"
)

// store returns the harness's fenced store, or skips the test.
func (h *Harness) store(t *testing.T) cas.FencedStore {
	t.Helper()
	if h.NewStore == nil {
		t.Skip("skipped: the harness has no NewStore")
	}
	s := h.NewStore(t)
	if s == nil {
		t.Fatal("lockertest: NewStore returned nil")
	}
	return s
}

func sell(n int, _ bool) (int, error) {
	if n == 0 {
		return 0, errors.New("sold out")
	}
	return n - 1, nil
}

var fencingTests = []test{
	{"SupersededWriteFenced", func(t *testing.T, h *Harness) {
		s := h.store(t)
		ls := h.lockers(t, 2)
		ctx := h.ctx(t)
		first := h.acquire(t, ls[0], "stock")
		v1, err := s.CompareAndSwapFenced(ctx, "stock", 0, first.Token(), []byte("10"))
		if err != nil {
			t.Fatalf("fenced write of the first holder: %v", err)
		}
		// The first holder is superseded: it loses its lease (or, for a
		// locker that keeps it, gives it up).
		if h.LoseLease != nil || !h.Renews {
			h.lose(t, first)
		} else {
			release(t, first)
		}
		second := h.acquire(t, ls[1], "stock")
		v2, err := s.CompareAndSwapFenced(ctx, "stock", v1, second.Token(), []byte("9"))
		if err != nil {
			t.Fatalf("fenced write of the second holder: %v", err)
		}
		// The first holder wakes up and writes what it computed, even with
		// the right version: refused by the fence, not as a conflict.
		_, err = s.CompareAndSwapFenced(ctx, "stock", v2, first.Token(), []byte("9"))
		if !errors.Is(err, cas.ErrFenced) || errors.Is(err, cas.ErrConflict) {
			t.Fatalf("late fenced write of superseded lease %d after lease %d wrote: %v, want cas.ErrFenced", first.Token(), second.Token(), err)
		}
		it, err := s.Get(ctx, "stock")
		if err != nil || string(it.Value) != "9" || it.Version != v2 {
			t.Fatalf("stock = %q v%d, %v; want the second holder's %q at v%d", it.Value, it.Version, err, "9", v2)
		}
		release(t, second)
	}},
	{"UpdateCounts", func(t *testing.T, h *Harness) {
		s := h.store(t)
		ls := h.lockers(t, 2)
		counter := cas.NewTyped(s, cas.JSON[int]())
		ctx := h.ctx(t)
		workers, rounds := h.workers(), h.rounds()
		var ok atomic.Int64
		var wg sync.WaitGroup
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range rounds {
					if _, _, err := hybrid.Update(ctx, ls[w%2], counter, "hot", func(n int, _ bool) (int, error) { return n + 1, nil }); err != nil {
						t.Errorf("worker %d: hybrid.Update: %v", w, err)
						return
					}
					ok.Add(1)
				}
			}()
		}
		wg.Wait()
		n, _, err := counter.Get(ctx, "hot")
		if err != nil {
			t.Fatal(err)
		}
		if int64(n) != ok.Load() || n != workers*rounds {
			t.Fatalf("counter %d after %d successful updates, want %d", n, ok.Load(), workers*rounds)
		}
	}},
	{"UpdateStalledHolder", func(t *testing.T, h *Harness) {
		// Stock 10. Buyer A takes the lease, reads 10 and stalls just
		// before its write, until its lease is lost. Buyer B takes the
		// lease with a larger token and sells: 9. A's write, sent with its
		// old token, is refused with cas.ErrFenced; A retries with a fresh
		// lease and sells: 8.
		if h.LoseLease == nil && h.Renews {
			t.Skip("skipped: the locker renews its leases and the harness has no LoseLease")
		}
		fs := h.store(t)
		ls := h.lockers(t, 2)
		ps := &stallingStore{FencedStore: fs, stalled: make(chan struct{}), resume: make(chan struct{})}
		ps.armed.Store(true)
		stock := cas.NewTyped[int](ps, cas.JSON[int]())
		ctx := h.ctx(t)
		if _, err := stock.CompareAndSwap(ctx, "stock", 0, 10); err != nil {
			t.Fatal(err)
		}
		lockerA := &recordingLocker{Locker: ls[0]}
		var attempts int
		aDone := make(chan error, 1)
		go func() {
			_, _, err := hybrid.Update(ctx, lockerA, stock, "stock", sell,
				occ.WithObserver(occ.ObserverFuncs{Call: func(_ context.Context, c occ.Call) { attempts = c.Attempts }}))
			aDone <- err
		}()
		select {
		case <-ps.stalled: // A has read 10 and holds its write
		case err := <-aDone:
			t.Fatalf("buyer A ended before its write stalled: %v", err)
		}
		h.lose(t, lockerA.last())
		if _, _, err := hybrid.Update(ctx, ls[1], stock, "stock", sell); err != nil {
			t.Fatalf("buyer B: %v", err)
		}
		mid, _, err := stock.Get(ctx, "stock")
		if err != nil {
			t.Fatal(err)
		}
		close(ps.resume)
		if err := <-aDone; err != nil {
			t.Fatalf("buyer A: %v", err)
		}
		final, _, err := stock.Get(ctx, "stock")
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("after B stock %d; A's late write refused %d time(s); A took %d attempts; final stock %d", mid, ps.refused.Load(), attempts, final)
		if mid != 9 {
			t.Errorf("after B's sale the stock is %d, want 9", mid)
		}
		if ps.refused.Load() != 1 {
			t.Errorf("A's stale write was refused %d times with cas.ErrFenced, want once", ps.refused.Load())
		}
		if final != 8 {
			t.Fatalf("final stock %d after two reported sales from 10, want 8", final)
		}
	}},
}

// stallingStore stalls the first fenced write after it is armed until
// resume is closed, as a process paused between its lease check and its
// write would; the write is then sent whatever the caller's context, as a
// request already in the socket would be.
type stallingStore struct {
	cas.FencedStore
	armed   atomic.Bool
	stalled chan struct{} // closed when the stall starts
	resume  chan struct{}
	refused atomic.Int64
}

func (p *stallingStore) CompareAndSwapFenced(ctx context.Context, key string, expected cas.Version, token uint64, value []byte) (cas.Version, error) {
	if p.armed.CompareAndSwap(true, false) {
		close(p.stalled)
		<-p.resume
		ctx = context.WithoutCancel(ctx)
	}
	v, err := p.FencedStore.CompareAndSwapFenced(ctx, key, expected, token, value)
	if errors.Is(err, cas.ErrFenced) {
		p.refused.Add(1)
	}
	return v, err
}

// recordingLocker remembers the last lease it granted.
type recordingLocker struct {
	hybrid.Locker
	mu    sync.Mutex
	lease hybrid.Lease
}

func (r *recordingLocker) Acquire(ctx context.Context, key string) (hybrid.Lease, error) {
	g, err := r.Locker.Acquire(ctx, key)
	if err == nil {
		r.mu.Lock()
		r.lease = g
		r.mu.Unlock()
	}
	return g, err
}

func (r *recordingLocker) last() hybrid.Lease {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lease
}
