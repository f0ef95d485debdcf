package occ

import (
	"hash/maphash"
	"slices"
	"sync/atomic"
	"time"

	"github.com/occkit/occkit/cas"
)

// Hot keys of transactions (cas.HotCommitHint): on a store that names a
// window, a commit of Txn that conflicts marks the key it conflicted at,
// and a transaction of this process whose function touched a key marked
// twice within the window commits holding its keys (CommitExclusive) at
// once, instead of sending an optimistic commit that the key's holders
// would make it lose. The marks live in a table of turnSlots slots, as
// the recent states do: a key whose slot another key took is simply not
// hot (the store's ordinary path), so the table stays small whatever the
// number of keys. A store without the hint pays one type assertion per
// call.

// hotMark is a key's latest two conflicts.
type hotMark struct {
	store    cas.Store
	key      string
	at, prev time.Time // prev: zero when at is the first
}

var hotTable [turnSlots]struct {
	p atomic.Pointer[hotMark]
	_ [56]byte // one cache line per slot
}

func hotSlot(key string) *atomic.Pointer[hotMark] {
	return &hotTable[maphash.String(lineSeed, key)%turnSlots].p
}

// hotCommitWindow returns how long a conflict keeps a key of s hot for
// transactions (0: s names no window, or escalation is off).
func hotCommitWindow(s cas.Store, exclusiveAt int) time.Duration {
	h, ok := s.(cas.HotCommitHint)
	if !ok || exclusiveAt <= 0 || !combinable(s) {
		// (A store whose type cannot be compared cannot key the marks.)
		return 0
	}
	return max(h.HotCommitFor(), 0)
}

// markHot notes a conflict at key of s.
func markHot(s cas.Store, key string) {
	slot := hotSlot(key)
	m := &hotMark{store: s, key: key, at: time.Now()}
	if old := slot.Load(); old != nil && old.key == key && old.store == s {
		m.prev = old.at
	}
	slot.Store(m)
}

// anyHot reports whether one of keys of s conflicted twice within the
// last window: once is the chance meeting of two writers that any number
// of keys sees now and then, and holding a key costs more than trying it.
func anyHot(s cas.Store, keys []string, window time.Duration) bool {
	return slices.ContainsFunc(keys, func(k string) bool { return isHot(s, k, window) })
}

// isHot is anyHot for one key.
func isHot(s cas.Store, key string, window time.Duration) bool {
	m := hotSlot(key).Load()
	return m != nil && m.key == key && m.store == s && !m.prev.IsZero() && time.Since(m.prev) < window
}

// hotHoldMax bounds the keys a transaction may have read, those it is
// about to read included, for a hot read to end its attempt: a
// transaction that reads more (a scan) goes on reading optimistically,
// rather than lock that many rows.
const hotHoldMax = 8

// hotReadError ends an attempt whose function read a hot key (Tx.hotWindow):
// Txn holds the keys instead of reading them optimistically.
type hotReadError struct {
	keys []string // the keys being read when a hot one was met
}

func (e *hotReadError) Error() string {
	return "occ: a transaction read a hot key: it runs again holding its keys"
}

// checkHot returns the attempt's hotReadError when one of keys, about to
// be read from the store, or of the keys the attempt has read (from a
// conflict, the cache or a remembered state) is hot, or one was met
// before in this attempt: the attempt will hold its keys, and a read now
// would be wasted.
func (tx *Tx) checkHot(keys []string) error {
	if tx.hot != nil {
		return tx.hot
	}
	if tx.hotWindow <= 0 || len(tx.reads)+len(keys) > hotHoldMax {
		return nil
	}
	hot := anyHot(tx.store, keys, tx.hotWindow)
	for k := range tx.reads {
		hot = hot || isHot(tx.store, k, tx.hotWindow)
	}
	if !hot {
		return nil
	}
	tx.hot = &hotReadError{keys: slices.Clone(keys)}
	return tx.hot
}

// holdKeys returns the keys the escalated attempt holds, in key order:
// those the attempt read, wrote or was reading, and those the call's
// previous attempt touched (last), which a function that reads its keys
// one by one touches again.
func (e *hotReadError) holdKeys(tx *Tx, last []string) []string {
	keys := tx.keys()
	for _, k := range slices.Concat(e.keys, last) {
		if !slices.Contains(keys, k) {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	return keys
}
