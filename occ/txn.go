package occ

import (
	"context"
	"errors"
	"maps"
	"slices"
	"time"

	"github.com/occkit/occkit/cas"
)

// Tx is one attempt of an optimistic transaction, handed to the function
// given to Txn. It records the version of every key it reads and buffers
// every write; nothing reaches the store until the function returns nil and
// the commit validates all reads at once. A Tx is used by one goroutine and
// is only valid during its attempt.
type Tx struct {
	ctx    context.Context
	store  cas.Store
	reads  map[string]cas.Item
	writes map[string]txWrite
	hints  map[string]cas.Item
	cache  *Cache // nil unless WithCache names this store
	// readCache is whether reads may come from cache, or from the states
	// this process remembers (recent.go) when there is none (not after a
	// wait).
	readCache bool
	// recent holds the keys read from remembered states, cached those
	// read from cache.
	recent, cached map[string]bool
	// written is what a successful commit wrote, key by key.
	written map[string]cas.Item
	// hotWindow, when not 0, makes a read of a key that is hot for
	// transactions (txn_hotcommit.go) end the attempt: hot is set, every
	// read after it fails with it, and Txn runs the call holding its keys
	// instead.
	hotWindow time.Duration
	hot       *hotReadError
}

type txWrite struct {
	value []byte
	del   bool
}

// Context returns the attempt's context.
func (tx *Tx) Context() context.Context { return tx.ctx }

// Get returns the key's value as this transaction sees it: its own buffered
// write if there is one, else the value read from the store (read once per
// attempt and remembered with its version). ok is false when the key does
// not exist. The returned slice must not be modified.
func (tx *Tx) Get(key string) (value []byte, ok bool, err error) {
	if w, written := tx.writes[key]; written {
		if w.del {
			return nil, false, nil
		}
		return w.value, true, nil
	}
	it, err := tx.read(key)
	if err != nil {
		return nil, false, err
	}
	return it.Value, it.Version != 0, nil
}

func (tx *Tx) read(key string) (cas.Item, error) {
	if it, ok := tx.reads[key]; ok {
		return it, nil
	}
	it, ok := tx.hints[key]
	if ok {
		delete(tx.hints, key)
	} else if it, ok = tx.cachedRead(key); !ok {
		if err := tx.checkHot([]string{key}); err != nil {
			return cas.Item{}, err
		}
		var err error
		it, err = tx.store.Get(tx.ctx, key)
		switch {
		case errors.Is(err, cas.ErrNotFound):
			it = cas.Item{Key: key}
		case err != nil:
			return cas.Item{}, err
		}
		if tx.cache != nil {
			tx.cache.put(it)
		}
	}
	tx.reads[key] = it
	return it, nil
}

// Prefetch reads the keys this attempt has not read yet (nor written,
// nor has from a conflict or the cache) in one round trip when the store
// is a cas.BatchGetter (cas.GetMany; one Get per key otherwise), so that
// the tx.Get calls that follow cost nothing. A transaction that knows its
// keys up front, such as a transfer, calls it first:
//
//	if err := tx.Prefetch(from, to); err != nil {
//		return err
//	}
//
// Keys it names twice or already read are read once.
func (tx *Tx) Prefetch(keys ...string) error { return tx.fetch(keys, true) }

// fetch reads the keys not read yet (and, with skipWritten, not written),
// from the conflict's hint or the cache where it can, the others in one
// round trip.
func (tx *Tx) fetch(keys []string, skipWritten bool) error {
	var want []string
	for _, k := range keys {
		if _, ok := tx.reads[k]; ok {
			continue
		}
		if _, ok := tx.writes[k]; ok && skipWritten {
			continue
		}
		if it, ok := tx.hints[k]; ok {
			delete(tx.hints, k)
			tx.reads[k] = it
			continue
		}
		if it, ok := tx.cachedRead(k); ok {
			tx.reads[k] = it
			continue
		}
		if !slices.Contains(want, k) {
			want = append(want, k)
		}
	}
	return tx.readMany(want)
}

// readMany reads keys (none of them read yet) from the store in one
// round trip where it can, and records them as read.
func (tx *Tx) readMany(keys []string) error {
	switch len(keys) {
	case 0:
		return nil
	case 1:
		_, err := tx.read(keys[0])
		return err
	}
	if err := tx.checkHot(keys); err != nil {
		return err
	}
	items, err := cas.GetMany(tx.ctx, tx.store, keys)
	if err != nil {
		return err
	}
	for _, it := range items {
		if tx.cache != nil {
			tx.cache.put(it)
		}
		tx.reads[it.Key] = it
	}
	return nil
}

// Put buffers a write of value to key. The transaction keeps value until it
// commits: do not modify it afterwards.
func (tx *Tx) Put(key string, value []byte) {
	tx.writes[key] = txWrite{value: value}
}

// Delete buffers the deletion of key. Deleting a key that does not exist is
// not an error.
func (tx *Tx) Delete(key string) {
	tx.writes[key] = txWrite{del: true}
}

// Txn runs fn as an optimistic multi-key transaction and commits what it
// wrote, retrying fn from the start when another writer got in between.
//
// Inside fn, tx.Get reads a key (and sees the transaction's own writes),
// tx.Put and tx.Delete buffer writes. When fn returns nil, the commit checks
// that every key read (or written) still has the version it was read at and
// applies every write, atomically, through the store's cas.Committer. A
// conflict runs fn again; an error from fn aborts without writing and is
// returned as is. fn may run several times and must only depend on what it
// reads through tx. The loop is Retry's: see there for giving up, contexts
// and panics.
//
// On a store that is not a cas.Committer, a transaction may read any number
// of keys and write none, or read and write a single key; anything else
// fails with an error matching errors.ErrUnsupported. Calls of one process
// take turns at hot keys, as Update's do, and a call that keeps losing to
// other processes holds its keys in the store (WithExclusiveAfter). With
// WithCombiner, fn may run on another caller's goroutine, with that
// caller's context as tx.Context(). See docs/overview.md#transactions.
func Txn(ctx context.Context, s cas.Store, fn func(tx *Tx) error, opts ...Option) error {
	var c config
	c.apply(opts)
	if c.combiner != nil && combinable(s) {
		return combineTxn(ctx, c.combiner, s, fn, opts)
	}
	c.op = "txn"
	var hints map[string]cas.Item
	cache := c.cache
	if !cache.serves(s) {
		cache = nil
	}
	// The turns the call holds (see txTurns): taken after a conflict, or
	// when its keys are hot in this process, and kept until it ends.
	turns := txTurns{store: s}
	defer turns.leave()
	// As for Update, default waits only (WithTurns(false), WithBackOff
	// and WithBackOffFunc opt out).
	useTurns := c.backOff == nil && c.newBackOff == nil && !c.noTurns && combinable(s)
	// Reads may start from the states the process remembers at keys whose
	// turns just ended (recent.go), as Update's do.
	useRecent := useTurns && cache == nil && c.maxAttempts > 1
	var want []string   // the keys whose turns to take before the next attempt
	cacheStale := false // a conflict showed the cache stale: read from now on
	// Escalation, as Update's: a transaction that lost exclusiveAt
	// commits in a row runs its next attempt holding its keys in the
	// store (cas.ExclusiveCommitter), in key order.
	ec, _ := s.(cas.ExclusiveCommitter)
	exclusiveAt, lost := 0, 0
	var lastKeys []string
	if ec != nil {
		exclusiveAt = c.exclusiveAtOr(DefaultTxnExclusiveAfter)
	}
	hotWindow := hotCommitWindow(s, exclusiveAt) // txn_hotcommit.go
	// hold runs an attempt holding keys (cas.ExclusiveCommitter).
	// whole: keys are a guess, and fn must touch no other key.
	hold := func(ctx context.Context, keys []string, whole bool) error {
		c.exclusive = true
		touched, err := txnExclusive(ctx, ec, s, cache, keys, fn, &turns, whole)
		if errors.Is(err, cas.ErrConflict) {
			lost++
			lastKeys = keys
			if len(touched) > 0 {
				// fn may have touched other keys this time: hold
				// those next.
				lastKeys = touched
			}
		}
		return err
	}
	return c.run(ctx, func(ctx context.Context) error {
		if exclusiveAt > 0 && lost >= exclusiveAt && len(lastKeys) > 0 {
			return hold(ctx, lastKeys, false)
		}
		var handed map[string]cas.Item
		if want != nil {
			got, queued, err := turns.join(ctx, want, true)
			want = nil
			if err != nil {
				return err
			}
			if queued {
				handed = got
			} else if len(got) > 0 && !c.waited {
				// No wait: the conflict's state is still fresh, and so
				// is what the turns came with.
				if hints == nil {
					hints = map[string]cas.Item{}
				}
				maps.Copy(hints, got)
			}
		}
		for {
			t0 := time.Now()
			tx := &Tx{ctx: ctx, store: s, reads: map[string]cas.Item{}, writes: map[string]txWrite{}, hints: hints, cache: cache}
			hints = nil // a hint serves the attempt right after the conflict only
			if c.waited || handed != nil {
				// After a backoff wait or a wait for turns, hints and
				// cached states are likely stale: read (and refresh the
				// cache), unless the turns came with the states their
				// previous holders wrote.
				tx.hints, tx.readCache = handed, false
				handed = nil
			} else {
				tx.readCache = (cache != nil && !cacheStale) || useRecent
			}
			tx.hotWindow = hotWindow
			err := fn(tx)
			tx.hotWindow = 0 // the commit's own reads (of keys only written) never end it
			if tx.hot != nil {
				// fn read a hot key: its reads are not worth committing.
				return hold(ctx, tx.hot.holdKeys(tx, lastKeys), true)
			}
			if err != nil {
				if len(tx.recent) == 0 && len(tx.cached) == 0 {
					return err
				}
				// fn refused states this process kept (remembered
				// writes, cache entries), which another process may have
				// changed since: an error must come from states that were
				// current during the call. Read them, and ask again.
				tx = &Tx{ctx: ctx, store: s, reads: map[string]cas.Item{}, writes: map[string]txWrite{}, cache: cache}
				if err := fn(tx); err != nil {
					return err
				}
			}
			if useTurns && len(turns.held) == 0 && linesOpen.Load() != 0 {
				// Keys this process's calls queue for: queue too, rather
				// than commit from reads the holders are about to make
				// stale, and run fn again holding the turns.
				if keys := tx.keys(); turns.anyLine(keys) {
					var err error
					handed, _, err = turns.join(ctx, keys, false)
					if err != nil {
						return err
					}
					if len(turns.held) > 0 {
						if handed == nil {
							handed = map[string]cas.Item{}
						}
						continue
					}
				}
			}
			if hotWindow > 0 && len(tx.writes) > 0 {
				if keys := tx.keys(); anyHot(s, keys, hotWindow) {
					// A key of this transaction conflicted lately: an
					// optimistic commit would likely lose to the
					// transactions holding it. Hold the keys at once.
					return hold(ctx, keys, false)
				}
			}
			err = tx.commit()
			turns.attempted(time.Since(t0), tx.written)
			var ce *cas.ConflictError
			conflicted := errors.As(err, &ce)
			if len(tx.cached) > 0 && (err == nil || conflicted) {
				// A commit that applied, or conflicted: whether the
				// entries held (another failure says nothing of them).
				cache.noteServed(conflicted && tx.cached[ce.Key])
			}
			if err == nil {
				// The keys read from remembered states: remember what
				// was written over them.
				for k := range tx.recent {
					if it, ok := tx.written[k]; ok {
						rememberState(s, k, it, false)
					}
				}
			}
			switch {
			case conflicted && ce.HasCurrent:
				hints = map[string]cas.Item{ce.Key: ce.Current}
				c.retryNow = true
				if cache != nil {
					cache.put(ce.Current)
				}
			case ce != nil && cache != nil:
				cache.forget(ce.Key)
			}
			stale := ce != nil && tx.recent[ce.Key]
			if stale {
				// A remembered state was stale: not counted against the
				// call when the conflict carried the current state (run),
				// once: the call reads its keys from now on.
				forgetState(s, ce.Key)
				c.staleRecent = ce.HasCurrent
				useRecent = false
			}
			if ce != nil {
				if hotWindow > 0 && !stale && !tx.cached[ce.Key] {
					// A conflict from a fresh read: another writer got
					// in between (a stale cache entry or remembered
					// state says nothing of the key's heat).
					markHot(s, ce.Key)
				}
				if !stale {
					lost++
				}
				lastKeys = tx.keys()
				// The cache was stale at one key: likely at others too
				// (another process writes them). The call's next
				// attempts read, but for what the conflict carried.
				cacheStale = cache != nil
			}
			if useTurns && ce != nil && len(turns.held) == 0 && time.Since(t0) >= lineMinUnit {
				// The keys are hot: from the next attempt on, the call
				// holds their turns (this process's other calls of them
				// queue behind it), taken in key order.
				want = tx.keys()
			}
			return err
		}
	})
}
