package occ

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/occkit/occkit/cas"
)

// DefaultMaxBatch is the most Update calls a Combiner carries in one
// write when WithMaxBatch is not given.
const DefaultMaxBatch = 128

// Combiner combines concurrent Update calls on the same key of the same
// store within one process (group commit): instead of each caller reading,
// writing and conflicting with the others, the callers queue behind one of
// them, the leader, which reads the key once, applies every waiting
// caller's mutate in queue order to the running value, and writes the
// result with a single compare-and-swap. On a hot key this turns N
// conflicting round trips into one write per batch, while callers in other
// processes still coordinate only through the store's versions.
//
// Pass one Combiner to Update with WithCombiner; it is shared by all the
// goroutines of a process (one per process is enough: batches are per
// store and key) and is safe for concurrent use. It starts no goroutine:
// the leader is one of the callers.
//
// # Semantics
//
//   - Linearization: the callers of one batch take effect at the batch's
//     write, in queue order (FIFO by arrival). Each caller's mutate sees
//     the value left by the callers ahead of it in the batch, and the
//     caller gets the value after its own mutate and the version of the
//     write that carried it (callers of one batch share that version).
//   - mutate may run several times, as in Update: when the batch's write
//     conflicts, the whole batch runs again from the conflict's state. It
//     runs on the leader's goroutine; a panic in it is carried back and
//     re-raised on its own caller's goroutine, and the others' updates go
//     on.
//   - A mutate that returns an error is left out of the batch (the running
//     value passes through it unchanged) and its caller gets the error at
//     once; it is not retried, whatever WithRetryable says. Permanent's
//     mark is removed as in Update.
//   - The batch retries under the leader's options (attempt limit, backoff,
//     budget, observer, cache): the other callers' options other than
//     WithCombiner are not used while they wait. A batch that gives up or
//     fails returns the same error to every caller still in it.
//   - Contexts: a caller whose context ends while it waits leaves the queue
//     and its mutate is not applied (its error matches ctx.Err()). If its
//     context ends while its mutate is inside a write in flight, it returns
//     at once with an error matching both ctx.Err() and cas.ErrAmbiguous:
//     that write may or may not have applied it. The batch's reads and
//     writes run until the last caller still in it is gone, so one
//     caller's cancelled context does not fail the others.
//   - A batch carries at most WithMaxBatch callers (DefaultMaxBatch);
//     later arrivals wait for the next batch, led by the first of them.
//
// # Hot keys
//
// Only the calls of a hot key queue. A key heats when one of its calls
// meets a conflict (with a caller of this process or a writer elsewhere):
// that call goes on through the combiner, from the state the conflict
// carried and with the attempts it made counted, and from then on the
// key's calls queue behind a write in progress. It cools after coolAfter
// (8) batches in a row that carried one caller each with nobody waiting,
// and its calls run as plain Updates again. So concurrent calls of a key
// that has not conflicted yet (or not lately) both write, and one of them
// conflicts once before the others queue behind it; WithQueueFromStart
// makes every call queue from the key's first update on instead.
//
// A call of a cold key is a plain Update plus an atomic load and a counter
// of its goroutine's own: it writes nothing that the calls of other keys
// share, so combining costs nothing measurable where there is nothing to
// combine (at 1000 keys of an in-process store, 0.96–1.06× plain
// Update's throughput in the lab, against 0.87× when every call announced
// itself). A hot key's call takes its shard's mutex; a batch forms only
// while a write of the same key is already in progress. Stores whose
// dynamic type is not comparable are not combined (the call runs as a
// plain Update).
type Combiner struct {
	maxBatch int
	always   bool // WithQueueFromStart: every call announces itself
	shards   [combineShards]combineShard
	// hot counts the hot keys of each of hotBuckets buckets of key
	// hashes. A call whose bucket holds none runs as a plain Update and
	// writes nothing the combiner shares; the counts change only when a
	// key heats or cools, so the array stays in every CPU's cache.
	hot [hotBuckets]atomic.Int32
	// The counters of cold calls, striped by the caller's stack (see
	// coldStripe): a goroutine keeps to one stripe and mostly to one CPU,
	// so that counting writes no memory another CPU just wrote.
	cold [coldStripes]coldCounters
}

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

// CombinerOption configures a Combiner.
type CombinerOption func(*Combiner)

// WithMaxBatch caps the callers one write carries (n < 1 means 1, which
// turns combining into a FIFO queue per hot key: no conflicts within the
// process once the key is hot, one write per update).
func WithMaxBatch(n int) CombinerOption {
	return func(c *Combiner) { c.maxBatch = max(n, 1) }
}

// WithQueueFromStart makes every call announce itself on its key, so that
// calls queue behind a write in progress from the key's first update on,
// instead of from its first conflict (see Combiner: hot keys). That costs
// each call a write to memory the other CPUs share: on an in-process store
// at 1000 keys, 7–13% of an update; on a server, nothing measurable.
func WithQueueFromStart() CombinerOption {
	return func(c *Combiner) { c.always = true }
}

// NewCombiner returns a Combiner.
func NewCombiner(opts ...CombinerOption) *Combiner {
	c := &Combiner{maxBatch: DefaultMaxBatch}
	for _, o := range opts {
		o(c)
	}
	for i := range c.shards {
		c.shards[i].queues = map[combineKey]*combineQueue{}
	}
	return c
}

// WithCombiner makes Update combine concurrent calls on the same key of
// the same store through c; see Combiner. Retry and Txn ignore it.
func WithCombiner(c *Combiner) Option { return Option{kind: optCombiner, combiner: c} }

// CombinerStats are a Combiner's counters.
type CombinerStats struct {
	// Updates is the number of Update calls that went through the
	// combiner.
	Updates int64
	// Batches is the number of batches led (a batch is one leader's turn,
	// however many attempts it took; a call of a cold key that did not
	// heat it is a batch of its own).
	Batches int64
	// Writes is the number of compare-and-swap calls the batches sent.
	Writes int64
}

// Stats returns the combiner's counters.
func (c *Combiner) Stats() CombinerStats {
	var st CombinerStats
	for i := range c.shards {
		sh := &c.shards[i]
		st.Updates += sh.updates.Load()
		st.Batches += sh.batches.Load()
		st.Writes += sh.writes.Load()
	}
	for i := range c.cold {
		cc := &c.cold[i]
		st.Updates += cc.updates.Load()
		st.Batches += cc.batches.Load()
		st.Writes += cc.writes.Load()
	}
	return st
}

const combineShards = 256

type combineShard struct {
	mu     sync.Mutex
	queues map[combineKey]*combineQueue
	// The combiner's counters, per shard so that callers of different
	// keys do not write one cache line.
	updates, batches, writes atomic.Int64
	swept                    int64    // when sweepIdle last ran (UnixNano; under mu)
	_                        [16]byte // 64 bytes a shard
}

type combineKey struct {
	store cas.Store
	key   string
}

// combineQueue is the state of one key: the callers waiting for a batch,
// and whether a leader is running one. Guarded by its shard's mutex.
type combineQueue struct {
	// state is queueIdle, queueSolo or queueLed. It changes under the
	// shard's mutex, except that a caller that ran alone (queueSolo)
	// leaves without taking the mutex when nobody queued behind it.
	state    atomic.Int32
	pending  []*combineWaiter
	inFlight bool // the batch's mutates have run and its write is not answered yet
	// hot is set from a conflict of one of the key's calls until
	// coolAfter batches in a row carry one caller each (lonely counts
	// them); only the calls of a hot key queue.
	hot    bool
	lonely atomic.Int32
	// lastUse is when a batch of the key last ended (UnixNano): a hot key
	// that nobody updates any more cools after idleCool (sweepIdle).
	lastUse atomic.Int64
}

// States of a combineQueue.
const (
	queueIdle = iota // nobody updates the key in this process
	queueSolo        // one caller runs alone; nobody waits behind it
	queueLed         // a leader runs; callers may wait (leaving takes the mutex)
)

type waiterState uint8

const (
	stateWaiting   waiterState = iota // in pending
	stateInBatch                      // taken into the running batch
	statePromoted                     // first in pending, asked to lead the next batch
	stateFinished                     // result delivered
	stateAbandoned                    // its context ended while in the batch; the caller has returned
)

// combineWaiter is one Update call through the combiner.
type combineWaiter struct {
	ctx   context.Context
	wake  chan struct{} // buffered: signalled once per state change that concerns the waiter
	state waiterState   // guarded by the shard's mutex

	// apply runs the caller's mutate on the running state (leader only).
	apply func(st *runState)
	// Set by apply in the current attempt (leader only; read by the
	// caller after stateFinished).
	applied  bool
	mutErr   error
	panicked bool
	panicVal any

	// Delivered result.
	err     error
	version cas.Version
}

// runState is a batch's running value: what the store holds (or held,
// at the read) with the mutates applied so far.
type runState struct {
	key     string
	exists  bool
	raw     []byte
	changed bool
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

// keyHash returns the key's FNV-1a hash.
func keyHash(key string) uint32 {
	h := uint32(2166136261)
	for i := 0; i < len(key); i++ {
		h ^= uint32(key[i])
		h *= 16777619
	}
	return h
}

func (c *Combiner) shard(h uint32) *combineShard {
	return &c.shards[h%combineShards]
}

// combinable reports whether s can be a map key.
func combinable(s cas.Store) bool {
	if s == nil {
		return false
	}
	return reflect.TypeOf(s).Comparable()
}

// errEscalate ends the loop of a call on a cold key at its first conflict
// (config.escalate); it never reaches a caller.
var errEscalate = errors.New("occ: internal: a cold key conflicted")

// errAbandoned is what a waiter whose context ended while its mutate was
// in a write in flight returns with ctx.Err().
var errAbandoned = fmt.Errorf("occ: combined update abandoned while its write was in flight: %w", cas.ErrAmbiguous)

// combineUpdate is Update through a Combiner.
func combineUpdate[T any](ctx context.Context, c *config, cb *Combiner, s *cas.Typed[T], key string, mutate func(cur T, exists bool) (T, error)) (T, cas.Version, error) {
	k := combineKey{store: s.Store(), key: key}
	h := keyHash(key)
	sh := cb.shard(h)
	if !cb.always && cb.hot[h%hotBuckets].Load() == 0 {
		return combineCold(ctx, c, cb, sh, h, k, s, key, mutate)
	}
	sh.mu.Lock()
	q := sh.queues[k]
	if !cb.always && (q == nil || !q.hot) {
		cb.sweepIdle(sh)
		sh.mu.Unlock()
		return combineCold(ctx, c, cb, sh, h, k, s, key, mutate)
	}
	if q == nil {
		q = cb.newQueue(sh, k)
	}
	sh.updates.Add(1)
	return combineHot(ctx, c, cb, sh, h, k, q, s, key, mutate)
}

// newQueue makes key's queue (the shard's mutex is held), dropping those
// of idle keys first when the shard holds maxIdleQueues.
func (cb *Combiner) newQueue(sh *combineShard, k combineKey) *combineQueue {
	if len(sh.queues) >= maxIdleQueues {
		// Keys come and go: drop the queues of idle ones.
		for key, iq := range sh.queues {
			if iq.state.Load() == queueIdle && len(iq.pending) == 0 {
				if iq.hot {
					cb.cool(keyHash(key.key), iq)
				}
				delete(sh.queues, key)
			}
		}
	}
	q := &combineQueue{}
	sh.queues[k] = q
	return q
}

// combineCold runs an update of a cold key: a plain Update, until its
// first conflict heats the key; the call then queues as on a hot key.
func combineCold[T any](ctx context.Context, c *config, cb *Combiner, sh *combineShard, h uint32, k combineKey, s *cas.Typed[T], key string, mutate func(cur T, exists bool) (T, error)) (T, cas.Version, error) {
	cc := cb.coldStripe()
	cc.updates.Add(1)
	c.escalate = true
	c.writes = &cc.writes
	v, ver, err := updateDirect(ctx, c, s, key, mutate)
	if err != errEscalate {
		cc.batches.Add(1)
		return v, ver, err
	}
	c.escalate = false
	sh.mu.Lock()
	q := sh.queues[k]
	if q == nil {
		q = cb.newQueue(sh, k)
	}
	cb.heat(h, q)
	q.lonely.Store(0)
	q.lastUse.Store(time.Now().UnixNano())
	return combineHot(ctx, c, cb, sh, h, k, q, s, key, mutate)
}

// combineHot runs an update of a hot key (the shard is locked on entry):
// alone when nobody updates the key in the process, else queued.
func combineHot[T any](ctx context.Context, c *config, cb *Combiner, sh *combineShard, h uint32, k combineKey, q *combineQueue, s *cas.Typed[T], key string, mutate func(cur T, exists bool) (T, error)) (T, cas.Version, error) {
	for q.state.Load() == queueSolo && !q.state.CompareAndSwap(queueSolo, queueLed) {
		// The caller running alone left meanwhile (it may, without the
		// mutex): look again.
	}
	if q.state.Load() == queueIdle {
		// Nobody updates the key in this process: run alone, as a plain
		// Update, while callers that arrive meanwhile queue behind; the
		// first of them then leads them as one batch. (Idle changes only
		// under the mutex.)
		q.state.Store(queueSolo)
		sh.mu.Unlock()
		sh.batches.Add(1)
		defer cb.leaveSolo(sh, h, q) // also if mutate panics
		c.writes = &sh.writes
		return updateDirect(ctx, c, s, key, mutate)
	}
	// Led: whoever runs leaves through the mutex and hands the lead on.
	// (What a conflict of the call's own told it is stale by its turn,
	// and a batch it leads has its own immediate retry.)
	c.handed, c.retriedNow = nil, false
	return combineQueued(ctx, c, cb, sh, h, q, s, key, mutate)
}

// combineQueued queues the call behind the key's running leader (the shard
// is locked on entry) and waits for its result or its turn to lead.
func combineQueued[T any](ctx context.Context, c *config, cb *Combiner, sh *combineShard, h uint32, q *combineQueue, s *cas.Typed[T], key string, mutate func(cur T, exists bool) (T, error)) (T, cas.Version, error) {
	v, ver, err := combineWait(ctx, c, cb, sh, h, q, s, key, mutate)
	if c.resumeAt > 0 {
		// A call that escalated and was carried in another's batch: its
		// own loop ended at its conflict, so it ends the call here.
		err = c.endEscalated(ctx, err)
	}
	return v, ver, err
}

// endEscalated ends a call whose first attempts ran on a cold key and
// which was then carried in another caller's batch: its own give-up
// error counts those attempts and its observer is told of the call.
func (c *config) endEscalated(ctx context.Context, err error) error {
	n := c.resumeAt
	c.resumeAt = 0
	outcome := OutcomeSuccess
	var ge *GiveUpError
	switch {
	case errors.As(err, &ge):
		outcome = OutcomeGaveUp
		if ge.Attempts == 0 {
			// The caller's own (a batch's give-up is shared and has
			// the leader's count).
			ge.Attempts = n
			if ge.Last == nil {
				ge.Last = c.lastErr
			}
		}
	case err != nil:
		outcome = OutcomeFailed
	}
	return c.finish(ctx, c.resumeStart, n, outcome, err)
}

// combineWait is combineQueued's queue and wait.
func combineWait[T any](ctx context.Context, c *config, cb *Combiner, sh *combineShard, h uint32, q *combineQueue, s *cas.Typed[T], key string, mutate func(cur T, exists bool) (T, error)) (T, cas.Version, error) {
	var (
		zero T
		out  T
	)
	w := &combineWaiter{ctx: ctx, wake: make(chan struct{}, 1)}
	w.apply = func(st *runState) {
		var cur T
		if st.exists {
			if err := s.Decode(key, st.raw, &cur); err != nil {
				w.mutErr = err
				return
			}
		}
		next, err := callMutate(w, mutate, cur, st.exists)
		if w.panicked {
			return
		}
		if err != nil {
			w.mutErr, _ = unmarkPermanent(err)
			return
		}
		b, err := s.Encode(key, next)
		if err != nil {
			w.mutErr = err
			return
		}
		st.raw, st.exists, st.changed = b, true, true
		out, w.applied = next, true
	}
	result := func() (T, cas.Version, error) {
		if w.panicked {
			panic(w.panicVal)
		}
		if w.err != nil {
			return zero, 0, w.err
		}
		return out, w.version, nil
	}

	q.pending = append(q.pending, w)
	sh.mu.Unlock()
	lead := false

	for !lead {
		select {
		case <-w.wake:
		case <-ctx.Done():
		}
		sh.mu.Lock()
		switch w.state {
		case stateFinished:
			sh.mu.Unlock()
			return result()
		case statePromoted:
			lead = true
		case stateWaiting:
			if err := ctx.Err(); err != nil {
				q.pending = removeWaiter(q.pending, w)
				sh.mu.Unlock()
				return zero, 0, &GiveUpError{Reason: err}
			}
		case stateInBatch:
			if err := ctx.Err(); err != nil {
				w.state = stateAbandoned
				inFlight := q.inFlight
				sh.mu.Unlock()
				if inFlight {
					return zero, 0, &GiveUpError{Reason: err, Last: errAbandoned}
				}
				// The leader drops it before its next attempt: not applied.
				return zero, 0, &GiveUpError{Reason: err}
			}
		}
		sh.mu.Unlock()
	}

	// Leading: w is first in pending. A leader whose context has already
	// ended leaves and passes the lead on.
	if err := ctx.Err(); err != nil {
		sh.mu.Lock()
		q.pending = removeWaiter(q.pending, w)
		cb.handOff(sh, h, q)
		sh.mu.Unlock()
		return zero, 0, &GiveUpError{Reason: err}
	}
	sh.batches.Add(1)
	cb.runBatch(ctx, c, sh, q, s.Store(), key)
	sh.mu.Lock()
	cb.handOff(sh, h, q)
	sh.mu.Unlock()
	return result()
}

// callMutate runs mutate, catching a panic for its caller.
func callMutate[T any](w *combineWaiter, mutate func(T, bool) (T, error), cur T, exists bool) (next T, err error) {
	defer func() {
		if r := recover(); r != nil {
			w.panicked, w.panicVal = true, r
		}
	}()
	return mutate(cur, exists)
}

// startFlight marks the batch's write in flight and returns its members.
func (cb *Combiner) startFlight(sh *combineShard, q *combineQueue, batch []*combineWaiter) []*combineWaiter {
	sh.mu.Lock()
	q.inFlight = true
	members := append([]*combineWaiter(nil), batch...)
	sh.mu.Unlock()
	return members
}

// applyBatch runs the mutate of every member whose context is live, in
// order, on st.
func applyBatch(members []*combineWaiter, st *runState) {
	for _, w := range members {
		w.applied, w.mutErr = false, nil
		if w.ctx.Err() != nil {
			continue
		}
		w.apply(st)
	}
}

// endFlight ends the batch's write: the members whose mutate failed get
// their error, and on success those whose mutate was applied get version
// nv.
func (cb *Combiner) endFlight(sh *combineShard, q *combineQueue, members []*combineWaiter, nv cas.Version, err error) {
	sh.mu.Lock()
	q.inFlight = false
	for _, w := range members {
		switch {
		case w.state != stateInBatch:
		case w.panicked:
			finish(w, 0, nil)
		case w.mutErr != nil:
			finish(w, 0, w.mutErr)
		case err == nil && w.applied:
			finish(w, nv, nil)
		}
	}
	sh.mu.Unlock()
}

// removeWaiter removes w from ws, keeping the order.
func removeWaiter(ws []*combineWaiter, w *combineWaiter) []*combineWaiter {
	for i, x := range ws {
		if x == w {
			copy(ws[i:], ws[i+1:])
			ws[len(ws)-1] = nil
			return ws[:len(ws)-1]
		}
	}
	return ws
}

// leaveSolo ends a caller's run alone on q: without the mutex when nobody
// queued behind it, else by handing the lead on.
func (cb *Combiner) leaveSolo(sh *combineShard, h uint32, q *combineQueue) {
	q.lastUse.Store(time.Now().UnixNano())
	if q.state.CompareAndSwap(queueSolo, queueIdle) {
		if q.lonely.Add(1) >= coolAfter {
			sh.mu.Lock()
			cb.coolLocked(h, q)
			sh.mu.Unlock()
		}
		return
	}
	sh.mu.Lock()
	q.lonely.Store(0)
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
	q.lonely.Store(0) // someone waited: the key is contended
	next := q.pending[0]
	next.state = statePromoted
	signal(next)
}

// sweepIdle cools the shard's hot keys that no batch has used for
// idleCool (the shard's mutex is held), at most once per idleCool: a key
// that heated once and is not updated again would otherwise keep its
// bucket hot, and the cold keys of the bucket on the shard's mutex.
func (cb *Combiner) sweepIdle(sh *combineShard) {
	now := time.Now().UnixNano()
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
// one caller each and nobody waits (the shard's mutex is held): its calls
// then run as plain Updates until a conflict heats it again.
func (cb *Combiner) coolLocked(h uint32, q *combineQueue) {
	if q.hot && q.lonely.Load() >= coolAfter && q.state.Load() == queueIdle && len(q.pending) == 0 {
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

func signal(w *combineWaiter) {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// finish delivers err (nil: success at version v) to w. The shard's mutex
// is held.
func finish(w *combineWaiter, v cas.Version, err error) {
	if w.state == stateAbandoned {
		return
	}
	w.version, w.err, w.state = v, err, stateFinished
	signal(w)
}

// runBatch is one leader's turn: it takes the waiting callers (the leader
// first) into a batch and runs the read, the mutates and the write under
// the leader's retry loop, topping the batch up from later arrivals before
// each attempt, until the batch is written or gives up. Every caller taken
// into the batch gets its result.
func (cb *Combiner) runBatch(ctx context.Context, c *config, sh *combineShard, q *combineQueue, store cas.Store, key string) {
	var batch []*combineWaiter
	shared := false // the batch carried more than one caller at once
	defer func() {
		q.lastUse.Store(time.Now().UnixNano())
		if shared {
			q.lonely.Store(0)
		} else {
			q.lonely.Add(1)
		}
	}()

	// The batch's I/O runs on a context that ends when the last caller
	// in it is gone, so that one caller's cancelled context fails nobody
	// else.
	bctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	var live atomic.Int64
	var stops []func() bool
	defer func() {
		for _, stop := range stops {
			stop()
		}
	}()
	join := func(w *combineWaiter) {
		live.Add(1)
		stops = append(stops, context.AfterFunc(w.ctx, func() {
			if live.Add(-1) == 0 {
				cancel()
			}
		}))
	}

	cache := c.cache
	if !cache.serves(store) {
		cache = nil
	}
	var (
		hint     cas.Item
		haveHint bool
	)
	if cache != nil {
		hint, haveHint = cache.get(key)
	}
	// lost counts the batch's writes lost in a row; at exclusiveAt its
	// next attempt holds the key (cas.Exclusive), as Update's does.
	ex, _ := store.(cas.Exclusive)
	exclusiveAt, lost := 0, 0
	if ex != nil {
		exclusiveAt = c.exclusiveAt()
	}

	err := c.run(bctx, func(ctx context.Context) error {
		// Drop the callers that left, finish those whose mutate failed,
		// then top the batch up in queue order.
		sh.mu.Lock()
		kept := batch[:0]
		for _, w := range batch {
			if w.state == stateInBatch {
				kept = append(kept, w)
			}
		}
		batch = kept
		for len(batch) < cb.maxBatch && len(q.pending) > 0 {
			w := q.pending[0]
			q.pending[0] = nil
			q.pending = q.pending[1:]
			w.state = stateInBatch
			batch = append(batch, w)
			join(w)
		}
		shared = shared || len(batch) > 1
		empty := len(batch) == 0
		sh.mu.Unlock()
		if empty {
			return nil
		}

		if c.waited {
			haveHint = false
		}
		var (
			nv  cas.Version
			err error
		)
		if exclusiveAt > 0 && lost >= exclusiveAt {
			// The batch has lost too often: this attempt holds the key
			// (cas.Exclusive) from its read to its write.
			haveHint, c.exclusive = false, true
			members := cb.startFlight(sh, q, batch)
			var st runState
			nv, err = ex.UpdateExclusive(ctx, key, func(it cas.Item) ([]byte, bool, error) {
				st = runState{key: key, exists: it.Version != 0, raw: it.Value}
				applyBatch(members, &st)
				if st.changed {
					sh.writes.Add(1)
				}
				return st.raw, st.changed, nil
			})
			if cache != nil {
				if err == nil && st.changed {
					cache.put(cas.Item{Key: key, Value: st.raw, Version: nv})
				} else {
					cache.forget(key)
				}
			}
			cb.endFlight(sh, q, members, nv, err)
			return err
		}
		var it cas.Item
		switch {
		case haveHint:
			it, haveHint = hint, false
		default:
			it, err = store.Get(ctx, key)
			switch {
			case errors.Is(err, cas.ErrNotFound):
				it, err = cas.Item{Key: key}, nil
			case err != nil:
				return err
			}
			if cache != nil {
				cache.put(it)
			}
		}

		members := cb.startFlight(sh, q, batch)
		st := runState{key: key, exists: it.Version != 0, raw: it.Value}
		applyBatch(members, &st)

		if st.changed {
			sh.writes.Add(1)
			nv, err = store.CompareAndSwap(ctx, key, it.Version, st.raw)
			if cache != nil {
				switch {
				case err == nil:
					cache.put(cas.Item{Key: key, Value: st.raw, Version: nv})
				default:
					var ce *cas.ConflictError
					if errors.As(err, &ce) && ce.HasCurrent && ce.Key == key {
						cache.put(ce.Current)
					} else {
						cache.forget(key)
					}
				}
			}
		}

		cb.endFlight(sh, q, members, nv, err)
		if err != nil {
			if errors.Is(err, cas.ErrConflict) {
				lost++
			}
			var ce *cas.ConflictError
			if errors.As(err, &ce) && ce.HasCurrent && ce.Key == key {
				hint, haveHint, c.retryNow = ce.Current, true, true
			}
		}
		return err
	})

	// Whoever is still in the batch gets the batch's error (or, when the
	// batch ended with nobody to write for, the end of its own context).
	sh.mu.Lock()
	for _, w := range batch {
		if w.state != stateInBatch {
			continue
		}
		var werr error
		switch {
		case w.ctx.Err() != nil:
			var last error
			var ge *GiveUpError
			if errors.As(err, &ge) {
				last = ge.Last
			} else {
				last = err
			}
			werr = &GiveUpError{Reason: w.ctx.Err(), Last: last}
		case err != nil:
			werr = err
		default:
			// Nothing was written for it and its context is live: only a
			// caller whose mutate was skipped can be here; it cannot be,
			// since skipped callers have ended contexts.
			werr = errors.New("occ: combined update ended without a result")
		}
		finish(w, 0, werr)
	}
	sh.mu.Unlock()
}
