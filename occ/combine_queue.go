package occ

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/occkit/occkit/cas"
)

const combineShards = 256

type combineShard struct {
	mu     sync.Mutex
	queues map[combineKey]*combineQueue
	// The combiner's counters, per shard so that callers of different
	// keys do not write one cache line.
	updates, batches, writes atomic.Int64
	swept                    int64    // when sweepIdle last ran (monoNow; under mu)
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
	// them) over coolSpan at least; only the calls of a hot key queue.
	hot    bool
	lonely atomic.Int32
	// lonelySince is when the first lonely batch of the current run
	// ended (monoNow), 0 when no run has begun since the last was broken.
	lonelySince atomic.Int64
	// lastUse is when a batch of the key last ended (monoNow): a hot key
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
	q.resetLonely()
	q.lastUse.Store(monoNow())
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
		c.writes, c.alone = &sh.writes, true
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
	began := monoNow()
	if cb.runBatch(ctx, c, sh, q, s.Store(), key) && monoNow()-began >= int64(gatherMinUnit) {
		// Let the callers the batch carried come back with their next
		// updates and queue before the lead passes on (or the queue goes
		// idle for want of anyone waiting), so that they join the next
		// batch instead of splitting into groups that alternate. (Not on
		// an in-memory store, where the yield costs more than a write:
		// gatherMinUnit.)
		runtime.Gosched()
	}
	sh.mu.Lock()
	cb.handOff(sh, h, q)
	sh.mu.Unlock()
	return result()
}

// startFlight marks the batch's write in flight and returns its members.
func (cb *Combiner) startFlight(sh *combineShard, q *combineQueue, batch []*combineWaiter) []*combineWaiter {
	sh.mu.Lock()
	q.inFlight = true
	members := append([]*combineWaiter(nil), batch...)
	sh.mu.Unlock()
	return members
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
		case w.mutErr != nil && err == nil:
			// Its refusal stands: the write validated the state it saw
			// (the callers ahead of it applied). When the write failed,
			// it stays in the batch: it runs again, or gets the batch's
			// error.
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

// gatherMinUnit is the shortest batch after which its leader yields
// before it hands the lead on (see combineWait): a batch on an in-process
// store takes a few microseconds, which a yield would add to; on an
// embedded database or a server it takes tens or hundreds.
const gatherMinUnit = 10 * time.Microsecond
