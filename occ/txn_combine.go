package occ

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/occkit/occkit/cas"
)

// Txn through a Combiner (WithCombiner): group commit of transactions.
// The Txn calls of one store queue while a batch of them is in flight;
// the next batch's leader (the first caller waiting) runs one Txn whose
// function runs each member's function in queue order on one Tx, so that
// each member sees what the members before it wrote, and commits them all
// at once. The batch is serializable as the members in queue order; its
// read set is the union of theirs. A member whose function returns an
// error has its writes taken back and its reads kept: its error stands if
// the batch commits (what it saw was then the store's state, with the
// members before it applied), and it runs again if the batch does. An
// error the batch's loop would retry (a conflict, WithRetryable's) ends
// the attempt instead. A member whose function panics leaves at once. A
// member whose writes would take the batch's commit over the store's
// limits (cas.Limits: operations, bytes) waits for the next batch. The
// batch retries under its leader's options; a batch that gives up
// returns the same error to every member still in it.

// txnQueue is the Txn calls of one store queued in a Combiner.
type txnQueue struct {
	mu      sync.Mutex
	busy    bool // a batch is in flight
	waiting []*txnCall
}

// txnCall is one Txn call in a txnQueue.
type txnCall struct {
	ctx  context.Context
	fn   func(tx *Tx) error
	opts []Option
	// lead receives the batch this call is to lead (sent under the
	// queue's mutex).
	lead chan []*txnCall
	done chan struct{} // closed when err (or the panic) is set
	err  error
	// panicked and panicVal carry a panic of fn to its caller.
	panicked bool
	panicVal any
	// out is set (on the leader's goroutine) once the call left its
	// batch; later marks a call to run in the next batch instead, failed
	// holds its function's error in the attempt that ran it.
	out, later bool
	failed     error
	// mu is held while the call's function runs, and by the call when it
	// abandons (so that it returns only once its function is not
	// running); abandoned is set, under mu and the queue's mutex, by a
	// call whose context ended while its batch was in flight: its
	// function does not run again, and it never leads.
	mu        sync.Mutex
	abandoned atomic.Bool
}

// errAbandonedTxn is what a member whose context ended while its batch
// was in flight returns with ctx.Err().
var errAbandonedTxn = fmt.Errorf("occ: combined transaction abandoned while its batch was in flight: %w", cas.ErrAmbiguous)

// errBatchEmpty ends a batch none of whose members is left.
var errBatchEmpty = errors.New("occ: internal: no member left in the batch")

// txnQueue returns the queue of s's Txn calls.
func (cb *Combiner) txnQueue(s cas.Store) *txnQueue {
	if q, ok := cb.txns.Load(s); ok {
		return q.(*txnQueue)
	}
	q, _ := cb.txns.LoadOrStore(s, &txnQueue{})
	return q.(*txnQueue)
}

// combineTxn is Txn through cb.
func combineTxn(ctx context.Context, cb *Combiner, s cas.Store, fn func(tx *Tx) error, opts []Option) error {
	if _, ok := s.(cas.Committer); !ok {
		// A batch of members that write one key each would need a
		// commit of several.
		return Txn(ctx, s, fn, append(slices.Clone(opts), WithCombiner(nil))...)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	q := cb.txnQueue(s)
	call := &txnCall{ctx: ctx, fn: fn, opts: opts, lead: make(chan []*txnCall, 1), done: make(chan struct{})}
	q.mu.Lock()
	if !q.busy {
		q.busy = true
		q.mu.Unlock()
		cb.leadTxns(q, s, []*txnCall{call})
		return call.result()
	}
	q.waiting = append(q.waiting, call)
	q.mu.Unlock()
	select {
	case batch := <-call.lead:
		cb.leadTxns(q, s, batch)
		return call.result()
	case <-call.done:
		return call.result()
	case <-ctx.Done():
	}
	q.mu.Lock()
	if i := slices.Index(q.waiting, call); i >= 0 {
		q.waiting = slices.Delete(q.waiting, i, i+1)
		q.mu.Unlock()
		return ctx.Err() // never in a batch: nothing applied
	}
	select {
	case batch := <-call.lead:
		// Chosen to lead the next batch: the others wait for it. Its own
		// function will not run (its context ended).
		q.mu.Unlock()
		cb.leadTxns(q, s, batch)
		return call.result()
	default:
	}
	select {
	case <-call.done:
		q.mu.Unlock()
		return call.result()
	default:
	}
	// In a batch in flight (or to run in the next one): marked under the
	// queue's mutex, so that no hand-off chooses it to lead, and under
	// its own, so that its function is not running when it returns.
	call.abandoned.Store(true)
	q.mu.Unlock()
	call.mu.Lock()
	defer call.mu.Unlock()
	return fmt.Errorf("%w: %w", errAbandonedTxn, ctx.Err())
}

// result returns the call's outcome, re-raising a panic of its function.
func (call *txnCall) result() error {
	<-call.done
	if call.panicked {
		panic(call.panicVal)
	}
	return call.err
}

// finish ends the call with err.
func (call *txnCall) finish(err error) {
	call.out, call.err = true, err
	close(call.done)
}

// leadTxns runs batch, then hands the queue on: to the first of the calls
// waiting, with a batch of them, or to nobody. If the batch's Txn panics
// (an observer, the store) or its goroutine exits, every member still in
// it ends with errLeaderFailed, and the queue is handed on all the same.
func (cb *Combiner) leadTxns(q *txnQueue, s cas.Store, batch []*txnCall) {
	var later []*txnCall
	completed := false
	defer func() {
		if !completed {
			for _, m := range batch {
				if !m.out {
					m.finish(errLeaderFailed)
				}
			}
		}
		cb.handOn(q, later)
	}()
	later = cb.runTxnBatch(s, batch)
	completed = true
}

// errLeaderFailed ends the members of a batch whose leader's Txn panicked
// or exited: the commit may or may not have applied.
var errLeaderFailed = fmt.Errorf("occ: the leader of a combined transaction's batch failed (a panic): %w", cas.ErrAmbiguous)

// handOn puts later (calls to run in the next batch) first in the queue
// and hands it on: to the first call waiting that has not abandoned, with
// a batch, or to nobody.
func (cb *Combiner) handOn(q *txnQueue, later []*txnCall) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, m := range later {
		if m.abandoned.Load() {
			m.finish(errAbandonedTxn) // it returned already
		} else {
			q.waiting = append(q.waiting, nil)
			copy(q.waiting[1:], q.waiting)
			q.waiting[0] = m
		}
	}
	if len(q.waiting) == 0 {
		q.busy = false
		return
	}
	n := min(len(q.waiting), cb.maxBatch)
	next := slices.Clone(q.waiting[:n])
	q.waiting = slices.Delete(q.waiting, 0, n)
	next[0].lead <- next
}

// runTxnBatch runs one batch as one Txn under its leader's (batch[0]'s)
// options and ends every member but those it returns, which are to run in
// the next batch.
func (cb *Combiner) runTxnBatch(s cas.Store, batch []*txnCall) (later []*txnCall) {
	var limits cas.Limits
	if l, ok := s.(interface{ Limits() cas.Limits }); ok {
		limits = l.Limits()
	}
	lead := batch[0]
	var lc config
	lc.apply(lead.opts)
	combined := func(tx *Tx) error {
		live := 0
		for _, m := range batch {
			m.later, m.failed = false, nil
			if m.out {
				continue
			}
			// What the member wrote (and, if it leaves, read) is taken
			// back when it does not stay in the attempt.
			reads, writes, cached := maps.Clone(tx.reads), maps.Clone(tx.writes), maps.Clone(tx.cached)
			ran, err := callTxnFn(m, tx)
			switch {
			case !ran:
				err := m.ctx.Err()
				if err == nil {
					err = errAbandonedTxn
				}
				m.finish(err)
				continue
			case m.panicked:
				tx.reads, tx.writes, tx.cached = reads, writes, cached
				m.finish(nil)
				continue
			case err != nil && lc.classify(err) != OutcomeFailed:
				return err // the attempt ends; the loop decides
			case err != nil:
				tx.writes = writes // its reads stay: they decided its error
				m.failed = err
				continue
			case live > 0 && !tx.fits(limits):
				tx.reads, tx.writes, tx.cached = reads, writes, cached
				m.later = true
				continue
			}
			live++
		}
		if live == 0 {
			return Permanent(errBatchEmpty)
		}
		return nil
	}
	cb.txnCalls.Add(int64(len(batch)))
	cb.txnBatches.Add(1)
	opts := append(slices.Clone(lead.opts), WithCombiner(nil))
	// The batch runs until it commits or gives up, whichever member's
	// context ends: a member that leaves returns at once (combineTxn).
	err := Txn(context.WithoutCancel(lead.ctx), s, combined, opts...)
	committed := err == nil || errors.Is(err, errBatchEmpty)
	for _, m := range batch {
		switch {
		case m.out:
		case m.later:
			later = append(later, m)
		case m.failed != nil && committed:
			// Its error stands: the commit validated what it read.
			err, _ := unmarkPermanent(m.failed)
			m.finish(err)
		case committed:
			m.finish(nil)
		default:
			m.finish(err)
		}
	}
	return later
}

// callTxnFn runs m's function on tx, catching a panic for its caller;
// ran is false when m abandoned (its function then does not run).
func callTxnFn(m *txnCall, tx *Tx) (ran bool, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.abandoned.Load() || m.ctx.Err() != nil {
		return false, nil
	}
	ran = true
	defer func() {
		if r := recover(); r != nil {
			m.panicked, m.panicVal = true, r
		}
	}()
	return ran, m.fn(tx)
}

// fits reports whether the commit of what tx read and wrote so far stays
// within limits (its operations and bytes).
func (tx *Tx) fits(l cas.Limits) bool {
	keys := tx.keys()
	maxOps := l.MaxCommitOps
	if maxOps <= 0 {
		maxOps = cas.DefaultMaxCommitOps
	}
	if len(keys) > maxOps {
		return false
	}
	if l.MaxCommitBytes <= 0 {
		return true
	}
	n := 0
	for _, k := range keys {
		n += len(k)
		if w, ok := tx.writes[k]; ok {
			n += len(w.value)
		}
	}
	return n <= l.MaxCommitBytes
}
