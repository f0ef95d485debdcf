package occ

import (
	"sync/atomic"
	"time"
	"unsafe"
)

// coldCounters count the calls of cold keys: calls, the calls that ended
// without heating the key (batches of their own), and the writes they
// sent before it heated (an escalated call then counts in a shard, as a
// hot call, except as an update).
type coldCounters struct {
	updates, batches, writes atomic.Int64
	_                        [40]byte // 64 bytes a stripe
}

const (
	coldStripeBits = 6
	coldStripes    = 1 << coldStripeBits
)

// coldStripe picks the caller's stripe of cold counters from the address
// of its stack: each goroutine has its own stack, so the goroutines of a
// process spread over the stripes and each keeps to one.
func (cb *Combiner) coldStripe() *coldCounters {
	var probe byte
	p := uint64(uintptr(unsafe.Pointer(&probe))) >> 10 // stacks are kilobytes apart
	return &cb.cold[(p*0x9E3779B97F4A7C15)>>(64-coldStripeBits)]
}

// hotBuckets is the number of buckets the combiner counts its hot keys
// in: a cold key whose bucket holds a hot key takes the shard's mutex to
// find out that it is cold, so the buckets are many more than the hot
// keys that conflicts leave behind at a thousand keys.
const hotBuckets = 4096

// coolAfter is how many batches of one caller in a row cool a hot key.
const coolAfter = 8

// idleCool is how long a hot key without updates stays hot: a cold call
// that finds its bucket hot but not its own key (it then pays for the
// shard's mutex) cools the shard's hot keys idle for longer, at most once
// per idleCool and shard.
const idleCool = 10 * time.Millisecond

// leaveSolo ends a caller's run alone on q: without the mutex when nobody
// queued behind it (a lonely batch, which may cool the key), else by
// handing the lead on.
func (cb *Combiner) leaveSolo(sh *combineShard, h uint32, q *combineQueue) {
	q.lastUse.Store(monoNow())
	if q.state.CompareAndSwap(queueSolo, queueIdle) {
		if q.noteLonely() >= coolAfter && q.lonelyLong() {
			sh.mu.Lock()
			cb.coolLocked(h, q)
			sh.mu.Unlock()
		}
		return
	}
	sh.mu.Lock()
	q.resetLonely()
	cb.handOff(sh, h, q)
	sh.mu.Unlock()
}

// maxIdleQueues is how many queues a shard keeps for reuse before a new
// one drops those of idle keys (a var for the tests).
var maxIdleQueues = 256

// handOff passes the lead of q to the first waiting caller, or marks the
// queue idle when nobody waits (it stays for the key's next update: no
// allocation, no map write). The shard's mutex is held.
func (cb *Combiner) handOff(sh *combineShard, h uint32, q *combineQueue) {
	if len(q.pending) == 0 {
		q.state.Store(queueIdle)
		cb.coolLocked(h, q)
		return
	}
	q.resetLonely() // someone waited: the key is contended
	next := q.pending[0]
	next.state = statePromoted
	signal(next)
}

// sweepIdle cools the shard's hot keys that no batch has used for
// idleCool (the shard's mutex is held), at most once per idleCool: a key
// that heated once and is not updated again would otherwise keep its
// bucket hot, and the cold keys of the bucket on the shard's mutex.
func (cb *Combiner) sweepIdle(sh *combineShard) {
	now := monoNow()
	if now-sh.swept < int64(idleCool) {
		return
	}
	sh.swept = now
	for k, q := range sh.queues {
		if q.hot && q.state.Load() == queueIdle && len(q.pending) == 0 && now-q.lastUse.Load() >= int64(idleCool) {
			cb.cool(keyHash(k.key), q)
		}
	}
}

// coolLocked makes q cold again once coolAfter batches in a row carried
// one caller each, over coolSpan at least, and nobody waits (the shard's
// mutex is held): its calls then run as plain Updates until a conflict
// heats it again.
func (cb *Combiner) coolLocked(h uint32, q *combineQueue) {
	if q.hot && q.lonely.Load() >= coolAfter && q.lonelyLong() && q.state.Load() == queueIdle && len(q.pending) == 0 {
		cb.cool(h, q)
	}
}

// heat makes q, of a key with hash h, hot if it is not (the shard's
// mutex is held).
func (cb *Combiner) heat(h uint32, q *combineQueue) {
	if !q.hot {
		q.hot = true
		cb.hot[h%hotBuckets].Add(1)
	}
}

// cool makes hot q, of a key with hash h, cold (the shard's mutex is
// held).
func (cb *Combiner) cool(h uint32, q *combineQueue) {
	q.hot = false
	cb.hot[h%hotBuckets].Add(-1)
}

// coolSpan is how long a hot key's batches must have carried one caller
// each before it cools (as well as coolAfter of them). Batches are lonely
// for a moment whenever the process's other callers of the key are still
// on their way back to it, or (SQLite) wait for the database's write
// lock in a call that began while the key was cold; a key that cooled
// after eight such batches let its writers meet in the database again,
// and on SQLite their waits are the busy handler's sleeps.
var coolSpan = 20 * time.Millisecond

// monoEpoch and monoNow read the monotonic clock as an int64 an atomic
// can hold, for every time the combiner keeps (lastUse, swept,
// lonelySince): a wall clock stepped back must not keep a key hot.
var monoEpoch = time.Now()

func monoNow() int64 { return int64(time.Since(monoEpoch)) + 1 } // never 0

// noteLonely counts a batch of one caller, and returns the run's length.
func (q *combineQueue) noteLonely() int32 {
	n := q.lonely.Add(1)
	if n == 1 {
		q.lonelySince.Store(monoNow())
	}
	return n
}

// resetLonely ends the run of lonely batches: someone waited. (The start
// is cleared first, so that a reader that sees a new run's count never
// reads an older run's start; it reads none, and the key stays hot.)
func (q *combineQueue) resetLonely() {
	q.lonelySince.Store(0)
	q.lonely.Store(0)
}

// lonelyLong reports whether the run of lonely batches has lasted
// coolSpan.
func (q *combineQueue) lonelyLong() bool {
	since := q.lonelySince.Load()
	return since != 0 && monoNow()-since >= int64(coolSpan)
}
