package occ

import (
	"sync"
	"sync/atomic"
)

// DefaultMaxBatch is the most Update calls a Combiner carries in one
// write when WithMaxBatch is not given.
const DefaultMaxBatch = 128

// Combiner combines concurrent Update calls on the same hot key of the
// same store within one process (group commit): the callers queue behind
// one of them, the leader, which reads the key once, runs every waiting
// caller's mutate in queue order on the running value, and writes the
// result with one compare-and-swap. Each caller gets the value after its
// own mutate and the version of the batch's write. With WithCombiner, Txn
// calls on one store combine the same way (see Txn).
//
// Pass one Combiner to every call with WithCombiner (one per process is
// enough); it is safe for concurrent use and starts no goroutine. Only
// the calls of a key that has met a conflict queue (WithQueueFromStart:
// every key's); a call of a cold key runs as a plain Update. mutate runs
// on the leader's goroutine and may run several times, as in Update: its
// error reaches its caller once the batch's write applies, and its panic
// is raised again on its caller's goroutine. The batch retries under the
// leader's options. A caller whose context ends while its mutate is in a
// write in flight gets an error matching ctx.Err() and cas.ErrAmbiguous.
// See docs/overview.md#combining-updates-of-a-hot-key.
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
// instead of from its first conflict (see Combiner). That costs each call
// a write to memory the other CPUs share: a cost an in-process store with
// many keys shows and a server's round trip hides (docs/performance.md,
// "Measurements behind occ's defaults").
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
