package occ

import (
	"hash/maphash"
	"sync/atomic"
	"time"

	"github.com/occkit/occkit/cas"
)

// Recent states: the state a process last wrote at a hot key, kept for a
// moment after the key's line ends.
//
// A line hands each turn on with what its holder wrote, so that the next
// call writes without reading. When the line ends (nobody waits in it:
// one caller of the key in this process, whose calls follow each other),
// the next call would read the key again, one round trip, although the
// process has just written it. So the state the line's last holder wrote
// is kept (rememberState) for recentFor, and a call of Update that finds
// it starts from it instead of reading; when it writes, it keeps what it
// wrote in its place. A state another process has overwritten since costs
// the conflict it meets, which carries the current state on most stores:
// about what the read would have cost. Keys that never had a line have no
// entry, and a call on them pays one atomic load (recentLive) while no
// entry exists, a hash and another load while one does.

// recentFor is how long a remembered state serves.
const recentFor = queueWait

// recentState is a key's remembered state.
type recentState struct {
	store cas.Store
	key   string
	item  cas.Item
	at    time.Time
}

var (
	// recentLive counts the table's entries; zero lets every call skip
	// it.
	recentLive  atomic.Int32
	recentTable [turnSlots]struct {
		p atomic.Pointer[recentState]
		_ [56]byte // one cache line per slot
	}
)

func recentSlot(key string) *atomic.Pointer[recentState] {
	return &recentTable[maphash.String(lineSeed, key)%turnSlots].p
}

// rememberState keeps it as the state this process last wrote at key of
// store, in the place of the entry its slot held (another key's too).
func rememberState(store cas.Store, key string, it cas.Item) {
	if !combinable(store) {
		return
	}
	if recentSlot(key).Swap(&recentState{store: store, key: key, item: it, at: time.Now()}) == nil {
		recentLive.Add(1)
	}
}

// forgetState drops the remembered state of key of store, if any.
func forgetState(store cas.Store, key string) {
	slot := recentSlot(key)
	if r := slot.Load(); r != nil && r.key == key && r.store == store && slot.CompareAndSwap(r, nil) {
		recentLive.Add(-1)
	}
}

// recalled returns the remembered state of key of store while it is
// younger than recentFor.
func recalled(store cas.Store, key string) (cas.Item, bool) {
	if recentLive.Load() == 0 || !combinable(store) {
		return cas.Item{}, false
	}
	slot := recentSlot(key)
	r := slot.Load()
	if r == nil || r.key != key || r.store != store {
		return cas.Item{}, false
	}
	if time.Since(r.at) > recentFor {
		if slot.CompareAndSwap(r, nil) {
			recentLive.Add(-1)
		}
		return cas.Item{}, false
	}
	return r.item, true
}
