package occ_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/occkit/occkit/adapters/memcas"
	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/occ"
)

// rowLocked is a memcas store with cas.Exclusive as a database offers it:
// UpdateExclusive holds the key (a row lock) from its read to its write,
// and any other write of the key waits until the holder is done.
type rowLocked struct {
	*memcas.Store
	mu    sync.Mutex
	held  map[string]chan struct{}
	holds atomic.Int64
	hint  int // ExclusiveAfter's answer (cas.ExclusiveAfterHint)
}

// ExclusiveAfter implements cas.ExclusiveAfterHint (0: occ's default).
func (s *rowLocked) ExclusiveAfter() int { return s.hint }

func newRowLocked() *rowLocked {
	return &rowLocked{Store: memcas.New(), held: map[string]chan struct{}{}}
}

// wait blocks until key is not held, then holds it if hold.
func (s *rowLocked) wait(ctx context.Context, key string, hold bool) (release func(), err error) {
	for {
		s.mu.Lock()
		ch, ok := s.held[key]
		if !ok {
			if hold {
				ch = make(chan struct{})
				s.held[key] = ch
			}
			s.mu.Unlock()
			return func() {
				if hold {
					s.mu.Lock()
					delete(s.held, key)
					s.mu.Unlock()
					close(ch)
				}
			}, nil
		}
		s.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

func (s *rowLocked) CompareAndSwap(ctx context.Context, key string, expected cas.Version, value []byte) (cas.Version, error) {
	if _, err := s.wait(ctx, key, false); err != nil {
		return 0, err
	}
	return s.Store.CompareAndSwap(ctx, key, expected, value)
}

func (s *rowLocked) UpdateExclusive(ctx context.Context, key string, fn func(cas.Item) ([]byte, bool, error)) (cas.Version, error) {
	release, err := s.wait(ctx, key, true)
	if err != nil {
		return 0, err
	}
	defer release()
	s.holds.Add(1)
	it, err := s.Store.Get(ctx, key)
	if errors.Is(err, cas.ErrNotFound) {
		it, err = cas.Item{Key: key}, nil
	}
	if err != nil {
		return 0, err
	}
	next, write, err := fn(it)
	if err != nil || !write {
		return it.Version, err
	}
	return s.Store.CompareAndSwap(ctx, key, it.Version, next)
}

// elsewhere is a writer in another process getting in between a call's
// read and write: it increments the key through its own calls (no turns,
// no escalation), and is given 20 ms, which is enough unless the key is
// held (then it writes once the holder is done).
func elsewhere(ctx context.Context, t *testing.T, wg *sync.WaitGroup, s *cas.Typed[int], n *atomic.Int64) {
	done := make(chan struct{})
	wg.Go(func() {
		defer close(done)
		_, _, err := occ.Update(ctx, s, "n", func(m int, _ bool) (int, error) { return m + 1, nil },
			occ.WithTurns(false), occ.WithExclusiveAfter(0), occ.WithMaxAttempts(1000))
		if err != nil {
			t.Errorf("the writer elsewhere: %v", err)
			return
		}
		n.Add(1)
	})
	select {
	case <-done:
	case <-time.After(20 * time.Millisecond):
	}
}

// TestUpdateEscalatesToExclusive: a writer elsewhere (another process,
// as far as the call's turns know) gets in between every read and write
// of the call. With escalation off the call loses every attempt and gives
// up; at the defaults it loses DefaultExclusiveAfter writes (or as many
// as the store's cas.ExclusiveAfterHint says), then holds the key for one
// attempt and writes. The writer elsewhere loses nothing: the counter ends
// at every success of both.
func TestUpdateEscalatesToExclusive(t *testing.T) {
	for _, tc := range []struct {
		name     string
		hint     int // the store's ExclusiveAfter
		opts     []occ.Option
		wantFail bool
		want     int // the lost writes before the exclusive attempt
	}{
		{"off", 0, []occ.Option{occ.WithExclusiveAfter(0)}, true, 0},
		{"off-over-hint", 3, []occ.Option{occ.WithExclusiveAfter(0)}, true, 0},
		{"default", 0, nil, false, occ.DefaultExclusiveAfter},
		{"after1", 0, []occ.Option{occ.WithExclusiveAfter(1)}, false, 1},
		{"hint3", 3, nil, false, 3},
		{"hint-negative", -1, nil, false, occ.DefaultExclusiveAfter},
		{"after1-over-hint3", 3, []occ.Option{occ.WithExclusiveAfter(1)}, false, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			s := newRowLocked()
			s.hint = tc.hint
			counters := cas.NewTyped(cas.Store(s), cas.JSON[int]())
			var rivals atomic.Int64
			var attempts, exclusiveAt int
			obs := occ.ObserverFuncs{Attempt: func(_ context.Context, a occ.Attempt) {
				attempts = a.Number
				if a.Exclusive {
					if exclusiveAt != 0 {
						t.Errorf("attempts %d and %d both reported exclusive", exclusiveAt, a.Number)
					}
					exclusiveAt = a.Number
				}
			}}
			var wg sync.WaitGroup
			_, _, err := occ.Update(ctx, counters, "n", func(n int, _ bool) (int, error) {
				elsewhere(ctx, t, &wg, counters, &rivals)
				return n + 1, nil
			}, append([]occ.Option{occ.WithObserver(obs)}, tc.opts...)...)
			wg.Wait()
			got, _, gerr := counters.Get(ctx, "n")
			if gerr != nil {
				t.Fatal(gerr)
			}
			switch {
			case tc.wantFail:
				if !errors.Is(err, occ.ErrAttemptsExhausted) || s.holds.Load() != 0 || exclusiveAt != 0 {
					t.Fatalf("escalation off: %v with %d exclusive attempts (observed: attempt %d), want occ.ErrAttemptsExhausted and none", err, s.holds.Load(), exclusiveAt)
				}
				if got != int(rivals.Load()) {
					t.Fatalf("counter %d, want the writer elsewhere's %d", got, rivals.Load())
				}
			default:
				want := tc.want
				if err != nil || s.holds.Load() != 1 || attempts != want+1 {
					t.Fatalf("Update: %v after %d attempts, %d exclusive; want success at attempt %d, the only exclusive one", err, attempts, s.holds.Load(), want+1)
				}
				if exclusiveAt != want+1 {
					t.Fatalf("the observer saw attempt %d as exclusive, want %d (Attempt.Exclusive)", exclusiveAt, want+1)
				}
				if got != int(rivals.Load())+1 {
					t.Fatalf("counter %d, want the writer elsewhere's %d + 1", got, rivals.Load())
				}
			}
		})
	}
}

// TestCombinedBatchEscalatesToExclusive: the same for a combined batch
// whose writes keep losing to a writer elsewhere.
func TestCombinedBatchEscalatesToExclusive(t *testing.T) {
	ctx := context.Background()
	s := newRowLocked()
	counters := cas.NewTyped(cas.Store(s), cas.JSON[int]())
	cb := occ.NewCombiner(occ.WithQueueFromStart())
	var rivals, ok, exclusive atomic.Int64
	var wg, rivalsWG sync.WaitGroup
	// The batches run under their leaders' options: each caller's
	// observer, told of the batches it leads.
	obs := occ.WithObserver(occ.ObserverFuncs{Attempt: func(_ context.Context, a occ.Attempt) {
		if a.Exclusive {
			exclusive.Add(1)
		}
	}})
	for range 4 {
		wg.Go(func() {
			_, _, err := occ.Update(ctx, counters, "n", func(n int, _ bool) (int, error) {
				elsewhere(ctx, t, &rivalsWG, counters, &rivals)
				return n + 1, nil
			}, occ.WithCombiner(cb), obs)
			if err != nil {
				t.Errorf("combined Update: %v", err)
				return
			}
			ok.Add(1)
		})
	}
	wg.Wait()
	rivalsWG.Wait()
	got, _, err := counters.Get(ctx, "n")
	if err != nil || int64(got) != rivals.Load()+ok.Load() || ok.Load() != 4 {
		t.Fatalf("counter %d (%v), want %d from elsewhere + %d combined (4 expected)", got, err, rivals.Load(), ok.Load())
	}
	if s.holds.Load() == 0 {
		t.Fatal("no batch ran exclusively")
	}
	if exclusive.Load() != s.holds.Load() {
		t.Fatalf("%d attempts observed as exclusive, the store held the key %d times", exclusive.Load(), s.holds.Load())
	}
}
