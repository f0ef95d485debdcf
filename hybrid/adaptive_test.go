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

// adaptiveStore is a small in-memory cas.FencedStore for the adaptive
// tests (hybrid's tests use no adapter): one mutex, versions from one
// counter, conflicts that carry the current item, and an optional delay
// per call, as a networked store has.
type adaptiveStore struct {
	mu     sync.Mutex
	next   cas.Version
	items  map[string]cas.Item
	fences map[string]uint64
	rtt    time.Duration
	writes atomic.Int64
}

func newAdaptiveStore(rtt time.Duration) *adaptiveStore {
	return &adaptiveStore{items: map[string]cas.Item{}, fences: map[string]uint64{}, rtt: rtt}
}

func (s *adaptiveStore) wait() {
	if s.rtt > 0 {
		time.Sleep(s.rtt)
	}
}

func (s *adaptiveStore) Get(ctx context.Context, key string) (cas.Item, error) {
	s.wait()
	s.mu.Lock()
	defer s.mu.Unlock()
	it, ok := s.items[key]
	if !ok {
		return cas.Item{}, cas.ErrNotFound
	}
	return it, nil
}

func (s *adaptiveStore) CompareAndSwap(ctx context.Context, key string, expected cas.Version, value []byte) (cas.Version, error) {
	return s.write(key, expected, 0, false, value)
}

func (s *adaptiveStore) CompareAndSwapFenced(ctx context.Context, key string, expected cas.Version, token uint64, value []byte) (cas.Version, error) {
	return s.write(key, expected, token, true, value)
}

func (s *adaptiveStore) write(key string, expected cas.Version, token uint64, fenced bool, value []byte) (cas.Version, error) {
	s.wait()
	s.writes.Add(1)
	s.mu.Lock()
	defer s.mu.Unlock()
	cur := s.items[key]
	if cur.Version != expected {
		return 0, &cas.ConflictError{Key: key, Expected: expected, Current: cur, HasCurrent: true}
	}
	if fenced {
		if token < s.fences[key] {
			return 0, cas.ErrFenced
		}
		s.fences[key] = token
	}
	s.next++
	s.items[key] = cas.Item{Key: key, Value: append([]byte(nil), value...), Version: s.next}
	return s.next, nil
}

func (s *adaptiveStore) CompareAndDelete(ctx context.Context, key string, expected cas.Version) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.items[key].Version != expected {
		return &cas.ConflictError{Key: key, Expected: expected}
	}
	delete(s.items, key)
	return nil
}

// TestAdaptiveOneProcessStaysOptimistic: every writer of a hot key in one
// process. Combining leaves no conflict, so the model never locks the key
// (no update is spent on the lease path), every increment is counted, and
// far fewer writes reach the store than updates.
func TestAdaptiveOneProcessStaysOptimistic(t *testing.T) {
	ctx := context.Background()
	store := newAdaptiveStore(100 * time.Microsecond)
	counter := cas.NewTyped[int](store, cas.JSON[int]())
	a := hybrid.NewAdaptive(hybrid.NewLocalLocker(time.Second), hybrid.AdaptiveConfig{})
	const workers, each = 8, 150
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				if _, _, err := hybrid.UpdateAdaptive(ctx, a, counter, "hot", incr); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	n, _, _ := counter.Get(ctx, "hot")
	st := a.Stats()
	t.Logf("counter %d, %d writes, stats %+v", n, store.writes.Load(), st)
	if n != workers*each {
		t.Fatalf("counter %d, want %d", n, workers*each)
	}
	if st.Switches != 0 || st.Locked != 0 {
		t.Fatalf("the key was locked with all its writers in one process: %+v", st)
	}
	if w := store.writes.Load(); w >= workers*each {
		t.Fatalf("%d writes for %d updates: nothing combined", w, workers*each)
	}
}

// TestAdaptiveContendedAcrossProcessesStaysOptimistic: two Adaptives
// stand for two processes sharing a store and a lock service a round trip
// away; their updates of one key spend time in mutate, so their
// optimistic writes keep conflicting. But each attempt still lets a batch
// through in about the time a lease would hold the key for one update,
// so the lease path cannot carry more: the key stays optimistic, and
// nothing is lost. (Whether an update ran out of attempts and measured
// the lease path here varies from run to run; Leased says. The decision
// with the lease path measured is TestAdaptiveModel's "frequent
// conflicts, fast attempts".) (The
// model before 2026-12-02 weighed the conflicts' waste against the lock's
// round trips alone, locked this key, and across processes in the lab
// ran at 0.69–0.90× occ-combine.)
//
// On a loaded machine (make test runs packages side by side on two
// cores) the attempt times the model reads swell with the CPU's queue,
// and now and then it locks the key for a stretch before going back: in
// 4 of 50 runs beside two other test packages, one process switched once
// or twice and carried 14–32 of its 200 updates on the lease path, and
// once (2026-12-03, beside a lab run and two other test binaries) 64. So
// what the test holds the model to is that the key stays optimistic for
// most of its updates: at most half leased in each process (a model that
// locks this key for good leases nearly all of them).
func TestAdaptiveContendedAcrossProcessesStaysOptimistic(t *testing.T) {
	// Up to three runs: a loaded machine can push one run past the bound
	// (once, beside make test's other packages and a lab run, 123 of 200
	// leased), while a model that locks this key for good leases nearly
	// all updates in every run.
	const runs = 3
	for run := 1; ; run++ {
		leased, ok := contendedAcrossProcesses(t)
		if ok {
			return
		}
		if run == runs {
			t.Fatalf("in each of %d runs a process carried more than half its 200 updates on the lease path (last run: %v)", runs, leased)
		}
		t.Logf("run %d: leased %v, more than half in a process: running again", run, leased)
	}
}

// contendedAcrossProcesses is one run of
// TestAdaptiveContendedAcrossProcessesStaysOptimistic: it checks that
// nothing was lost and that the writes conflicted, and reports the
// updates each process leased and whether each leased at most half.
func contendedAcrossProcesses(t *testing.T) (leased []int64, ok bool) {
	t.Helper()
	ctx := context.Background()
	store := newAdaptiveStore(50 * time.Microsecond)
	counter := cas.NewTyped[int](store, cas.JSON[int]())
	// A lock service a round trip away, as across processes.
	locker := remoteLocker{hybrid.NewLocalLocker(time.Second), 300 * time.Microsecond}
	procs := []*hybrid.Adaptive{
		hybrid.NewAdaptive(locker, hybrid.AdaptiveConfig{}),
		hybrid.NewAdaptive(locker, hybrid.AdaptiveConfig{}),
	}
	slow := func(n int, _ bool) (int, error) {
		time.Sleep(500 * time.Microsecond) // work inside the critical section
		return n + 1, nil
	}
	n, stats := runProcesses(t, ctx, procs, 2, 100, counter, slow)
	if n != 400 {
		t.Fatalf("counter %d, want 400", n)
	}
	var conflicts int64
	ok = true
	for i, st := range stats {
		t.Logf("process %d: %+v", i, st)
		leased = append(leased, st.Leased)
		if st.Leased > 200/2 {
			ok = false
		}
		conflicts += st.Combiner.Writes - st.Combiner.Batches
	}
	if conflicts == 0 {
		t.Fatal("no write conflicted: the test did not contend across processes")
	}
	return leased, ok
}

// remoteLocker is a Locker whose acquisitions take a round trip.
type remoteLocker struct {
	hybrid.Locker
	rtt time.Duration
}

func (l remoteLocker) Acquire(ctx context.Context, key string) (hybrid.Lease, error) {
	time.Sleep(l.rtt)
	return l.Locker.Acquire(ctx, key)
}

// runProcesses runs each Adaptive of procs with workers goroutines of
// each updates of "hot", and returns the final counter (checked against
// the updates that succeeded) and each Adaptive's stats. An update that
// gives up on its attempts (the lease path serialises only with the
// lease path, so under a loaded machine a leased update can lose its
// attempts to the other process's optimistic writes) is called again, as
// a caller would: the give-up is the typed error of a write that did not
// happen, and the counter still has to come out exact.
func runProcesses(t *testing.T, ctx context.Context, procs []*hybrid.Adaptive, workers, each int, counter *cas.Typed[int], mutate func(int, bool) (int, error)) (int, []hybrid.AdaptiveStats) {
	t.Helper()
	var ok, gaveUp atomic.Int64
	var wg sync.WaitGroup
	for _, a := range procs {
		for range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range each {
					for {
						_, _, err := hybrid.UpdateAdaptive(ctx, a, counter, "hot", mutate)
						if err == nil {
							break
						}
						if !errors.Is(err, occ.ErrAttemptsExhausted) || gaveUp.Add(1) > int64(workers*each) {
							t.Error(err)
							return
						}
					}
					ok.Add(1)
				}
			}()
		}
	}
	wg.Wait()
	if n := gaveUp.Load(); n > 0 {
		t.Logf("%d updates gave up on their attempts and were called again", n)
	}
	n, _, err := counter.Get(ctx, "hot")
	if err != nil {
		t.Fatal(err)
	}
	if int64(n) != ok.Load() {
		t.Fatalf("counter %d, %d updates succeeded", n, ok.Load())
	}
	var stats []hybrid.AdaptiveStats
	for _, a := range procs {
		stats = append(stats, a.Stats())
	}
	return n, stats
}

func TestAdaptiveBoundedMemory(t *testing.T) {
	ctx := context.Background()
	store := newAdaptiveStore(0)
	counter := cas.NewTyped[int](store, cas.JSON[int]())
	a := hybrid.NewAdaptive(hybrid.NewLocalLocker(time.Second), hybrid.AdaptiveConfig{MaxKeys: 64})
	var wg sync.WaitGroup
	var most atomic.Int64
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 2000 {
				k := fmt.Sprintf("k%d", (w*2000+i)%5000)
				// A writer elsewhere changes the key under the update's
				// first attempt: every key conflicts, so every key gets
				// statistics.
				first := true
				bump := func(n int, _ bool) (int, error) {
					if first {
						first = false
						it, err := store.Get(ctx, k)
						if errors.Is(err, cas.ErrNotFound) {
							_, err = store.CompareAndSwap(ctx, k, 0, []byte("0"))
						} else if err == nil {
							_, err = store.CompareAndSwap(ctx, k, it.Version, it.Value)
						}
						if err != nil {
							return 0, err
						}
					}
					return n + 1, nil
				}
				if _, _, err := hybrid.UpdateAdaptive(ctx, a, counter, k, bump); err != nil {
					t.Error(err)
					return
				}
				// 64, + the keys whose statistics are made at once (4).
				st := a.Stats()
				if st.Keys > 64+4 {
					t.Errorf("%d keys with statistics, bound 64 (+4 made at once)", st.Keys)
					return
				}
				for m := most.Load(); int64(st.Keys) > m && !most.CompareAndSwap(m, int64(st.Keys)); m = most.Load() {
				}
			}
		}()
	}
	wg.Wait()
	if most.Load() < 64 {
		t.Fatalf("at most %d keys had statistics: the bound was never reached", most.Load())
	}
}

func TestAdaptiveNotFenced(t *testing.T) {
	type plain struct{ cas.Store }
	a := hybrid.NewAdaptive(hybrid.NewLocalLocker(time.Second), hybrid.AdaptiveConfig{})
	_, _, err := hybrid.UpdateAdaptive(context.Background(), a, cas.NewTyped[int](plain{newAdaptiveStore(0)}, cas.JSON[int]()), "k", incr)
	if !errors.Is(err, hybrid.ErrNotFenced) {
		t.Fatalf("UpdateAdaptive on an unfenced store: %v, want ErrNotFenced", err)
	}
}

// TestUpdateAdaptiveGiveUpCountsBothPaths: an update whose optimistic
// attempts all lose to a writer elsewhere is finished on the lease path,
// with the attempt limit anew (as UpdateAdaptive documents); when the
// lease path loses too, the give-up counts every attempt the call made,
// not the lease path's alone.
func TestUpdateAdaptiveGiveUpCountsBothPaths(t *testing.T) {
	ctx := context.Background()
	counter := cas.NewTyped(newAdaptiveStore(0), cas.JSON[int]())
	a := hybrid.NewAdaptive(hybrid.NewLocalLocker(time.Second), hybrid.AdaptiveConfig{})
	const limit = 2
	var attempts atomic.Int64
	_, _, err := hybrid.UpdateAdaptive(ctx, a, counter, "k", func(n int, _ bool) (int, error) {
		i := attempts.Add(1)
		// A writer elsewhere, which takes no lease, gets in between
		// every read and write.
		_, v, err := counter.Get(ctx, "k")
		if err != nil && !errors.Is(err, cas.ErrNotFound) {
			return 0, err
		}
		if _, err := counter.CompareAndSwap(ctx, "k", v, 1000+int(i)); err != nil {
			return 0, err
		}
		return n + 1, nil
	}, occ.WithMaxAttempts(limit))
	var gave *occ.GiveUpError
	if !errors.As(err, &gave) || !errors.Is(err, occ.ErrAttemptsExhausted) || !errors.Is(err, cas.ErrConflict) {
		t.Fatalf("UpdateAdaptive = %v, want a give-up on conflicts", err)
	}
	if n := attempts.Load(); n != 2*limit {
		t.Errorf("%d attempts, want %d: the limit on each path", n, 2*limit)
	}
	if int64(gave.Attempts) != attempts.Load() {
		t.Errorf("the give-up counts %d attempts (%v), the call made %d", gave.Attempts, err, attempts.Load())
	}
}

// TestUpdateAdaptiveLeavesMutatesGiveUp: a *occ.GiveUpError that mutate
// returns on the lease path (from an occ loop of its own) is the call's
// error as it was: only the lease path's own give-up counts the
// optimistic attempts too.
func TestUpdateAdaptiveLeavesMutatesGiveUp(t *testing.T) {
	ctx := context.Background()
	counter := cas.NewTyped(newAdaptiveStore(0), cas.JSON[int]())
	a := hybrid.NewAdaptive(hybrid.NewLocalLocker(time.Second), hybrid.AdaptiveConfig{})
	const limit = 2
	inner := &occ.GiveUpError{Reason: occ.ErrBudgetExhausted, Attempts: 7, Last: errors.New("inner")}
	var attempts atomic.Int64
	_, _, err := hybrid.UpdateAdaptive(ctx, a, counter, "k", func(n int, _ bool) (int, error) {
		if attempts.Add(1) > limit {
			return 0, inner // on the lease path
		}
		_, v, err := counter.Get(ctx, "k")
		if err != nil && !errors.Is(err, cas.ErrNotFound) {
			return 0, err
		}
		if _, err := counter.CompareAndSwap(ctx, "k", v, 1000); err != nil {
			return 0, err
		}
		return n + 1, nil
	}, occ.WithMaxAttempts(limit))
	if err != error(inner) || inner.Attempts != 7 {
		t.Fatalf("UpdateAdaptive = %v (%d attempts), want mutate's error with its 7 attempts", err, inner.Attempts)
	}
}
