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
// round after round and an unlucky one loses twenty times in a row, and
// the tail grows to several times a queueing lock's. sync.Mutex has the same problem and the same cure, its
// starvation mode: a waiter that has waited too long is served next, in
// order, and arrivals stop barging in.
//
// So: a call of Update whose write conflicts opens its key's line, one
// per key in the process, and holds its turn (or queues in the line, if
// another call opened it first). From then on every call of this process
// on that key queues in the line before its attempt, arrivals included:
// the calls get the turn in order, one by one as each holder's call ends,
// each with the state its predecessor wrote, so that it writes without
// reading. The line ends when a holder leaves it empty. This is
// sync.Mutex's starvation mode on a key: while the key is hot the
// process's calls on it run one at a time (no attempt of this process is
// wasted on a conflict with another), and the round trip of a read is
// saved on every turn. A call that waited queueWait in a line that did not
// move (a holder stuck in mutate or on a dead connection) leaves it and
// tries once on its own. The holder does not back off: it retries at once
// from the state its first conflicts carry (holderRetriesAtOnce), and
// waits about one attempt time otherwise (holderWait). Writers in other processes still coordinate only
// through the store's versions: a process's holder meets the other
// processes' holders, and the calls that take no turns (or whose key found
// no free slot) keep the backoff's seniority.
//
// Opening the line at the first conflict was best or level everywhere
// against opening it after one, two or three waits (docs/performance.md,
// "Measurements behind occ's defaults"). Since lineMinUnit, a call's
// first conflict opens no line (its attempt was not timed): the
// second does, and it follows the first without a wait when the first
// carried the key's state.
//
// Lines are for stores with round trips: a conflict opens one only when
// the call's attempts take at least lineMinUnit, and a line whose holder's
// attempts are faster takes no one.
//
// The cost without contention is one atomic load per attempt (linesOpen):
// the table is looked at only while some line exists in the process.

// lineMinUnit is the shortest attempt time at which a conflict opens a
// line, and under which a line takes no one (line.fast). A turn costs a
// goroutine hand-off, a few microseconds; on a store whose attempts take
// about that long (memcas: about a microsecond) a retry is cheaper than a
// queue (BenchmarkContended; docs/performance.md), while a database round
// trip, even on loopback, takes tens to hundreds of microseconds.
var lineMinUnit = 20 * time.Microsecond

// turnSlots is the size of the process's table of lines. A key's line
// takes one of turnProbes slots from the key's hash; a hot key whose
// slots all hold other keys' lines opens none (its calls keep the
// backoff's seniority).
const turnSlots = 64

// holderRetriesAtOnce is how many conflicts the holder of a turn meets
// before it waits one attempt time between attempts. Its process's other
// calls wait in line, so a holder's conflict is with a writer elsewhere
// (another process, or a call that did not queue). One such conflict is
// a race lost; one after another mean the holders of several processes
// are retrying against each other at once, each attempt pulling the
// others' writes into conflict, and a wait of one attempt time staggers
// them. More immediate retries keep a process's line moving where
// conflicts are rare but attempt times uneven (a wait is then long and
// holds everyone queued behind it); fewer stagger sooner
// The conflict that opened the call's line counts as its first
// (docs/performance.md, "Measurements behind occ's defaults").
const holderRetriesAtOnce = 2

// queueWait bounds a call's wait in a line that does not move (no turn
// ends): past it the call leaves the line and tries once on its own, from
// a fresh read (it queues again, at the back, before its next attempt).
const queueWait = scaledMaxWait

// A line is the queue of the calls of Update on one key of one store in
// this process, while the key is hot.
type line struct {
	store cas.Store
	key   string
	turns atomic.Uint64 // how many turns have ended
	// fast is set while the holders' attempts take less than
	// lineMinUnit: no call then queues (the line drains), since
	// on such a store a hand-off costs more than a retry. A line opens on
	// a slow attempt, but on an in-process store under contention one
	// attempt in many is slow only because its goroutine was descheduled.
	fast atomic.Bool
	slot *atomic.Pointer[line]

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

	// holdLimit, when set (tests), replaces queueWait.
	holdLimit time.Duration

	// linesLeftStuck counts the waits that left a line because it did
	// not move for queueWait (tests: turns that never deadlock never
	// count one).
	linesLeftStuck atomic.Int64
)

// turnProbes is how many slots from its hash a key's line may take: keys
// whose hashes meet open their lines side by side.
const turnProbes = 4

// lineFor returns the line of key of store, if it has one.
func lineFor(store cas.Store, key string) *line {
	h := maphash.String(lineSeed, key)
	for i := range uint64(turnProbes) {
		if l := lineTable[(h+i)%turnSlots].l.Load(); l != nil && l.is(store, key) {
			return l
		}
	}
	return nil
}

// openLine makes the line of key of store, in the first free slot of its
// probes, and returns it, or the line that another call opened meanwhile
// (opened false), or nil when the probed slots hold other keys' lines.
func openLine(store cas.Store, key string) (l *line, opened bool) {
	h := maphash.String(lineSeed, key)
	nl := &line{store: store, key: key}
	for range turnProbes {
		if l := lineFor(store, key); l != nil {
			return l, false
		}
		free := false
		for i := range uint64(turnProbes) {
			slot := &lineTable[(h+i)%turnSlots].l
			if slot.Load() != nil {
				continue
			}
			free = true
			if slot.CompareAndSwap(nil, nl) {
				nl.slot = slot
				linesOpen.Add(1)
				return nl, true
			}
			break // taken as we looked: look again
		}
		if !free {
			return nil, false
		}
	}
	return nil, false
}

func (l *line) is(store cas.Store, key string) bool {
	return l.key == key && l.store == store
}

// joinLine puts the call in its key's line and returns once it holds the
// turn (c.line set), or when it could not get it: the slot belongs to
// another key, the line ended as it joined, or the line made no progress
// for queueWait (its holder is stuck). With open, a call that finds no
// line opens one and holds its turn; without, it joins only a line that
// exists. The error is ctx's, if it ended meanwhile. queued reports
// whether the call waited in a line (what it knew before is then stale).
func (c *config) joinLine(ctx context.Context, open bool) (queued bool, err error) {
	if !combinable(c.store) {
		return false, nil
	}
	l := lineFor(c.store, c.key)
	if l == nil {
		if !open {
			return false, nil
		}
		var opened bool
		if l, opened = openLine(c.store, c.key); opened {
			c.line = l
			return false, nil
		}
		if l == nil {
			return false, nil
		}
	}
	if l.fast.Load() {
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
	turns := l.turns.Load()
wait:
	for {
		select {
		case <-tk.ready:
			c.line = l
			c.handed = tk
			return true, nil
		case <-timer.C:
			if n := l.turns.Load(); n != turns {
				// The line moves: keep the place in it.
				turns = n
				timer.Reset(limit)
				continue
			}
			linesLeftStuck.Add(1)
			break wait
		case <-ctx.Done():
			err = ctx.Err()
			break wait
		}
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
	l.turns.Add(1)
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
	if known {
		// The next call of the key starts from it (recent.go).
		rememberState(l.store, l.key, state, false)
	}
	l.slot.CompareAndSwap(l, nil)
	linesOpen.Add(-1)
}

// attemptHolding, classifyHolding and observeHolding run the caller's
// code (an attempt, a retryable check, an observer) for the holder of a
// turn: if it panics, the turn passes on as the panic leaves the call; a
// line left held would hold the key's other calls for ever. (A deferred
// release in Update would do the same for every call, and costs every
// uncontended Update a measurable share of its time, docs/performance.md;
// so would closures here, by moving the loop's variables to memory.)
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

// holderWait is the wait of a turn's holder between attempts (after a
// conflict that carried no state, or after holderRetriesAtOnce): one
// attempt time, ±50%, and at most half of queueWait, so that one slow
// attempt does not make the holder sleep while the calls in its line give
// up waiting for it.
func holderWait(unit time.Duration) time.Duration {
	if unit <= 0 {
		return scaledMinWait
	}
	return min(max(unit/2+time.Duration(rand.Int64N(int64(unit)+1)), scaledMinWait), queueWait/2)
}
