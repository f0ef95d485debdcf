package occ

import (
	"context"
	"errors"

	"github.com/occkit/occkit/cas"
)

// Update is a read-modify-write of one key with retry: it reads the key,
// calls mutate with the current value (exists is false and cur the zero
// value when the key is absent), writes the result only if the key's
// version has not changed, and starts again on a conflict. It returns the
// value written and its version.
//
// mutate may run several times and must depend only on its arguments; an
// error from it ends the loop and is returned as is (unless WithRetryable
// says to retry it), once it came from a state current during the call:
// an error from a state this process kept (a cache entry, the state the
// key's last turn wrote) is checked by reading the key and calling mutate
// again. The loop is Retry's: see there for giving up, contexts
// and panics. Calls of one process take turns at a hot key (WithTurns), and
// a call that keeps losing to writers elsewhere runs its next attempt
// exclusively on a store that can (WithExclusiveAfter). See
// docs/overview.md#retries.
//
// Replacing a mutex around a counter:
//
//	counters := cas.NewTyped(store, cas.JSON[int]())
//	n, _, err := occ.Update(ctx, counters, "visits", func(n int, _ bool) (int, error) {
//		return n + 1, nil
//	})
func Update[T any](ctx context.Context, s *cas.Typed[T], key string, mutate func(cur T, exists bool) (T, error), opts ...Option) (T, cas.Version, error) {
	var c config
	c.start("update", key, opts)
	if c.combiner != nil && ctx != nil && combinable(s.Store()) {
		return combineUpdate(ctx, &c, c.combiner, s, key, mutate)
	}
	if c.backOff == nil && c.newBackOff == nil && !c.noTurns {
		// Default waits: the call takes part in the process's lines (turn.go).
		c.store = s.Store()
	}
	return updateDirect(ctx, &c, s, key, mutate)
}

// updateDirect is Update without a combiner.
func updateDirect[T any](ctx context.Context, c *config, s *cas.Typed[T], key string, mutate func(cur T, exists bool) (T, error)) (T, cas.Version, error) {
	var (
		written  T
		version  cas.Version
		hint     cas.Item
		haveHint bool
		seen     cas.Version // the newest version of key this call has seen

		cachedAfterWait bool // a wait was followed by the cache's entry instead of a read
	)
	cache := c.cache
	if !cache.serves(s.Store()) {
		cache = nil
	}
	recent := false // the call started from the state this process last wrote (recent.go)
	if cache != nil {
		hint, haveHint = cache.get(key)
	} else if c.store != nil && c.maxAttempts > 1 {
		// (A call of one attempt reads: a stale state would fail it.)
		hint, haveHint = recalled(c.store, key)
		recent = haveHint
	}
	fromRecent := recent // the current attempt started from the remembered state
	// fromMemory: the first attempt starts from a state this process
	// kept (a cache entry, a remembered write), which may be older than
	// the call; mutate's error from it is checked on a read (below).
	fromMemory := haveHint
	// lost counts the call's conditional writes lost in a row; at
	// exclusiveAt the next attempt holds the key (cas.Exclusive).
	ex, _ := s.Store().(cas.Exclusive)
	exclusiveAt, lost := 0, 0
	if ex != nil {
		exclusiveAt = c.exclusiveAt(ex)
	}
	err := c.run(ctx, func(ctx context.Context) error {
		var (
			cur T
			ver cas.Version
			err error
		)
		if exclusiveAt > 0 && lost >= exclusiveAt {
			c.handed, c.exclusive = nil, true
			if c.writes != nil {
				c.writes.Add(1)
			}
			written, version, err = attemptExclusive(ctx, c, s, ex, cache, key, mutate)
			if err == nil && recent {
				// The remembered state is older than this write.
				forgetState(c.store, key)
			}
			return err
		}
		if c.waited {
			// After a backoff wait, what the last conflict said is likely
			// stale on a contended key: read. The cache is the exception
			// when a write of this process refreshed it during the wait
			// (its version is newer than the last one this call saw): it
			// is then as fresh as a read, and a caller that read instead
			// (two round trips) while the winners write from the cache
			// (one) would starve. An entry no newer than what this call
			// saw is as stale as the conflict: read.
			haveHint = false
			if cache != nil && !cachedAfterWait {
				// Once per call: if that write conflicts too, writers
				// elsewhere are ahead of this process's cache, and later
				// waits read.
				if e, ok := cache.get(key); ok && e.Version > seen {
					hint, haveHint, cachedAfterWait = e, true, true
				}
			}
		}
		if c.handed != nil {
			// The turn came with the state its previous holder wrote
			// (newer than any this call has seen, unless a writer
			// elsewhere got in between: then a read is as good).
			if c.handed.known && c.handed.state.Version > seen {
				hint, haveHint = c.handed.state, true
			}
			c.handed = nil
		}
		attemptRecent := fromRecent && haveHint
		attemptMemory := fromMemory && haveHint
		fromRecent, fromMemory = false, false
		switch {
		case haveHint:
			haveHint = false
			cur, ver, err = decodeHint(s, key, hint)
		case cache != nil:
			cur, ver, err = readThrough(ctx, s, cache, key)
		default:
			cur, ver, err = s.Get(ctx, key)
			if errors.Is(err, cas.ErrNotFound) {
				err = nil
			}
		}
		if err != nil {
			return err
		}
		seen = max(seen, ver)
		next, err := mutate(cur, ver != 0)
		if err != nil && attemptMemory {
			// mutate refused a state this process kept, which another
			// process may have changed since: an error must come from a
			// state that was current during the call. Read, and ask
			// again.
			if cache != nil {
				cur, ver, err = readThrough(ctx, s, cache, key)
			} else {
				cur, ver, err = s.Get(ctx, key)
				if errors.Is(err, cas.ErrNotFound) {
					err = nil
				}
			}
			if err != nil {
				return err
			}
			attemptRecent = false
			seen = max(seen, ver)
			next, err = mutate(cur, ver != 0)
		}
		if err != nil {
			return err
		}
		var nv cas.Version
		if c.writes != nil {
			c.writes.Add(1)
		}
		switch {
		case cache != nil || c.line != nil || recent:
			// The holder of a turn keeps what it wrote, to hand it over
			// with the turn, and a call that started from a remembered
			// state remembers what it wrote.
			var it cas.Item
			it, err = writeThrough(ctx, s, cache, key, ver, next)
			nv = it.Version
			if err == nil && c.line != nil {
				c.line.wrote, c.line.wroteOK = it, true
			}
			if err == nil && recent {
				rememberState(c.store, key, it, true) // writeThrough encoded it for this write
			}
		default:
			nv, err = s.CompareAndSwap(ctx, key, ver, next)
		}
		if err != nil {
			if errors.Is(err, cas.ErrConflict) && !attemptRecent {
				lost++
			}
			if cur, ok := conflictCurrent(err, key); ok {
				hint, haveHint, c.retryNow = cur, true, true
				// A remembered state that was stale costs the call
				// nothing more than the read it saved (run).
				c.staleRecent = attemptRecent
				seen = max(seen, cur.Version)
				if c.escalate {
					// The combiner goes on from this state (combineCold).
					c.handed = &ticket{state: cur, known: true}
				}
			}
			return err
		}
		written, version = next, nv
		return nil
	})
	if err != nil {
		var zero T
		return zero, 0, err
	}
	return written, version, nil
}

// attemptExclusive is an attempt of Update that holds the key in the
// store from its read to its write (cas.Exclusive), so that it cannot
// lose; the cache and the call's turn learn what it wrote.
func attemptExclusive[T any](ctx context.Context, c *config, s *cas.Typed[T], ex cas.Exclusive, cache *Cache, key string, mutate func(cur T, exists bool) (T, error)) (T, cas.Version, error) {
	var (
		next T
		raw  []byte
	)
	nv, err := ex.UpdateExclusive(ctx, key, func(it cas.Item) ([]byte, bool, error) {
		cur, ver, err := decodeHint(s, key, it)
		if err != nil {
			return nil, false, err
		}
		n, err := mutate(cur, ver != 0)
		if err != nil {
			return nil, false, err
		}
		b, err := s.Encode(key, n)
		if err != nil {
			return nil, false, err
		}
		next, raw = n, b
		return b, true, nil
	})
	if err != nil {
		if cache != nil {
			cache.forget(key)
		}
		var zero T
		return zero, 0, err
	}
	it := cas.Item{Key: key, Value: raw, Version: nv}
	if cache != nil {
		cache.put(it)
	}
	if c.line != nil {
		c.line.wrote, c.line.wroteOK = it, true
	}
	return next, nv, nil
}

// decodeHint decodes the current item a conflict carried.
func decodeHint[T any](s *cas.Typed[T], key string, it cas.Item) (T, cas.Version, error) {
	var v T
	if it.Version == 0 {
		return v, 0, nil
	}
	err := s.Decode(key, it.Value, &v)
	return v, it.Version, err
}

// readThrough reads key from the store and caches what it found (an
// absent key too: that saves the read of a create).
func readThrough[T any](ctx context.Context, s *cas.Typed[T], c *Cache, key string) (T, cas.Version, error) {
	it, err := s.Store().Get(ctx, key)
	switch {
	case errors.Is(err, cas.ErrNotFound):
		it = cas.Item{Key: key}
	case err != nil:
		var zero T
		return zero, 0, err
	}
	c.put(it)
	return decodeHint(s, key, it)
}

// writeThrough writes next and returns what it wrote, and caches the
// result when c is not nil: the new state on success, the current one a
// conflict carried, or nothing when the conflict did not say.
func writeThrough[T any](ctx context.Context, s *cas.Typed[T], c *Cache, key string, expected cas.Version, next T) (cas.Item, error) {
	b, err := s.Encode(key, next)
	if err != nil {
		return cas.Item{}, err
	}
	nv, err := s.Store().CompareAndSwap(ctx, key, expected, b)
	if c != nil {
		c.noteWrite(key, b, nv, err)
	}
	if err != nil {
		return cas.Item{}, err
	}
	return cas.Item{Key: key, Value: b, Version: nv}, nil
}
