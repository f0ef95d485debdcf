package occ

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/occkit/occkit/adapters/memcas"
	"github.com/occkit/occkit/cas"
)

// senior returns the config of a call of Update on key of store that
// takes part in its process's lines, as Update makes it.
func senior(store cas.Store, key string) *config {
	return &config{store: store, key: key, unit: time.Millisecond}
}

// holdTurn returns such a call holding the turn of key's new line.
func holdTurn(t *testing.T, store cas.Store, key string) *config {
	t.Helper()
	c := senior(store, key)
	if _, err := c.joinLine(context.Background(), true); err != nil || c.line == nil {
		t.Fatalf("the first call on %s did not get the turn: %v", key, err)
	}
	return c
}

// unboundedHolds makes the waits for a turn in a line last until they
// come, and lets calls on memcas open lines; at the end of the test the
// table of lines must be empty, and is emptied so that one failure does
// not spill into later tests.
func unboundedHolds(t *testing.T) {
	t.Helper()
	holdLimit = time.Hour
	minUnit := lineMinUnit
	lineMinUnit = 0 // lines on memcas too
	t.Cleanup(func() {
		holdLimit = 0
		lineMinUnit = minUnit
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
	delay     time.Duration // added to every write
	mu        sync.Mutex
	n         int
	openAtCAS []int32
}

func (s *bumpingStore) CompareAndSwap(ctx context.Context, key string, expected cas.Version, value []byte) (cas.Version, error) {
	time.Sleep(s.delay)
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
// Update of that key in the process queues in it before it touches the
// store; an Update of another key does not wait.
func TestLineHoldsTheKeysOtherCalls(t *testing.T) {
	unboundedHolds(t)
	store := newCountingStore(memcas.New())
	counter := cas.NewTyped[int](store, cas.JSON[int]())
	ctx := context.Background()

	holder := holdTurn(t, store, "hot")
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

// TestLineArrivalsQueueInOrder: calls that arrive at a key while its line
// exists queue in it, get the turn in the order they came and write from
// the state the previous holder wrote, without reading. (Calls that waited
// for the line to end instead would all read, in any order.)
func TestLineArrivalsQueueInOrder(t *testing.T) {
	unboundedHolds(t)
	store := newCountingStore(memcas.New())
	counter := cas.NewTyped[int](store, cas.JSON[int]())
	ctx := context.Background()
	v, err := counter.CompareAndSwap(ctx, "hot", 0, 10)
	if err != nil {
		t.Fatal(err)
	}

	holder := holdTurn(t, store, "hot")
	l := holder.line
	const n = 5
	got := make([]chan int, n)
	for i := range n {
		got[i] = make(chan int, 1)
		go func() {
			v, _, err := Update(ctx, counter, "hot", incrInt)
			if err != nil {
				t.Errorf("call %d: %v", i, err)
			}
			got[i] <- v
		}()
		waitInLine(t, l, i+1) // arrive in order
	}
	store.mu.Lock()
	gets0, cass0 := store.gets["hot"], store.cass["hot"]
	store.mu.Unlock()
	// The holder hands over what it wrote (here: what Create wrote).
	it, err := store.Get(ctx, "hot")
	if err != nil || it.Version != v {
		t.Fatalf("read %+v, %v", it, err)
	}
	l.wrote, l.wroteOK = it, true
	holder.leaveLine()
	for i := range n {
		if v := <-got[i]; v != 11+i {
			t.Fatalf("call %d wrote %d, want %d: the turns did not go in the order of arrival", i, v, 11+i)
		}
	}
	store.mu.Lock()
	gets, cass := store.gets["hot"]-gets0-1, store.cass["hot"]-cass0
	store.mu.Unlock()
	if gets != 0 || cass != n {
		t.Fatalf("%d reads and %d writes for %d queued calls, want 0 and %d", gets, cass, n, n)
	}
	if linesOpen.Load() != 0 {
		t.Fatal("the line outlived its last call")
	}
}

// TestLineWaitFollowsProgress: a queued call keeps its place for as long
// as the line moves, however long that is, and leaves a line that stops
// moving (a stuck holder) after the bound, to try once on its own.
func TestLineWaitFollowsProgress(t *testing.T) {
	unboundedHolds(t)
	holdLimit = 30 * time.Millisecond
	store := newCountingStore(memcas.New())
	counter := cas.NewTyped[int](store, cas.JSON[int]())
	ctx := context.Background()

	holder := holdTurn(t, store, "hot")
	l := holder.line
	// Four slow holders ahead, 20 ms each: the last call waits 80 ms,
	// more than twice the bound, in a line that moves.
	const slow = 4
	var wg sync.WaitGroup
	for i := range slow {
		c := senior(store, "hot")
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := c.joinLine(ctx, true); err != nil || c.line != l {
				t.Errorf("slow call %d got no turn (%v)", i, err)
				return
			}
			time.Sleep(20 * time.Millisecond)
			c.leaveLine()
		}()
		waitInLine(t, l, i+1)
	}
	done := make(chan error, 1)
	go func() {
		_, _, err := Update(ctx, counter, "hot", incrInt)
		done <- err
	}()
	waitInLine(t, l, slow+1)
	holder.leaveLine()
	wg.Wait()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if turns := l.turns.Load(); turns != slow+2 {
		t.Fatalf("%d turns ended, want %d: the call left a line that moved", turns, slow+2)
	}

	// A holder that never leaves: the queued call gives up its place
	// after the bound and writes on its own.
	stuck := holdTurn(t, store, "hot")
	if _, _, err := Update(ctx, counter, "hot", incrInt); err != nil {
		t.Fatalf("behind a stuck holder: %v", err)
	}
	if n, _, err := counter.Get(ctx, "hot"); err != nil || n != 2 {
		t.Fatalf("counter %d (%v), want 2", n, err)
	}
	stuck.leaveLine()
}

// TestLineHandsTheTurnInOrder: senior calls get the turn in the order they
// joined, each with the state the previous holder wrote.
func TestLineHandsTheTurnInOrder(t *testing.T) {
	unboundedHolds(t)
	store := memcas.New()
	ctx := context.Background()
	first := holdTurn(t, store, "k")
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
			if _, err := c.joinLine(ctx, true); err != nil || c.line != l {
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
	if p := lineFor(store, "k"); p != nil || linesOpen.Load() != 0 {
		t.Fatalf("the line outlived its last holder")
	}
}

// TestLineWaiterCancelled: a senior call whose context ends while it
// queues leaves the line with the context's error, and the turn skips it.
func TestLineWaiterCancelled(t *testing.T) {
	unboundedHolds(t)
	store := memcas.New()
	holder := holdTurn(t, store, "k")
	ctx, cancel := context.WithCancel(context.Background())
	waiter := senior(store, "k")
	errc := make(chan error, 1)
	go func() {
		_, err := waiter.joinLine(ctx, true)
		errc <- err
	}()
	waitInLine(t, holder.line, 1)
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) || waiter.line != nil {
		t.Fatalf("cancelled waiter: %v, holds a turn: %v", err, waiter.line != nil)
	}
	waitInLine(t, holder.line, 0)
	holder.leaveLine()
	if linesOpen.Load() != 0 || lineFor(store, "k") != nil {
		t.Fatal("the line outlived its holder")
	}
}

// TestHotKeyAttemptsBounded: 16 workers on one key of a store with
// network-like latency. A call that conflicts opens its key's line or
// queues in it; from then on every call of the process queues in it
// before its attempt, so a call's write can only meet the attempts that
// were already in flight when the line opened. No call needs more than
// its first attempt, one per other worker whose attempt was in flight,
// and its own, plus one for a line that ended as the call queued: the
// bound below. With lines the worst call here takes about 4 attempts;
// without, 20–24: this test shows the bound holds under real concurrency,
// the tests above that the line does what it should.
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
	bound := int64(2 + workers)
	t.Logf("%d commits, at most %d attempts per call (bound %d)", total.Load(), most.Load(), bound)
	if most.Load() > bound {
		t.Fatalf("a call took %d attempts, more than %d", most.Load(), bound)
	}
}

// TestLineHolderLeaves: a call whose writes conflict (as writers in
// other processes make them) opens its key's line, writes holding it, and leaves it as it returns: by the short path
// of a success without an observer, or by a panic in mutate.
func TestLineHolderLeaves(t *testing.T) {
	unboundedHolds(t)
	ctx := context.Background()
	store := &bumpingStore{Store: memcas.New(), n: 2}
	counter := cas.NewTyped[int](store, cas.JSON[int]())
	n, _, err := Update(ctx, counter, "k", incrInt)
	if err != nil || n != 101 {
		t.Fatalf("Update: %d, %v; want 101", n, err)
	}
	if last := store.openAtCAS[len(store.openAtCAS)-1]; last != 1 {
		t.Fatalf("lines open at the last write: %d, want the call's own", last)
	}
	if linesOpen.Load() != 0 || lineFor(store, "k") != nil {
		t.Fatal("the call returned holding its line")
	}

	// A panic in the caller's code while the call holds its line.
	panicsLeavingLine := func(want, where string, update func()) {
		t.Helper()
		store.n = 2
		func() {
			defer func() {
				if r := recover(); r != want {
					t.Fatalf("recovered %v, want the %s's panic", r, where)
				}
			}()
			update()
			t.Fatalf("the %s did not panic while the call held its line", where)
		}()
		if linesOpen.Load() != 0 || lineFor(store, "k") != nil {
			t.Fatalf("a panic in the %s left the line held", where)
		}
	}
	panicsLeavingLine("boom", "mutate", func() {
		Update(ctx, counter, "k", func(n int, _ bool) (int, error) {
			if linesOpen.Load() != 0 {
				panic("boom")
			}
			return n + 1, nil
		})
	})
	panicsLeavingLine("observer", "observer", func() {
		Update(ctx, counter, "k", incrInt, WithObserver(ObserverFuncs{Attempt: func(context.Context, Attempt) {
			if linesOpen.Load() != 0 {
				panic("observer")
			}
		}}))
	})
}

// TestLineHolderStaggersRepeatedConflicts: the holder of a turn retries
// at once from the state its first holderRetriesAtOnce conflicts carry;
// conflicts after those, one after another as the holders of other
// processes make them, are each followed by a wait of about one attempt
// time, so that those holders do not retry against each other in step.
func TestLineHolderStaggersRepeatedConflicts(t *testing.T) {
	unboundedHolds(t)
	const conflicts = 6
	store := &bumpingStore{Store: memcas.New(), n: conflicts}
	counter := cas.NewTyped[int](store, cas.JSON[int]())
	obs := &hookObserver{}
	n, _, err := Update(context.Background(), counter, "k", incrInt, WithObserver(obs))
	if err != nil || n != 100+1 {
		t.Fatalf("Update: %d, %v; want 101", n, err)
	}
	obs.mu.Lock()
	defer obs.mu.Unlock()
	var after []int
	for _, w := range obs.waits {
		if w.Kind != WaitBackOff {
			t.Fatalf("a %v wait after attempt %d: the call is alone in its process", w.Kind, w.After)
		}
		after = append(after, w.After)
	}
	// Attempts 1 and 2 conflict and are retried at once (the first
	// opens the line); 3 to 6 conflict and wait; 7 writes.
	want := []int{3, 4, 5, 6}
	if fmt.Sprint(after) != fmt.Sprint(want) {
		t.Fatalf("waits after attempts %v, want %v", after, want)
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
	c := holdTurn(t, store, "k")
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

// TestLineSlotsShared: two hot keys whose hashes fall on the same slot
// both get a line.
func TestLineSlotsShared(t *testing.T) {
	unboundedHolds(t)
	store := memcas.New()
	ctx := context.Background()
	slotOf := func(key string) uint64 { return maphash.String(lineSeed, key) % turnSlots }
	other := ""
	for i := 0; other == ""; i++ {
		if k := fmt.Sprintf("k%d", i); slotOf(k) == slotOf("k") && k != "k" {
			other = k
		}
	}
	a, b := senior(store, "k"), senior(store, other)
	if _, err := a.joinLine(ctx, true); err != nil || a.line == nil {
		t.Fatalf("no line for k: %v", err)
	}
	if _, err := b.joinLine(ctx, true); err != nil || b.line == nil || b.line == a.line {
		t.Fatalf("no line of its own for %s, whose slot k's line holds: %v", other, err)
	}
	if lineFor(store, "k") != a.line || lineFor(store, other) != b.line {
		t.Fatal("lineFor does not find the two lines")
	}
	a.leaveLine()
	b.leaveLine()
	if linesOpen.Load() != 0 || lineFor(store, "k") != nil || lineFor(store, other) != nil {
		t.Fatal("lines left after their holders left")
	}
}

// TestLineOnlyWhereAttemptsAreSlow: a conflict opens a line only on a
// store whose attempts take at least lineMinUnit (a queue's hand-offs
// cost more than retries on an in-process store).
func TestLineOnlyWhereAttemptsAreSlow(t *testing.T) {
	minUnit := lineMinUnit
	lineMinUnit = 5 * time.Millisecond
	defer func() { lineMinUnit = minUnit }()
	ctx := context.Background()

	fast := &bumpingStore{Store: memcas.New(), n: 3}
	if _, _, err := Update(ctx, cas.NewTyped[int](fast, cas.JSON[int]()), "k", incrInt); err != nil {
		t.Fatal(err)
	}
	for i, n := range fast.openAtCAS {
		if n != 0 {
			t.Fatalf("write %d of a fast store saw %d lines open, want none", i, n)
		}
	}

	slow := &bumpingStore{Store: memcas.New(), n: 3, delay: 2 * lineMinUnit}
	if _, _, err := Update(ctx, cas.NewTyped[int](slow, cas.JSON[int]()), "k", incrInt); err != nil {
		t.Fatal(err)
	}
	if last := slow.openAtCAS[len(slow.openAtCAS)-1]; last != 1 {
		t.Fatalf("the last write of a slow store saw %d lines open, want the call's own (all: %v)", last, slow.openAtCAS)
	}
	if linesOpen.Load() != 0 {
		t.Fatal("a line outlived its call")
	}
}

// TestFastLineIsNotJoined: once the holder's attempts take less than
// lineMinUnit (an in-process store whose line opened on one slow,
// descheduled attempt), the line takes no one: an arrival runs at once.
func TestFastLineIsNotJoined(t *testing.T) {
	unboundedHolds(t)
	store := newCountingStore(memcas.New())
	counter := cas.NewTyped[int](store, cas.JSON[int]())
	ctx := context.Background()

	holder := holdTurn(t, store, "hot")
	holder.line.fast.Store(true) // as run does after a fast attempt
	dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, _, err := Update(dctx, counter, "hot", incrInt); err != nil {
		t.Fatalf("an arrival at a fast line: %v", err)
	}
	if c := senior(store, "hot"); func() bool { q, _ := c.joinLine(ctx, true); return q || c.line != nil }() {
		t.Fatal("a conflicting call queued in a fast line")
	}
	holder.leaveLine()
}

// TestHolderWaitBounded: a holder's wait is about one attempt time, and
// never so long (after one slow attempt) that the calls in its line give
// up waiting for it (queueWait).
func TestHolderWaitBounded(t *testing.T) {
	for range 100 {
		if d := holderWait(time.Millisecond); d < 500*time.Microsecond || d > 1500*time.Microsecond {
			t.Fatalf("holderWait(1ms) = %v, want 0.5-1.5ms", d)
		}
		if d := holderWait(10 * time.Second); d > queueWait/2 {
			t.Fatalf("holderWait(10s) = %v, want at most %v", d, queueWait/2)
		}
	}
}
