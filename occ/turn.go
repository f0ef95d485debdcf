package occ

import (
	"context"
	"hash/maphash"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/occkit/occkit/cas"
)

// Turns: the fairness of Update between the calls of one process.
//
// On a hot key an optimistic writer that just committed starts its next
// call at once and is the first to read the new version, while the callers
// it beat are still waiting out their backoff: the same few callers win
// round after round and an unlucky one loses twenty times in a row (on
// PostgreSQL at 8 workers, a p99.9 of 70–110 ms against 10–15 ms under an
// advisory lock). sync.Mutex has the same problem and the same cure, its
// starvation mode: a waiter that has waited too long is served next, in
// order, and arrivals stop barging in.
//
// So: a call of Update that has waited lineAfter times and conflicts
// again joins its key's line, one per key in the process. The first call
// in the line holds the turn; the others queue behind it in order and are
// handed the turn one by one as each holder's call ends. While the line
// exists, every other call of this process on that key waits before each
// attempt until the line is gone (at most holdUnits of the holder's
// attempt times, so that a holder stuck in mutate or on a dead connection
// delays the others a little, not for ever). The holder no longer backs
// off: it retries at once from the state each conflict carries, or after
// one attempt time when a conflict carries none. Within the process the
// holder's next write therefore meets only the attempts already in flight
// when it took the turn; writers in other processes still coordinate only
// through the store's versions, and the backoff's seniority is what bounds
// the tail between them.
//
// The cost without contention is one atomic load per attempt (linesOpen):
// the table is looked at only while some line exists in the process.

// lineAfter is how many waits make a call join its key's line at its
// next conflict. Side by side with calls that take no turns (occbench
// --strategies occ,occ-no-turns, PostgreSQL and Redis, 8 and 64 workers on
// one key), joining after three waits cut the p99.9 at 8 workers on
// PostgreSQL to 0.44× (33.5 against 76.8 ms) for 0.80× the throughput;
// after four, to 0.57× for 0.86×; after two, to 0.31× for 0.70×.
const lineAfter = 3

// turnSlots is the size of the process's table of lines. Keys that share
// a slot share nothing but the slot: a second hot key in the same slot
// cannot open a line while the first has one (its calls keep the
// backoff's seniority).
const turnSlots = 64

// holdUnits bounds a wait for a line to end, in the holder's attempt
// times. 2, 4, 8, 16 and 32 were tried on PostgreSQL at 8 workers on one
// key; their differences stayed within the noise between runs, and 8 is
// in the middle: long enough for a holder's few attempts, short enough
// that a stuck holder costs the others little.
const holdUnits = 8

// queueWait bounds a senior call's wait for its turn in a line; past it
// the call leaves the line and tries again at once, from a fresh read (on
// its next conflict it joins the line again, at the back).
const queueWait = scaledMaxWait

// A line is the queue of the senior calls of Update on one key of one
// store in this process.
type line struct {
	store cas.Store
	key   string
	unit  atomic.Int64  // the holder's attempt time when it got the turn
	done  chan struct{} // closed when the line ends

	// What the holder wrote, to hand over with the turn (the holder's
	// goroutine alone uses them).
	wrote   cas.Item
	wroteOK bool

	mu     sync.Mutex
	queue  []*ticket // the waiting calls, first first
	closed bool      // the line has ended
}

// A ticket is a call's place in a line. Closing ready hands it the turn,
// with the state the previous holder wrote when it has it: in the process
// nobody else wrote the key since, so the new holder can write from it
// without reading (a conflict, from a writer elsewhere, carries the
// newer state).
type ticket struct {
	ready chan struct{}
	state cas.Item
	known bool
}

var (
	// linesOpen counts the lines of the process; zero lets every call
	// skip the table. It has a cache line of its own: every attempt of
	// every Update reads it.
	linesOpen atomic.Int32
	lineTable [turnSlots]struct {
		l atomic.Pointer[line]
		_ [56]byte // one cache line per slot
	}
	lineSeed = maphash.MakeSeed()

	// holdLimit, when set (tests), replaces the bounds of the waits for
	// a line to end and for a turn in it.
	holdLimit time.Duration
)

func lineSlot(key string) *atomic.Pointer[line] {
	return &lineTable[maphash.String(lineSeed, key)%turnSlots].l
}

func (l *line) is(store cas.Store, key string) bool {
	return l.key == key && l.store == store
}

// joinLine puts the call in its key's line and returns once it holds the
// turn (c.line set), or when it could not get it: the slot belongs to
// another key, the line ended as it joined, or queueWait passed. The
// error is ctx's, if it ended meanwhile. waited reports whether the call
// queued (what it knew before is then stale).
func (c *config) joinLine(ctx context.Context) (waited bool, err error) {
	if !combinable(c.store) {
		return false, nil
	}
	slot := lineSlot(c.key)
	l := slot.Load()
	if l == nil {
		l = &line{store: c.store, key: c.key, done: make(chan struct{})}
		l.unit.Store(int64(c.unit))
		if slot.CompareAndSwap(nil, l) {
			linesOpen.Add(1)
			c.line = l
			return false, nil
		}
		if l = slot.Load(); l == nil {
			return false, nil
		}
	}
	if !l.is(c.store, c.key) {
		return false, nil
	}
	tk := &ticket{ready: make(chan struct{})}
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return false, nil
	}
	l.queue = append(l.queue, tk)
	l.mu.Unlock()

	limit := queueWait
	if holdLimit != 0 {
		limit = holdLimit
	}
	timer := time.NewTimer(limit)
	defer timer.Stop()
	select {
	case <-tk.ready:
		c.line = l
		l.unit.Store(int64(c.unit))
		c.handed = tk
		return true, nil
	case <-timer.C:
	case <-ctx.Done():
		err = ctx.Err()
	}
	l.mu.Lock()
	for i, t := range l.queue {
		if t == tk {
			l.queue = append(l.queue[:i], l.queue[i+1:]...)
			l.mu.Unlock()
			return true, err
		}
	}
	l.mu.Unlock()
	// The turn was handed over as the wait ended: take it, and pass it
	// on at once if the call is done.
	<-tk.ready
	c.line = l
	l.unit.Store(int64(c.unit))
	c.handed = tk
	if err != nil {
		// Pass on what the previous holder wrote with the turn.
		l.wrote, l.wroteOK = tk.state, tk.known
		c.leaveLine()
	}
	return true, err
}

// leaveLine ends the call's turn, if it holds one: the next call in the
// line gets it, or the line ends and the calls waiting for it go on.
func (c *config) leaveLine() {
	l := c.line
	if l == nil {
		return
	}
	c.line = nil
	state, known := l.wrote, l.wroteOK
	l.wrote, l.wroteOK = cas.Item{}, false
	l.mu.Lock()
	if len(l.queue) > 0 {
		next := l.queue[0]
		l.queue = l.queue[1:]
		l.mu.Unlock()
		next.state, next.known = state, known
		close(next.ready)
		return
	}
	l.closed = true
	l.mu.Unlock()
	lineSlot(l.key).CompareAndSwap(l, nil)
	linesOpen.Add(-1)
	close(l.done)
}

// awaitLine waits, before an attempt, while a line of other calls of this
// process exists on the call's key: until it ends, the bound has passed
// or ctx ends (ctx.Err() is returned). It reports whether it waited.
func (c *config) awaitLine(ctx context.Context) (bool, error) {
	l := lineSlot(c.key).Load()
	if l == nil || !l.is(c.store, c.key) {
		return false, nil
	}
	limit := holdLimit
	if limit == 0 {
		limit = min(max(holdUnits*time.Duration(l.unit.Load()), time.Millisecond), scaledMaxWait)
	}
	timer := time.NewTimer(limit)
	defer timer.Stop()
	select {
	case <-l.done:
	case <-timer.C:
	case <-ctx.Done():
		return true, ctx.Err()
	}
	return true, nil
}

// attemptHolding, classifyHolding and observeHolding run the caller's
// code (an attempt, a retryable check, an observer) for the holder of a
// turn: if it panics, the turn passes on as the panic leaves the call; a
// line left held would hold the key's other calls for ever. (A deferred
// release in Update would do the same for every call, and costs an
// uncontended Update 7%; so would closures here, by moving the loop's
// variables to memory.)
func (c *config) attemptHolding(ctx context.Context, fn func(ctx context.Context) error) error {
	done := false
	defer c.leaveUnless(&done)
	err := fn(ctx)
	done = true
	return err
}

func (c *config) classifyHolding(err error) Outcome {
	done := false
	defer c.leaveUnless(&done)
	o := c.classify(err)
	done = true
	return o
}

func (c *config) observeHolding(ctx context.Context, a Attempt) {
	done := false
	defer c.leaveUnless(&done)
	c.observeAttempt(ctx, a)
	done = true
}

// leaveUnless leaves the line unless *done: the caller's code did not
// return (it panicked, or its goroutine exited).
func (c *config) leaveUnless(done *bool) {
	if !*done {
		c.leaveLine()
	}
}

// holderWait is the wait of a turn's holder after a conflict that carried
// no state: one attempt time, ±50%.
func holderWait(unit time.Duration) time.Duration {
	if unit <= 0 {
		return scaledMinWait
	}
	return max(unit/2+time.Duration(rand.Int64N(int64(unit)+1)), scaledMinWait)
}
