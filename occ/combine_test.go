package occ

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/occkit/occkit/adapters/memcas"
	"github.com/occkit/occkit/cas"
)

// gatedStore counts the conditional writes that reach the store and can
// hold them at a gate.
type gatedStore struct {
	cas.Store
	writes atomic.Int64
	gate   atomic.Pointer[gate]
	rtt    time.Duration
	// failAt makes the write of that number (1: the first) fail with
	// errStoreDown.
	failAt atomic.Int64
}

func newGatedStore(rtt time.Duration, g *gate) *gatedStore {
	s := &gatedStore{Store: memcas.New(), rtt: rtt}
	s.gate.Store(g)
	return s
}

type gate struct {
	mu      sync.Mutex
	closed  bool
	arrived chan struct{} // a write reached the closed gate
	open    chan struct{}
}

func newGate() *gate {
	return &gate{closed: true, arrived: make(chan struct{}, 64), open: make(chan struct{})}
}

func (g *gate) pass() {
	g.mu.Lock()
	closed := g.closed
	g.mu.Unlock()
	if closed {
		g.arrived <- struct{}{}
		<-g.open
	}
}

// release opens the gate (once; releasing an open gate does nothing).
func (g *gate) release() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		g.closed = false
		close(g.open)
	}
}

func (s *gatedStore) Get(ctx context.Context, key string) (cas.Item, error) {
	if s.rtt > 0 {
		time.Sleep(s.rtt)
	}
	return s.Store.Get(ctx, key)
}

func (s *gatedStore) CompareAndSwap(ctx context.Context, key string, expected cas.Version, value []byte) (cas.Version, error) {
	n := s.writes.Add(1)
	if g := s.gate.Load(); g != nil {
		g.pass()
	}
	if n == s.failAt.Load() {
		return 0, errStoreDown
	}
	if s.rtt > 0 {
		time.Sleep(s.rtt)
	}
	return s.Store.CompareAndSwap(ctx, key, expected, value)
}

// TestCombinerCountsEveryIncrement: 32 goroutines × 200 increments of one
// key through one Combiner. The counter is exact, the values handed back
// are exactly 1..6400 with no repeat (each caller sees the value after its
// own mutate), and fewer writes reached the store than updates.
func TestCombinerCountsEveryIncrement(t *testing.T) {
	store := newGatedStore(50*time.Microsecond, nil)
	counter := cas.NewTyped[int](store, cas.JSON[int]())
	cb := NewCombiner()
	const workers, each = 32, 200
	got := make([][]int, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				n, v, err := Update(context.Background(), counter, "hot", incrInt, WithCombiner(cb), WithMaxAttempts(1000))
				if err != nil {
					t.Errorf("update: %v", err)
					return
				}
				if v == 0 {
					t.Errorf("update returned version 0")
				}
				got[w] = append(got[w], n)
			}
		}()
	}
	wg.Wait()
	final, _, err := counter.Get(context.Background(), "hot")
	if err != nil {
		t.Fatal(err)
	}
	if final != workers*each {
		t.Fatalf("counter = %d, want %d", final, workers*each)
	}
	var all []int
	for _, g := range got {
		// One caller's values grow: its updates are sequential.
		for i := 1; i < len(g); i++ {
			if g[i] <= g[i-1] {
				t.Fatalf("a caller saw %d after %d", g[i], g[i-1])
			}
		}
		all = append(all, g...)
	}
	sort.Ints(all)
	for i, n := range all {
		if n != i+1 {
			t.Fatalf("returned values: position %d holds %d, want %d (a repeat or a gap)", i, n, i+1)
		}
	}
	writes := store.writes.Load()
	st := cb.Stats()
	t.Logf("%d updates, %d batches, %d writes reached the store", st.Updates, st.Batches, writes)
	if writes >= workers*each {
		t.Fatalf("%d writes for %d updates: nothing was combined", writes, workers*each)
	}
	if st.Writes != writes || st.Updates != workers*each {
		t.Fatalf("stats %+v, store saw %d writes", st, writes)
	}
}

// TestCombinerLinearizable records a history of combined increments and
// plain reads and checks it with porcupine against a counter register.
func TestCombinerLinearizable(t *testing.T) {
	store := newGatedStore(20*time.Microsecond, nil)
	counter := cas.NewTyped[int](store, cas.JSON[int]())
	cb := NewCombiner(WithMaxBatch(4))
	type in struct{ read bool }
	var (
		mu   sync.Mutex
		ops  []porcupine.Operation
		t0   = time.Now()
		wg   sync.WaitGroup
		ncli = 8
	)
	for c := range ncli {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 60 {
				call := time.Since(t0).Nanoseconds()
				var out int
				read := i%5 == 4
				if read {
					n, _, err := counter.Get(context.Background(), "k")
					if err != nil && !errors.Is(err, cas.ErrNotFound) {
						t.Errorf("get: %v", err)
						return
					}
					out = n
				} else {
					n, _, err := Update(context.Background(), counter, "k", incrInt, WithCombiner(cb), WithMaxAttempts(1000))
					if err != nil {
						t.Errorf("update: %v", err)
						return
					}
					out = n
				}
				ret := time.Since(t0).Nanoseconds()
				mu.Lock()
				ops = append(ops, porcupine.Operation{ClientId: c, Input: in{read}, Call: call, Output: out, Return: ret})
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	model := porcupine.Model{
		Init: func() any { return 0 },
		Step: func(state, input, output any) (bool, any) {
			n := state.(int)
			if input.(in).read {
				return output.(int) == n, n
			}
			return output.(int) == n+1, n + 1
		},
	}
	if !porcupine.CheckOperations(model, ops) {
		t.Fatal("the history of combined updates is not linearizable")
	}
	// The model must be able to fail: a history where two increments
	// returned the same value is refused.
	bad := []porcupine.Operation{
		{ClientId: 0, Input: in{}, Call: 0, Output: 1, Return: 10},
		{ClientId: 1, Input: in{}, Call: 0, Output: 1, Return: 10},
	}
	if porcupine.CheckOperations(model, bad) {
		t.Fatal("the model accepted two increments returning the same value")
	}
	if cb.Stats().Writes >= cb.Stats().Updates {
		t.Logf("note: no batch formed in this run (%+v)", cb.Stats())
	}
}

// incrRacedOnce returns an increment under whose first call "another
// process" writes 100 to key in store, at version 0, so that the first
// attempt's write conflicts.
func incrRacedOnce(ctx context.Context, store cas.Store, key string) func(int, bool) (int, error) {
	first := true
	return func(n int, _ bool) (int, error) {
		if first {
			first = false
			if _, err := store.CompareAndSwap(ctx, key, 0, []byte("100")); err != nil {
				return 0, err
			}
		}
		return n + 1, nil
	}
}

// holdLeader makes a gated store, a counter on it and a combiner whose
// callers queue from the first, and starts one update of "k" (counted in
// wg) that reaches the store's write and holds there until the gate
// opens; it returns when the write is held.
func holdLeader(t *testing.T) (store *gatedStore, counter *cas.Typed[int], cb *Combiner, wg *sync.WaitGroup) {
	t.Helper()
	store = newGatedStore(0, newGate())
	counter = cas.NewTyped[int](store, cas.JSON[int]())
	cb = NewCombiner(WithQueueFromStart()) // queue behind a held write from the first call
	wg = &sync.WaitGroup{}
	wg.Add(1)
	go func() {
		defer wg.Done()
		if _, _, err := Update(context.Background(), counter, "k", incrInt, WithCombiner(cb)); err != nil {
			t.Errorf("leader: %v", err)
		}
	}()
	select {
	case <-store.gate.Load().arrived:
	case <-time.After(10 * time.Second):
		t.Fatal("the leader's write never reached the store")
	}
	return store, counter, cb, wg
}

// queueIncr starts an increment of "k" through cb (counted in wg; who
// names it in its error) and waits until it is the nth caller queued.
func queueIncr(t *testing.T, store *gatedStore, counter *cas.Typed[int], cb *Combiner, wg *sync.WaitGroup, who string, n int) {
	t.Helper()
	wg.Go(func() {
		if _, _, err := Update(context.Background(), counter, "k", incrInt, WithCombiner(cb)); err != nil {
			t.Errorf("%s: %v", who, err)
		}
	})
	waitQueued(t, cb, store, "k", n)
}

// waitQueued waits until n callers wait in key k's queue.
func waitQueued(t *testing.T, cb *Combiner, store cas.Store, key string, n int) {
	t.Helper()
	sh := cb.shard(keyHash(key))
	waitCount(t, "callers queued", n, func() int {
		sh.mu.Lock()
		defer sh.mu.Unlock()
		if q := sh.queues[combineKey{store: store, key: key}]; q != nil {
			return len(q.pending)
		}
		return 0
	})
}

// TestCombinerCancelledWaiterIsNotApplied: a caller whose context ends
// while it waits behind a leader leaves the queue; its mutate never runs
// and the others' updates are all applied.
func TestCombinerCancelledWaiterIsNotApplied(t *testing.T) {
	store, counter, cb, wg := holdLeader(t)

	ctx, cancel := context.WithCancel(context.Background())
	var ran atomic.Bool
	errc := make(chan error, 1)
	go func() {
		_, _, err := Update(ctx, counter, "k", func(n int, _ bool) (int, error) {
			ran.Store(true)
			return n + 100, nil
		}, WithCombiner(cb))
		errc <- err
	}()
	waitQueued(t, cb, store, "k", 1)
	queueIncr(t, store, counter, cb, wg, "second", 2)
	cancel()
	err := <-errc
	if !errors.Is(err, context.Canceled) || errors.Is(err, cas.ErrAmbiguous) {
		t.Fatalf("cancelled waiter: err = %v, want context.Canceled (not ambiguous)", err)
	}
	store.gate.Load().release()
	wg.Wait()
	if ran.Load() {
		t.Fatal("the cancelled waiter's mutate ran")
	}
	if n, _, _ := counter.Get(context.Background(), "k"); n != 2 {
		t.Fatalf("counter = %d, want 2 (leader and second, not the cancelled +100)", n)
	}
}

// TestCombinerMutateErrorLeavesOthersIntact: in one batch, a mutate that
// fails is left out; its caller gets its error and the updates ahead of
// and behind it are written.
func TestCombinerMutateErrorLeavesOthersIntact(t *testing.T) {
	store, counter, cb, wg := holdLeader(t) // writes 1

	errSoldOut := errors.New("sold out")
	type res struct {
		n   int
		v   cas.Version
		err error
	}
	results := make([]res, 3)
	mutates := []func(int, bool) (int, error){
		func(n int, _ bool) (int, error) { return n + 10, nil },
		func(n int, _ bool) (int, error) { return 0, Permanent(errSoldOut) },
		func(n int, _ bool) (int, error) { return n + 100, nil },
	}
	for i, m := range mutates {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n, v, err := Update(context.Background(), counter, "k", m, WithCombiner(cb))
			results[i] = res{n, v, err}
		}()
		waitQueued(t, cb, store, "k", i+1)
	}
	store.gate.Load().release()
	wg.Wait()
	if results[1].err != errSoldOut {
		t.Fatalf("failing mutate: err = %v, want errSoldOut itself", results[1].err)
	}
	if results[0].err != nil || results[2].err != nil {
		t.Fatalf("others failed: %+v", results)
	}
	if results[0].n != 11 || results[2].n != 111 {
		t.Fatalf("values %d and %d, want 11 and 111 (queue order, the failed mutate passed through)", results[0].n, results[2].n)
	}
	if results[0].v != results[2].v {
		t.Fatalf("one batch, two versions: %d and %d", results[0].v, results[2].v)
	}
	if n, v, _ := counter.Get(context.Background(), "k"); n != 111 || v != results[2].v {
		t.Fatalf("store holds %d at %d, want 111 at %d", n, v, results[2].v)
	}
	if w := store.writes.Load(); w != 2 {
		t.Fatalf("%d writes, want 2 (the leader's, then one for the batch of three)", w)
	}
}

// TestCombinerErrorNeedsTheWrite: a mutate refused on what a caller ahead
// of it in the batch wrote gets its refusal only if the batch's write
// applies; when the write fails, it gets the batch's error.
func TestCombinerErrorNeedsTheWrite(t *testing.T) {
	store, counter, cb, wg := holdLeader(t) // writes 1
	errSoldOut := errors.New("sold out")
	take := func(n int, _ bool) (int, error) {
		if n == 0 {
			return 0, errSoldOut
		}
		return n - 1, nil
	}
	errs := make([]error, 2)
	for i := range errs {
		wg.Go(func() { _, _, errs[i] = Update(context.Background(), counter, "k", take, WithCombiner(cb)) })
		waitQueued(t, cb, store, "k", i+1)
	}
	store.failAt.Store(2) // the leader's write is the first, the batch's the second
	store.gate.Load().release()
	wg.Wait()
	if n, _, _ := counter.Get(context.Background(), "k"); n != 1 {
		t.Fatalf("stock %d, want 1: nothing taken", n)
	}
	for i, err := range errs {
		if !errors.Is(err, errStoreDown) {
			t.Fatalf("take %d: %v, want the batch's error (the stock was never taken)", i, err)
		}
	}
}

// TestCombinerPanicReachesItsCaller: a mutate that panics on the leader's
// goroutine panics on its own caller's, and the batch goes on.
func TestCombinerPanicReachesItsCaller(t *testing.T) {
	store, counter, cb, wg := holdLeader(t)
	panicked := make(chan any, 1)
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer func() { panicked <- recover() }()
		_, _, _ = Update(context.Background(), counter, "k", func(int, bool) (int, error) { panic("boom") }, WithCombiner(cb))
	}()
	waitQueued(t, cb, store, "k", 1)
	queueIncr(t, store, counter, cb, wg, "third", 2)
	store.gate.Load().release()
	wg.Wait()
	if p := <-panicked; p != "boom" {
		t.Fatalf("recovered %v, want boom", p)
	}
	if n, _, _ := counter.Get(context.Background(), "k"); n != 2 {
		t.Fatalf("counter = %d, want 2", n)
	}
}

// TestCombinerConflictFromAnotherProcess: a write by someone outside the
// combiner makes the batch's write conflict; the whole batch goes again
// from the conflict's state and nothing is lost.
func TestCombinerConflictFromAnotherProcess(t *testing.T) {
	ctx := context.Background()
	store, counter, cb, wg := holdLeader(t) // read version 0, holds its write
	inner := store.Store
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, _, err := Update(ctx, counter, "k", incrInt, WithCombiner(cb)); err != nil {
				t.Errorf("update: %v", err)
			}
		}()
	}
	waitQueued(t, cb, store, "k", 3)
	// "Another process" writes 1000 behind the combiner's back.
	if _, err := inner.CompareAndSwap(ctx, "k", 0, []byte("1000")); err != nil {
		t.Fatal(err)
	}
	store.gate.Load().release()
	wg.Wait()
	if n, _, _ := counter.Get(ctx, "k"); n != 1004 {
		t.Fatalf("counter = %d, want 1004", n)
	}
}

// TestCombinerWithCache: the combiner and the version cache together.
func TestCombinerWithCache(t *testing.T) {
	store := newGatedStore(20*time.Microsecond, nil)
	counter := cas.NewTyped[int](store, cas.JSON[int]())
	cb, cache := NewCombiner(), NewCache(store, 100)
	var wg sync.WaitGroup
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 50 {
				if _, _, err := Update(context.Background(), counter, "k", incrInt, WithCombiner(cb), WithCache(cache), WithMaxAttempts(1000)); err != nil {
					t.Errorf("update: %v", err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if n, _, _ := counter.Get(context.Background(), "k"); n != 800 {
		t.Fatalf("counter = %d, want 800", n)
	}
	if cache.Stats().Hits == 0 {
		t.Fatal("the cache was never used")
	}
}

// TestCombinerLeaderContextEnds: the leader's context ending while the
// batch's write is in flight fails nobody else.
func TestCombinerLeaderContextEnds(t *testing.T) {
	// First batch: a leader that holds its write; queue a second caller
	// with a cancellable context, who will lead the second batch.
	store, counter, cb, wg := holdLeader(t)
	lctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, _, err := Update(lctx, counter, "k", incrInt, WithCombiner(cb))
		errc <- err
	}()
	waitQueued(t, cb, store, "k", 1)
	queueIncr(t, store, counter, cb, wg, "follower", 2)
	// Let the first write through, but hold the second batch's write.
	g2 := newGate()
	g1 := store.gate.Swap(g2)
	g1.release()
	<-g2.arrived
	cancel()
	g2.release()
	wg.Wait()
	err := <-errc
	if err != nil && !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled leader: %v", err)
	}
	n, _, _ := counter.Get(context.Background(), "k")
	if n != 3 {
		t.Fatalf("counter = %d, want 3: the second batch's write went through", n)
	}
}

// TestCombinerQueuesComeAndGo: with a shard dropping its idle queues
// once it holds two, 16 goroutines update 2,000 keys (a few of them hot,
// so that batches form and hand off) while queues are dropped and made
// again. Every key ends exact, the counters count every update and every
// write that reached the store, and the queues kept stay within the
// shards' bound: keys updated once each, with nothing to combine, do not
// pile up.
func TestCombinerQueuesComeAndGo(t *testing.T) {
	defer func(n int) { maxIdleQueues = n }(maxIdleQueues)
	maxIdleQueues = 2
	store := newGatedStore(0, nil)
	counter := cas.NewTyped[int](store, cas.JSON[int]())
	cb := NewCombiner()
	const (
		workers = 16
		each    = 1500
		keys    = 2000
	)
	var want [keys]atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				k := (w*7919 + i*104729) % keys
				if i%4 == 0 {
					k = i % 3 // hot keys: batches and hand-offs
				}
				if _, _, err := Update(context.Background(), counter, fmt.Sprint("k", k), incr, WithCombiner(cb)); err != nil {
					t.Error(err)
					return
				}
				want[k].Add(1)
			}
		}()
	}
	wg.Wait()
	for k := range keys {
		n, _, err := counter.Get(context.Background(), fmt.Sprint("k", k))
		if errors.Is(err, cas.ErrNotFound) {
			n, err = 0, nil
		}
		if err != nil {
			t.Fatal(err)
		}
		if int64(n) != want[k].Load() {
			t.Fatalf("key k%d = %d, want %d", k, n, want[k].Load())
		}
	}
	st := cb.Stats()
	live := 0
	for i := range cb.shards {
		cb.shards[i].mu.Lock()
		live += len(cb.shards[i].queues)
		cb.shards[i].mu.Unlock()
	}
	t.Logf("%d of %d keys' queues kept", live, keys)
	t.Logf("%+v; store saw %d writes", st, store.writes.Load())
	if st.Updates != workers*each || st.Writes != store.writes.Load() || st.Batches > st.Updates {
		t.Fatalf("stats %+v, want %d updates and the store's %d writes", st, workers*each, store.writes.Load())
	}
	if live > combineShards*maxIdleQueues {
		t.Fatalf("%d queues kept, bound %d×%d", live, combineShards, maxIdleQueues)
	}
}

// hotKeys returns how many keys cb counts as hot, and whether key of
// store is one of them.
func hotKeys(cb *Combiner, store cas.Store, key string) (int, bool) {
	n := 0
	for i := range cb.hot {
		n += int(cb.hot[i].Load())
	}
	sh := cb.shard(keyHash(key))
	sh.mu.Lock()
	defer sh.mu.Unlock()
	q := sh.queues[combineKey{store: store, key: key}]
	return n, q != nil && q.hot
}

// TestCombinerHeatsAndCools: by default a key's calls run as plain
// Updates (two calls whose writes are held at once both reach the store)
// until one conflicts; from then on the key is hot and calls queue behind
// a write in progress; after coolAfter batches of one caller in a row
// that lasted coolSpan it is cold again. The call that conflicted goes on through the combiner
// without losing count of its attempts, and the counters match the
// store's writes at every step.
func TestCombinerHeatsAndCools(t *testing.T) {
	// (No test of the package runs in parallel: setting coolSpan is safe.)
	defer func(d time.Duration) { coolSpan = d }(coolSpan)
	coolSpan = 200 * time.Millisecond
	ctx := context.Background()
	store := newGatedStore(0, nil)
	counter := cas.NewTyped[int](store, cas.JSON[int]())
	cb := NewCombiner()
	calls := 0
	checkStats := func(step string) {
		t.Helper()
		st := cb.Stats()
		if st.Updates != int64(calls) || st.Writes != store.writes.Load() || st.Batches > st.Updates {
			t.Fatalf("%s: stats %+v after %d calls, store saw %d writes", step, st, calls, store.writes.Load())
		}
	}
	awaitArrivals := func(g *gate, n int) {
		t.Helper()
		for range n {
			select {
			case <-g.arrived:
			case <-time.After(10 * time.Second):
				t.Fatal("a write never reached the store")
			}
		}
	}
	type seen struct {
		attempts []Attempt
		call     Call
	}
	var mu sync.Mutex
	observed := map[int]*seen{}
	observer := func(id int) Option {
		mu.Lock()
		observed[id] = &seen{}
		mu.Unlock()
		return WithObserver(ObserverFuncs{
			Attempt: func(_ context.Context, a Attempt) {
				mu.Lock()
				observed[id].attempts = append(observed[id].attempts, a)
				mu.Unlock()
			},
			Call: func(_ context.Context, c Call) {
				mu.Lock()
				observed[id].call = c
				mu.Unlock()
			},
		})
	}
	var wg sync.WaitGroup
	update := func(id int) {
		calls++
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, _, err := Update(ctx, counter, "k", incrInt, WithCombiner(cb), observer(id)); err != nil {
				t.Errorf("update %d: %v", id, err)
			}
		}()
	}

	// Cold: two calls whose writes are held both reach the store.
	update(0)
	wg.Wait()
	if n, hot := hotKeys(cb, store, "k"); n != 0 || hot {
		t.Fatalf("after one update: %d hot keys (k hot: %v), want none", n, hot)
	}
	g := newGate()
	store.gate.Store(g)
	update(1)
	update(2)
	awaitArrivals(g, 2) // neither queued behind the other
	g.release()
	wg.Wait()
	if n, hot := hotKeys(cb, store, "k"); n != 1 || !hot {
		t.Fatalf("after a conflict: %d hot keys (k hot: %v), want k", n, hot)
	}
	checkStats("heated")
	// One of the two conflicted and went on through the combiner: its
	// observer saw attempts 1 (the conflict) and 2, and one call of 2.
	escalated := 0
	for id := 1; id <= 2; id++ {
		o := observed[id]
		switch {
		case o.call.Attempts == 1 && len(o.attempts) == 1 && o.attempts[0].Outcome == OutcomeSuccess:
		case o.call.Attempts == 2 && len(o.attempts) == 2 && o.attempts[0].Outcome == OutcomeConflict &&
			o.attempts[1].Number == 2 && o.attempts[1].Outcome == OutcomeSuccess && o.call.Outcome == OutcomeSuccess:
			escalated++
		default:
			t.Fatalf("call %d observed %+v", id, *o)
		}
	}
	if escalated != 1 {
		t.Fatalf("%d calls went on after a conflict, want 1", escalated)
	}

	// Hot: a call behind a held write queues.
	g = newGate()
	store.gate.Store(g)
	update(3)
	awaitArrivals(g, 1)
	update(4)
	waitQueued(t, cb, store, "k", 1)
	g.release()
	wg.Wait()
	checkStats("queued")

	// Lone batches cool it once they have lasted coolSpan: the queued
	// call's batch was the first (nobody waited behind it), so
	// coolAfter-1 more updates, one at a time, leave it hot; once
	// coolSpan has passed, the next lone batch cools it.
	store.gate.Store(nil)
	for i := range coolAfter - 1 {
		if _, hot := hotKeys(cb, store, "k"); !hot {
			t.Fatalf("cold after %d lone batches, want %d and %v", i+1, coolAfter, coolSpan)
		}
		update(5 + i)
		wg.Wait()
	}
	if _, hot := hotKeys(cb, store, "k"); !hot {
		t.Fatalf("cold after %d lone batches within %v", coolAfter, coolSpan)
	}
	time.Sleep(coolSpan)
	update(5 + coolAfter)
	wg.Wait()
	if n, hot := hotKeys(cb, store, "k"); n != 0 || hot {
		t.Fatalf("after %d lone batches over %v: %d hot keys (k hot: %v), want none", coolAfter+1, coolSpan, n, hot)
	}
	checkStats("cooled")
	g = newGate()
	store.gate.Store(g)
	update(100)
	update(101)
	awaitArrivals(g, 2)
	g.release()
	wg.Wait()
	checkStats("cold again")
	if n, _, _ := counter.Get(ctx, "k"); n != calls {
		t.Fatalf("counter = %d after %d updates", n, calls)
	}
}

// TestCombinerIdleHotKeyCools: a key that heated and is not updated again
// does not keep its bucket hot: a call of another key of the bucket, which
// would otherwise take the shard's mutex for good, cools it once it has
// been idle for idleCool. The call that heated the key reports its whole
// call, both attempts, to its observer.
func TestCombinerIdleHotKeyCools(t *testing.T) {
	ctx := context.Background()
	store := newGatedStore(0, nil)
	counter := cas.NewTyped[int](store, cas.JSON[int]())
	cb := NewCombiner()
	// A key of the same bucket as "k".
	sibling := ""
	for i := 0; sibling == ""; i++ {
		if k := fmt.Sprint("s", i); k != "k" && keyHash(k)%hotBuckets == keyHash("k")%hotBuckets {
			sibling = k
		}
	}
	// "Another process" writes k under the call's first attempt.
	var calls Call
	_, _, err := Update(ctx, counter, "k", incrRacedOnce(ctx, store.Store, "k"), WithCombiner(cb), WithObserver(ObserverFuncs{Call: func(_ context.Context, c Call) { calls = c }}))
	if err != nil {
		t.Fatal(err)
	}
	if n, hot := hotKeys(cb, store, "k"); n != 1 || !hot {
		t.Fatalf("after a conflict: %d hot keys (k hot: %v)", n, hot)
	}
	if calls.Attempts != 2 || calls.Outcome != OutcomeSuccess {
		t.Fatalf("observed call %+v, want 2 attempts and success", calls)
	}
	if _, _, err := Update(ctx, counter, sibling, incrInt, WithCombiner(cb)); err != nil {
		t.Fatal(err)
	}
	if n, _ := hotKeys(cb, store, "k"); n != 1 {
		t.Fatalf("k cooled before it was idle for %v", idleCool)
	}
	time.Sleep(idleCool + idleCool/2)
	if _, _, err := Update(ctx, counter, sibling, incrInt, WithCombiner(cb)); err != nil {
		t.Fatal(err)
	}
	if n, hot := hotKeys(cb, store, "k"); n != 0 || hot {
		t.Fatalf("after %v idle and a call of its bucket: %d hot keys (k hot: %v)", idleCool, n, hot)
	}
	if n, _, _ := counter.Get(ctx, "k"); n != 101 {
		t.Fatalf("k = %d, want 101", n)
	}
	st := cb.Stats()
	if st.Updates != 3 || st.Writes != store.writes.Load() || st.Batches != 3 {
		t.Fatalf("stats %+v, store saw %d writes", st, store.writes.Load())
	}
}

// holdStore holds the first compare-and-swap of each hold whose value
// matches: the test then decides when it reaches the store.
type holdStore struct {
	cas.Store
	mu    sync.Mutex
	holds []*hold
}

// hold is a gate for the first write whose value matches.
type hold struct {
	match func(n int) bool
	used  bool
	*gate
}

func (s *holdStore) holdFirst(t *testing.T, match func(n int) bool) *hold {
	h := &hold{match: match, gate: newGate()}
	s.mu.Lock()
	s.holds = append(s.holds, h)
	s.mu.Unlock()
	t.Cleanup(h.release) // a test that fails early leaves no writer held
	return h
}

func (s *holdStore) CompareAndSwap(ctx context.Context, key string, expected cas.Version, value []byte) (cas.Version, error) {
	var n int
	if err := json.Unmarshal(value, &n); err == nil {
		s.mu.Lock()
		var h *hold
		for _, x := range s.holds {
			if !x.used && x.match(n) {
				x.used, h = true, x
				break
			}
		}
		s.mu.Unlock()
		if h != nil {
			h.pass()
		}
	}
	return s.Store.CompareAndSwap(ctx, key, expected, value)
}

// TestCombinerEscalatedCallCarried: a call of a cold key whose write
// conflicts, and which then queues behind a caller that leads the next
// batch, is carried in that batch: its result is its own mutate's on the
// batch's running value, and its observer is told of its call (one
// attempt of its own, a success) exactly once. Before endEscalated, such
// a call's observer heard of no call at all.
func TestCombinerEscalatedCallCarried(t *testing.T) {
	ctx := context.Background()
	store := &holdStore{Store: memcas.New()}
	counter := cas.NewTyped[int](store, cas.JSON[int]())
	if _, err := counter.CompareAndSwap(ctx, "k", 0, 0); err != nil {
		t.Fatal(err)
	}
	cb := NewCombiner()
	add := func(d int) func(int, bool) (int, error) {
		return func(n int, _ bool) (int, error) { return n + d, nil }
	}
	var mu sync.Mutex
	var attempts []Attempt
	var calls []Call
	obs := WithObserver(ObserverFuncs{
		Attempt: func(_ context.Context, a Attempt) { mu.Lock(); attempts = append(attempts, a); mu.Unlock() },
		Call:    func(_ context.Context, c Call) { mu.Lock(); calls = append(calls, c); mu.Unlock() },
	})
	type result struct {
		v   int
		err error
	}
	run := func(d int, opts ...Option) chan result {
		ch := make(chan result, 1)
		go func() {
			v, _, err := Update(ctx, counter, "k", add(d), append([]Option{WithCombiner(cb)}, opts...)...)
			ch <- result{v, err}
		}()
		return ch
	}
	wait := func(c chan struct{}, what string) {
		t.Helper()
		select {
		case <-c:
		case <-time.After(10 * time.Second):
			t.Fatalf("%s never reached the store", what)
		}
	}

	// E's first write (0+100) is held while a writer elsewhere moves the
	// key on: E will conflict.
	holdE := store.holdFirst(t, func(n int) bool { return n == 100 })
	e := run(100, obs)
	wait(holdE.arrived, "E's write")
	it, err := store.Store.Get(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Store.CompareAndSwap(ctx, "k", it.Version, []byte("1")); err != nil {
		t.Fatal(err)
	}
	// The key heats (as a conflict of another call would heat it), and L
	// runs alone with its write (1+1000) held; W queues behind L.
	h := keyHash("k")
	sh := cb.shard(h)
	sh.mu.Lock()
	cb.heat(h, cb.newQueue(sh, combineKey{store: store, key: "k"}))
	sh.mu.Unlock()
	holdL := store.holdFirst(t, func(n int) bool { return n == 1001 })
	l := run(1000)
	wait(holdL.arrived, "L's write")
	w := run(1)
	waitQueued(t, cb, store, "k", 1)
	// E's write now conflicts: E goes on through the combiner, behind W.
	holdE.release()
	waitQueued(t, cb, store, "k", 2)
	holdL.release()

	for _, c := range []struct {
		name string
		ch   chan result
		want int
	}{{"L", l, 1001}, {"W", w, 1002}, {"E", e, 1102}} {
		var r result
		select {
		case r = <-c.ch:
		case <-time.After(10 * time.Second):
			t.Fatalf("%s never returned", c.name)
		}
		if r.err != nil || r.v != c.want {
			t.Fatalf("%s: %d, %v; want %d", c.name, r.v, r.err, c.want)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(attempts) != 1 || attempts[0].Number != 1 || attempts[0].Outcome != OutcomeConflict {
		t.Fatalf("E's observer saw attempts %+v, want its one conflict", attempts)
	}
	if len(calls) != 1 || calls[0].Attempts != 1 || calls[0].Outcome != OutcomeSuccess || calls[0].Err != nil || calls[0].Latency <= 0 {
		t.Fatalf("E's observer saw calls %+v, want one success of one attempt", calls)
	}
}

// timedStore records the longest attempt of its one caller, as the time
// between the ends of two writes in a row (the first from the first
// read): the caller's waits, recorded but not slept, add nothing to it.
type timedStore struct {
	cas.Store
	mu      sync.Mutex
	last    time.Time
	longest time.Duration
}

func (s *timedStore) Get(ctx context.Context, key string) (cas.Item, error) {
	s.mu.Lock()
	if s.last.IsZero() {
		s.last = time.Now()
	}
	s.mu.Unlock()
	return s.Store.Get(ctx, key)
}

func (s *timedStore) CompareAndSwap(ctx context.Context, key string, expected cas.Version, value []byte) (cas.Version, error) {
	v, err := s.Store.CompareAndSwap(ctx, key, expected, value)
	s.mu.Lock()
	now := time.Now()
	s.longest = max(s.longest, now.Sub(s.last))
	s.last = now
	s.mu.Unlock()
	return v, err
}

// TestCombinerLoneCallWaitsLittle: a combined call running alone at a hot
// key (the only caller of the key in its process) that keeps losing to
// writers elsewhere waits at most about two attempt times between
// attempts (combinedMaxUnits), where the default backoff grows to eight.
func TestCombinerLoneCallWaitsLittle(t *testing.T) {
	ctx := context.Background()
	bumps := &bumpingStore{Store: memcas.New(), delay: 2 * time.Millisecond, n: 6}
	store := &timedStore{Store: bumps}
	counter := cas.NewTyped(cas.Store(store), cas.JSON[int]())
	cb := NewCombiner(WithQueueFromStart())
	var rec sleepRecorder
	if _, _, err := Update(ctx, counter, "k", incrInt, WithCombiner(cb), rec.option(), WithExclusiveAfter(0)); err != nil {
		t.Fatal(err)
	}
	waits := rec.recorded()
	if len(waits) < 4 {
		t.Fatalf("%d waits (%v), want at least 4 after 6 lost writes", len(waits), waits)
	}
	store.mu.Lock()
	attempt := store.longest
	store.mu.Unlock()
	for i, d := range waits {
		// Two attempt times, +50% at random (the default's fourth wait
		// is at least four).
		if d > attempt*7/2 {
			t.Errorf("wait %d of %v is %v: more than about two attempt times (the longest attempt took %v)", i+1, waits, d, attempt)
		}
	}
}

// BenchmarkCombinerHotKeyLooping: 4 callers, each sending its next update
// of one key as soon as the last returned (a closed loop, as the lab's
// workers and a handler pool under load do), through a store whose reads
// and writes take 200 µs. It reports updates/write: the callers a write
// carries on average, at most 4 here. (A leader that handed the lead on as
// soon as its batch was written left its callers to come back after the
// next batch had started: they split into groups that alternated.)
//
//	go test -run '^$' -bench CombinerHotKeyLooping ./occ/
func BenchmarkCombinerHotKeyLooping(b *testing.B) {
	ctx := context.Background()
	store := newGatedStore(200*time.Microsecond, nil)
	counters := cas.NewTyped(cas.Store(store), cas.JSON[int]())
	cb := NewCombiner()
	loopCallers(b, 4, func() error {
		_, _, err := Update(ctx, counters, "k", func(n int, _ bool) (int, error) { return n + 1, nil }, WithCombiner(cb))
		return err
	})
	st := cb.Stats()
	b.ReportMetric(float64(st.Updates)/float64(max(st.Writes, 1)), "updates/write")
}

// loopCallers makes b.N calls of call from callers goroutines, each
// calling again as soon as its last call returned (a closed loop), and
// times them.
func loopCallers(b *testing.B, callers int, call func() error) {
	var next atomic.Int64
	b.ResetTimer()
	var wg sync.WaitGroup
	for range callers {
		wg.Go(func() {
			for next.Add(1) <= int64(b.N) {
				if err := call(); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	b.StopTimer()
}
