package occ

import (
	"context"
	"errors"
	"hash/maphash"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/occkit/occkit/cas"
)

// deltaLines are the queues of concurrent deltas, per store and key.
var deltaLines sync.Map // deltaLineKey -> *deltaLine

type deltaLineKey struct {
	s   cas.Adder
	key string
}

// deltaLine is one key's queue: while a batch is on its way (leading),
// the deltas that arrive wait; the first of them leads the next batch.
type deltaLine struct {
	mu      sync.Mutex
	leading bool
	waiting []*deltaCall
}

// deltaCall is one caller's delta and, once done, its outcome.
type deltaCall struct {
	ctx  context.Context
	n    int64
	b    cas.Bounds
	wake chan []*deltaCall // the batch to lead, or nil: done
	v    int64
	ver  cas.Version
	err  error
}

// deltaSlots is how many slots deltasInFlight spreads keys over: two
// keys that share one only make a delta take the line when it need not.
const deltaSlots = 256

// deltasInFlight counts the deltas in flight per slot of keys (any
// store's): a delta that finds none of its slot's in flight goes alone,
// without a line (see addBatched).
var deltasInFlight [deltaSlots]struct {
	n atomic.Int32
	_ [60]byte // one cache line per slot
}

// addBatched runs a delta through its key's line, or alone when no other
// delta of its slot is in flight: a key that nobody else is adding to
// has nobody to batch with, and a line costs it a map entry made and
// removed (most keys of a large key set, where that cost showed).
// Deltas of a key that find another in flight queue in its line; one
// that went alone may be in flight beside the line's batch, as two
// batches of a key may (each is correct on its own).
func addBatched(ctx context.Context, c *config, a cas.Adder, key string, n int64, b cas.Bounds) (int64, cas.Version, error) {
	slot := &deltasInFlight[maphash.String(lineSeed, key)%deltaSlots].n
	defer slot.Add(-1)
	if slot.Add(1) == 1 {
		return addOnce(ctx, c, a, key, n, b)
	}
	lk := deltaLineKey{a, key}
	li, ok := deltaLines.Load(lk)
	if !ok {
		li, _ = deltaLines.LoadOrStore(lk, &deltaLine{})
	}
	line := li.(*deltaLine)
	me := &deltaCall{ctx: ctx, n: n, b: b}
	line.mu.Lock()
	if !line.leading {
		line.leading = true
		line.mu.Unlock()
		line.lead(c, a, key, []*deltaCall{me})
		return me.v, me.ver, me.err
	}
	me.wake = make(chan []*deltaCall, 1)
	line.waiting = append(line.waiting, me)
	line.mu.Unlock()
	select {
	case batch := <-me.wake:
		if batch != nil {
			line.lead(c, a, key, line.gather(batch))
		}
	case <-ctx.Done():
		line.mu.Lock()
		for i, w := range line.waiting {
			if w == me {
				line.waiting = append(line.waiting[:i], line.waiting[i+1:]...)
				line.mu.Unlock()
				return 0, 0, ctx.Err()
			}
		}
		line.mu.Unlock()
		// Already taken into a batch (its outcome is this call's), or
		// handed the lead.
		if batch := <-me.wake; batch != nil {
			line.lead(c, a, key, line.gather(batch))
		}
	}
	return me.v, me.ver, me.err
}

// lead sends batch (whose first call is the leader's own), then hands the
// line to the first waiting call, which gathers the next batch itself
// (gather), or closes it.
func (line *deltaLine) lead(c *config, a cas.Adder, key string, batch []*deltaCall) {
	runBatch(c, a, key, batch)
	for _, m := range batch[1:] {
		m.wake <- nil
	}
	if len(batch) > 1 {
		// Let the callers just woken come back with their next deltas
		// before the line closes for want of anyone waiting: they queue
		// for the next batch instead of leading one alone each.
		runtime.Gosched()
	}
	line.mu.Lock()
	if len(line.waiting) == 0 {
		line.leading = false
		// An idle line leaves the map, so that keys do not pile up. A
		// caller that loaded it just before leads on it alone, beside
		// the line a later caller makes: two batches of one key in
		// flight, each correct on its own.
		deltaLines.CompareAndDelete(deltaLineKey{a, key}, line)
		line.mu.Unlock()
		return
	}
	next := line.waiting[0]
	line.waiting = line.waiting[1:]
	line.mu.Unlock()
	next.wake <- []*deltaCall{next}
}

// gather is the start of a new leader's turn: it lets the goroutines just
// woken from the last batch run first (runtime.Gosched), so that a caller
// that comes straight back with its next delta joins this batch rather
// than the one after it, then takes every waiting call into batch, in
// arrival order. Without it, callers that loop fall into two groups that
// alternate, each batch carrying half of them.
func (line *deltaLine) gather(batch []*deltaCall) []*deltaCall {
	runtime.Gosched()
	line.mu.Lock()
	batch = append(batch, line.waiting...)
	line.waiting = nil
	line.mu.Unlock()
	return batch
}

// runBatch applies the deltas of batch in order, as one write when it
// can, and sets each call's outcome.
func runBatch(c *config, a cas.Adder, key string, batch []*deltaCall) {
	if len(batch) == 1 {
		m := batch[0]
		m.v, m.ver, m.err = addOnce(m.ctx, c, a, key, m.n, m.b)
		return
	}
	// The batch's context ends when every caller's has.
	ctx, cancel := context.WithCancel(context.WithoutCancel(batch[0].ctx))
	defer cancel()
	left := atomic.Int64{}
	left.Store(int64(len(batch)))
	for _, m := range batch {
		stop := context.AfterFunc(m.ctx, func() {
			if left.Add(-1) == 0 {
				cancel()
			}
		})
		defer stop()
	}
	live := batch
	for len(live) > 0 {
		lo, hi, sum, ok := batchRange(live)
		if !ok {
			// No value lets every delta through (or their sum overflows):
			// one at a time, in order.
			for _, m := range live {
				m.v, m.ver, m.err = addOnce(ctx, c, a, key, m.n, m.b)
			}
			return
		}
		v, ver, err := addOnce(ctx, c, a, key, sum, cas.Between(lo+sum, hi+sum))
		if err == nil {
			settle(live, v-sum, ver)
			return
		}
		var be *cas.BoundError
		if !errors.As(err, &be) || !be.HasCurrent {
			for _, m := range live {
				m.err = err
			}
			return
		}
		// The value the server found decides, in order, who crosses a
		// bound; the others are sent conditional on that very value, so
		// that the refusals are the ones they would have met.
		cur := be.Current
		var pass []*deltaCall
		acc := cur
		for _, m := range live {
			if m.b.Allows(acc, m.n) {
				pass = append(pass, m)
				acc += m.n
				continue
			}
			m.err = &cas.BoundError{Key: key, Add: m.n, Bounds: m.b, Current: acc, HasCurrent: true}
		}
		if len(pass) == 0 {
			return
		}
		if len(pass) < len(live) {
			_, _, sum, _ = batchRange(pass)
			_, ver, err := addOnce(ctx, c, a, key, sum, cas.Between(cur+sum, cur+sum))
			if err == nil {
				settle(pass, cur, ver)
				return
			}
			if !errors.Is(err, cas.ErrBound) {
				for _, m := range pass {
					m.err = err
				}
				return
			}
			// The value moved on: decide again, refusals included.
			for _, m := range live {
				m.err = nil
			}
		}
		// Every delta passes at cur, yet the whole batch was refused:
		// the value moved; try again.
	}
}

// batchRange returns the current values with which every delta of batch,
// applied in order, stays within its bounds, and the sum of the deltas;
// ok is false when there is no such value or the sums overflow.
func batchRange(batch []*deltaCall) (lo, hi, sum int64, ok bool) {
	lo, hi = minInt64, maxInt64
	for _, m := range batch {
		next := sum + m.n
		if (m.n > 0 && next < sum) || (m.n < 0 && next > sum) {
			return 0, 0, 0, false
		}
		sum = next
		l, h := m.b.Before(sum)
		lo, hi = max(lo, l), min(hi, h)
	}
	return lo, hi, sum, lo <= hi
}

// settle gives each call of a batch applied on value base its value.
func settle(batch []*deltaCall, base int64, ver cas.Version) {
	acc := base
	for _, m := range batch {
		acc += m.n
		m.v, m.ver, m.err = acc, ver, nil
	}
}

const (
	minInt64 = -1 << 63
	maxInt64 = 1<<63 - 1
)
