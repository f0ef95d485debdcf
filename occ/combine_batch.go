package occ

import (
	"context"
	"errors"
	"sync/atomic"

	"github.com/occkit/occkit/cas"
)

// runState is a batch's running value: what the store holds (or held,
// at the read) with the mutates applied so far.
type runState struct {
	key     string
	exists  bool
	raw     []byte
	changed bool
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

// anyRefused reports whether a member's mutate refused the batch's state.
func anyRefused(members []*combineWaiter) bool {
	for _, w := range members {
		if w.mutErr != nil {
			return true
		}
	}
	return false
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

// runBatch is one leader's turn: it takes the waiting callers (the leader
// first) into a batch and runs the read, the mutates and the write under
// the leader's retry loop, topping the batch up from later arrivals before
// each attempt, until the batch is written or gives up. Every caller taken
// into the batch gets its result. shared reports whether the batch
// carried more than one caller at once.
func (cb *Combiner) runBatch(ctx context.Context, c *config, sh *combineShard, q *combineQueue, store cas.Store, key string) (shared bool) {
	var batch []*combineWaiter
	defer func() {
		q.lastUse.Store(monoNow())
		if shared {
			q.resetLonely()
		} else {
			q.noteLonely()
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
	keptHint := haveHint // hint is a cache entry, which may be older than the calls
	// lost counts the batch's writes lost in a row; at exclusiveAt its
	// next attempt holds the key (cas.Exclusive), as Update's does.
	ex, _ := store.(cas.Exclusive)
	exclusiveAt, lost := 0, 0
	if ex != nil {
		exclusiveAt = c.exclusiveAt(ex)
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
		fromKept := false
		switch {
		case haveHint:
			it, haveHint = hint, false
			fromKept, keptHint = keptHint, false
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
		if fromKept && !st.changed && anyRefused(members) {
			// Every live caller refused the cache's state, and no write
			// will validate it: it may be older than the calls. Read;
			// when the key moved, ask them again.
			fresh, err := store.Get(ctx, key)
			if errors.Is(err, cas.ErrNotFound) {
				fresh, err = cas.Item{Key: key}, nil
			}
			if err != nil {
				cb.endFlight(sh, q, members, 0, err)
				return err
			}
			if cache != nil {
				cache.put(fresh)
			}
			if fresh.Version != it.Version {
				it = fresh
				st = runState{key: key, exists: it.Version != 0, raw: it.Value}
				applyBatch(members, &st)
			}
		}

		if st.changed {
			sh.writes.Add(1)
			nv, err = store.CompareAndSwap(ctx, key, it.Version, st.raw)
			if cache != nil {
				cache.noteWrite(key, st.raw, nv, err)
			}
		}

		cb.endFlight(sh, q, members, nv, err)
		if err != nil {
			if errors.Is(err, cas.ErrConflict) {
				lost++
			}
			if cur, ok := conflictCurrent(err, key); ok {
				hint, haveHint, c.retryNow = cur, true, true
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
	return shared
}
