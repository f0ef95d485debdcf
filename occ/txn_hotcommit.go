package occ

import (
	"hash/maphash"
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
	for _, k := range keys {
		if m := hotSlot(k).Load(); m != nil && m.key == k && m.store == s && !m.prev.IsZero() && time.Since(m.prev) < window {
			return true
		}
	}
	return false
}
