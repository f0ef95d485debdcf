package occ

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/occkit/occkit/adapters/memcas"
	"github.com/occkit/occkit/cas"
)

// senior returns the config of a senior call on key of store, as Update
// makes it.
func senior(store cas.Store, key string) *config {
	return &config{store: store, key: key, unit: time.Millisecond}
}

// unboundedHolds makes the waits for a line to end, and for a turn in
// it, last until they come; at the end of the test the table of lines
// must be empty, and is emptied so that one failure does not spill into
// later tests.
func unboundedHolds(t *testing.T) {
	t.Helper()
	holdLimit = time.Hour
	t.Cleanup(func() {
		holdLimit = 0
		open := linesOpen.Load()
		for i := range lineTable {
			if lineTable[i].l.Swap(nil) != nil {
				t.Errorf("a line was left in slot %d", i)
			}
		}
		linesOpen.Store(0)
		if open != 0 {
			t.Errorf("%d lines counted open at the end", open)
		}
	})
}

// bumpingStore makes the next n writes conflict, as writers elsewhere
// would: before each it writes the key itself. It records how many lines
// were open at each write.
type bumpingStore struct {
	cas.Store
	mu        sync.Mutex
	n         int
	openAtCAS []int32
}

func (s *bumpingStore) CompareAndSwap(ctx context.Context, key string, expected cas.Version, value []byte) (cas.Version, error) {
	s.mu.Lock()
	bump := s.n > 0
	if bump {
		s.n--
	}
	s.openAtCAS = append(s.openAtCAS, linesOpen.Load())
	s.mu.Unlock()
	if bump {
		it, err := s.Store.Get(ctx, key)
		if err != nil && !errors.Is(err, cas.ErrNotFound) {
			return 0, err
		}
		if _, err := s.Store.CompareAndSwap(ctx, key, it.Version, []byte("100")); err != nil {
			return 0, err
		}
	}
	return s.Store.CompareAndSwap(ctx, key, expected, value)
}

func waitInLine(t *testing.T, l *line, n int) {
	t.Helper()
	waitCount(t, "calls queued in the line", n, func() int {
		l.mu.Lock()
		defer l.mu.Unlock()
		return len(l.queue)
	})
}

// waitCount polls count until it returns want (for up to 10 s).
func waitCount(t *testing.T, what string, want int, count func() int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; {
		got := count()
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d %s, want %d", got, what, want)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestLineHoldsTheKeysOtherCalls: while a line exists on a key, a new
// Update of that key in the process waits for it to end before it touches
// the store; an Update of another key does not wait.
func TestLineHoldsTheKeysOtherCalls(t *testing.T) {
	unboundedHolds(t)
	store := newCountingStore(memcas.New())
	counter := cas.NewTyped[int](store, cas.JSON[int]())
	ctx := context.Background()

	holder := senior(store, "hot")
	if _, err := holder.joinLine(ctx); err != nil || holder.line == nil {
		t.Fatalf("the first senior call did not get the turn: %v", err)
	}
	done := make(chan error, 1)
	go func() {
		_, _, err := Update(ctx, counter, "hot", incrInt)
		done <- err
	}()
	if _, _, err := Update(ctx, counter, "cold", incrInt); err != nil {
		t.Fatal(err)
	}

	time.Sleep(20 * time.Millisecond)
	select {
	case err := <-done:
		t.Fatalf("Update of the held key returned (%v) while the line existed", err)
	default:
	}
	store.mu.Lock()
	gets, cass := store.gets["hot"], store.cass["hot"]
	store.mu.Unlock()
	if gets+cass != 0 {
		t.Fatalf("%d reads and %d writes of the held key while its line existed", gets, cass)
	}
	// A call that opts out does not wait (it would until the deadline:
	// the holds are unbounded here).
	dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, _, err := Update(dctx, counter, "hot", incrInt, WithTurns(false)); err != nil {
		t.Fatalf("Update with WithTurns(false): %v", err)
	}
	holder.leaveLine()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n := linesOpen.Load(); n != 0 {
		t.Fatalf("%d lines open after the last holder left", n)
	}
}

// TestLineHandsTheTurnInOrder: senior calls get the turn in the order they
// joined, each with the state the previous holder wrote.
func TestLineHandsTheTurnInOrder(t *testing.T) {
	unboundedHolds(t)
	store := memcas.New()
	ctx := context.Background()
	first := senior(store, "k")
	if _, err := first.joinLine(ctx); err != nil || first.line == nil {
		t.Fatalf("no turn for the first call: %v", err)
	}
	l := first.line
	const n = 4
	var (
		mu    sync.Mutex
		order []int
		wg    sync.WaitGroup
	)
	calls := make([]*config, n)
	for i := range n {
		calls[i] = senior(store, "k")
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := calls[i]
			if _, err := c.joinLine(ctx); err != nil || c.line != l {
				t.Errorf("call %d: no turn (%v)", i, err)
				return
			}
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
			if c.handed == nil || !c.handed.known || c.handed.state.Version != cas.Version(100+i) {
				t.Errorf("call %d was handed %+v, want the version its predecessor wrote, %d", i, c.handed, 100+i)
			}
			l.wrote, l.wroteOK = cas.Item{Key: "k", Version: cas.Version(101 + i)}, true
			c.leaveLine()
		}()
		waitInLine(t, l, i+1) // join in order
	}
	l.wrote, l.wroteOK = cas.Item{Key: "k", Version: 100}, true
	first.leaveLine()
	wg.Wait()
	for i, got := range order {
		if got != i {
			t.Fatalf("turns went in the order %v, want the order of joining", order)
		}
	}
	if p := lineSlot("k").Load(); p != nil || linesOpen.Load() != 0 {
		t.Fatalf("the line outlived its last holder")
	}
}

// TestLineWaiterCancelled: a senior call whose context ends while it
// queues leaves the line with the context's error, and the turn skips it.
func TestLineWaiterCancelled(t *testing.T) {
	unboundedHolds(t)
	store := memcas.New()
	holder := senior(store, "k")
	if _, err := holder.joinLine(context.Background()); err != nil || holder.line == nil {
		t.Fatal("no turn for the first call")
	}
	ctx, cancel := context.WithCancel(context.Background())
	waiter := senior(store, "k")
	errc := make(chan error, 1)
	go func() {
		_, err := waiter.joinLine(ctx)
		errc <- err
	}()
	waitInLine(t, holder.line, 1)
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) || waiter.line != nil {
		t.Fatalf("cancelled waiter: %v, holds a turn: %v", err, waiter.line != nil)
	}
	waitInLine(t, holder.line, 0)
	holder.leaveLine()
	if linesOpen.Load() != 0 || lineSlot("k").Load() != nil {
		t.Fatal("the line outlived its holder")
	}
}

// TestHotKeyAttemptsBounded: 16 workers on one key of a store with
// network-like latency. A call that keeps losing joins the key's line
// after lineAfter waits; from then on the calls of the process wait for
// it, so it commits once the attempts already in flight have landed. No
// call needs more than lineAfter+2 attempts to join the line (its first,
// the immediate retry from the first conflict's state, one after each
// wait), plus one per other worker whose attempt was in flight, plus its
// own. With lines the worst call here takes about 8 attempts; without,
// 20–24, about the bound: this test shows the bound holds under real
// concurrency, the tests above that the line does what it should.
func TestHotKeyAttemptsBounded(t *testing.T) {
	unboundedHolds(t)
	const workers = 16
	store := slowStore{Store: memcas.New(), rtt: 300 * time.Microsecond}
	counter := cas.NewTyped[int](store, cas.JSON[int]())
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	var (
		most, total atomic.Int64
		commits     [workers]atomic.Int64
		wg          sync.WaitGroup
	)
	obs := ObserverFuncs{Call: func(_ context.Context, c Call) {
		if c.Outcome != OutcomeSuccess {
			return
		}
		total.Add(1)
		for n := most.Load(); int64(c.Attempts) > n && !most.CompareAndSwap(n, int64(c.Attempts)); n = most.Load() {
		}
	}}
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				// Half the workers without an observer: their successes
				// leave the loop by its short path.
				opts := []Option{WithMaxAttempts(1000)}
				if w%2 == 0 {
					opts = append(opts, WithObserver(obs))
				}
				if _, _, err := Update(ctx, counter, "hot", incrInt, opts...); err == nil {
					commits[w].Add(1)
				}
			}
		}()
	}
	wg.Wait()
	for w := range workers {
		if commits[w].Load() == 0 {
			t.Errorf("worker %d never committed", w)
		}
	}
	var all int64
	for w := range workers {
		all += commits[w].Load()
	}
	got, _, _ := counter.Get(context.Background(), "hot")
	if int64(got) != all {
		t.Fatalf("counter %d, commits %d", got, all)
	}
	bound := int64(lineAfter + 2 + workers)
	t.Logf("%d commits, at most %d attempts per call (bound %d)", total.Load(), most.Load(), bound)
	if most.Load() > bound {
		t.Fatalf("a call took %d attempts, more than %d", most.Load(), bound)
	}
}

// TestLineHolderLeaves: a call that becomes senior on its own (its writes
// conflict, as writers in other processes make them) opens its key's
// line, writes holding it, and leaves it as it returns: by the short path
// of a success without an observer, or by a panic in mutate.
func TestLineHolderLeaves(t *testing.T) {
	unboundedHolds(t)
	ctx := context.Background()
	store := &bumpingStore{Store: memcas.New(), n: lineAfter + 2}
	counter := cas.NewTyped[int](store, cas.JSON[int]())
	n, _, err := Update(ctx, counter, "k", incrInt)
	if err != nil || n != 101 {
		t.Fatalf("Update: %d, %v; want 101", n, err)
	}
	if last := store.openAtCAS[len(store.openAtCAS)-1]; last != 1 {
		t.Fatalf("lines open at the last write: %d, want the call's own", last)
	}
	if linesOpen.Load() != 0 || lineSlot("k").Load() != nil {
		t.Fatal("the call returned holding its line")
	}

	store.n = lineAfter + 2
	func() {
		defer func() {
			if r := recover(); r != "boom" {
				t.Fatalf("recovered %v, want mutate's panic", r)
			}
		}()
		Update(ctx, counter, "k", func(n int, _ bool) (int, error) {
			if linesOpen.Load() != 0 {
				panic("boom")
			}
			return n + 1, nil
		})
		t.Fatal("mutate did not panic while the call held its line")
	}()
	if linesOpen.Load() != 0 || lineSlot("k").Load() != nil {
		t.Fatal("a panic in mutate left the line held")
	}

	store.n = lineAfter + 2
	func() {
		defer func() {
			if r := recover(); r != "observer" {
				t.Fatalf("recovered %v, want the observer's panic", r)
			}
		}()
		Update(ctx, counter, "k", incrInt, WithObserver(ObserverFuncs{Attempt: func(context.Context, Attempt) {
			if linesOpen.Load() != 0 {
				panic("observer")
			}
		}}))
		t.Fatal("the observer did not panic while the call held its line")
	}()
	if linesOpen.Load() != 0 || lineSlot("k").Load() != nil {
		t.Fatal("a panic in an observer left the line held")
	}
}

// TestLineHandedStateIsWritten: a call handed the turn with the state its
// predecessor wrote writes from it without reading the key, and keeps
// what it wrote for the next in line.
func TestLineHandedStateIsWritten(t *testing.T) {
	unboundedHolds(t)
	ctx := context.Background()
	store := newCountingStore(memcas.New())
	counter := cas.NewTyped[int](store, cas.JSON[int]())
	v1 := put(t, store.Store, "k", "41")
	c := senior(store, "k")
	if _, err := c.joinLine(ctx); err != nil || c.line == nil {
		t.Fatal("no turn")
	}
	l := c.line
	next := &ticket{ready: make(chan struct{})}
	l.queue = append(l.queue, next) // the next in line
	c.handed = &ticket{state: cas.Item{Key: "k", Value: []byte("41"), Version: v1}, known: true}
	c.maxAttempts = 1
	n, v2, err := updateDirect(ctx, c, counter, "k", incrInt)
	if err != nil || n != 42 {
		t.Fatalf("updateDirect: %d, %v; want 42", n, err)
	}
	if got := store.getsOf("k"); got != 0 {
		t.Fatalf("%d reads of the key, want none: the turn came with its state", got)
	}
	<-next.ready // the call passed the turn on as it returned
	if !next.known || next.state.Version != v2 || string(next.state.Value) != "42" {
		t.Fatalf("the next in line was handed %+v (%v), want what the holder wrote (version %d)", next.state, next.known, v2)
	}
	(&config{line: l}).leaveLine()
}
