package occ

import (
	"sync"
	"sync/atomic"
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
//     value passes through it unchanged); its caller gets the error once
//     the batch's write applies (which validates the state it saw), and
//     the batch's error if the write fails; if the write conflicts, the
//     mutate runs again with the batch. (A batch that changes nothing
//     writes nothing: its refusals stand on the state read, as in
//     Update.) Its error is not retried
//     otherwise, whatever WithRetryable says. Permanent's mark is removed
//     as in Update.
//   - The batch retries under the leader's options (attempt limit, backoff,
//     budget, observer, cache): the other callers' options other than
//     WithCombiner are not used while they wait. A batch that gives up or
//     fails returns the same error to every caller still in it.
//   - A caller alone at a hot key (nobody else in its process updates
//     it when it starts; callers that come meanwhile queue behind it) runs
//     as a plain Update whose default waits stop growing at two attempt
//     times: it meets the key's writers elsewhere only through the store,
//     and longer waits would leave it behind callers that came after it.
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
// over at least coolSpan (20 ms), and its calls run as plain Updates
// again. So concurrent calls of a key
// that has not conflicted yet (or not lately) both write, and one of them
// conflicts once before the others queue behind it; WithQueueFromStart
// makes every call queue from the key's first update on instead.
//
// A call of a cold key is a plain Update plus an atomic load and a counter
// of its goroutine's own: it writes nothing that the calls of other keys
// share, so combining costs nothing measurable where there is nothing to
// combine (docs/performance.md, "Measurements behind occ's defaults"). A
// hot key's call takes its shard's mutex; a batch forms only
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
	// txns holds the queue of Txn calls of each store (txnQueue), and
	// txnCalls and txnBatches count them and their batches.
	txns                 sync.Map
	txnCalls, txnBatches atomic.Int64
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
// the same store through c (see Combiner), and Txn concurrent calls on the
// same store: while a batch of a store's transactions is in flight, the
// next ones queue, and the first of them runs their functions in queue
// order in one Txn with one commit (see Txn). Retry ignores it.
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
	// Txns is the number of Txn calls that went through the combiner (a
	// call that waited for a later batch counts again), and TxnBatches
	// the number of their batches (one Txn each).
	Txns, TxnBatches int64
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
	st.Txns, st.TxnBatches = c.txnCalls.Load(), c.txnBatches.Load()
	for i := range c.cold {
		cc := &c.cold[i]
		st.Updates += cc.updates.Load()
		st.Batches += cc.batches.Load()
		st.Writes += cc.writes.Load()
	}
	return st
}
