package occ

import (
	"bytes"
	"hash/maphash"
	"sync/atomic"
	"time"

	"github.com/occkit/occkit/cas"
)

// Recent states: the state a hot key's line last wrote, kept for a moment
// after the line ends.
//
// A line hands each turn on with what its holder wrote, so that the next
// call writes without reading. When the line ends (nobody waits in it:
// one caller of the key in this process, whose calls follow each other),
// the next call would read the key again, one round trip, although the
// process has just written it. So the state the line's last holder wrote
// is kept (rememberState) for recentFor, and a call of Update that finds
// it starts from it instead of reading; when it writes, it keeps what it
// wrote in its place. Other writes of the key (combined ones, calls that
// take no turns or use a Cache, other processes) make the kept state
// stale: a call that starts from a stale state meets a conflict, which
// on most stores carries the current state, and retries from it at once
// without counting that attempt against the call (its attempt limit,
// escalation, budget and immediate retry are as if it had read), once:
// after it, the call reads (Txn too). This is sound only on a store that
// never hands a version out twice: a remembered state whose version came
// back for another state would pass the commit's check. (rediscas takes
// versions at least the server's clock for that reason: a Redis Cluster
// failover set its counters back, and transfers that read remembered
// states across one were not conserved.) Keys that never had
// a line have no entry; a call pays one atomic load (recentLive) while
// the table is empty, a hash and another load otherwise.
//
// A kept value is a copy of the bytes written (a Txn's Put may hand its
// caller's buffer), except on a store that says its values may be kept as
// they are (valueKeeper).

// valueKeeper is implemented by a store whose values are handles to
// state it shares with its callers (internal/rowupdate's rows, whose
// handles keep their rows alive and must not be copied). KeepValues
// reports whether such a value may be kept past the call that wrote it
// (the rows hold no references a caller could change); false: the
// store's states are not kept.
type valueKeeper interface{ KeepValues() bool }

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
// owned says it.Value is the caller's to give (encoded for this write):
// it is kept as it is, not copied.
func rememberState(store cas.Store, key string, it cas.Item, owned bool) {
	if !combinable(store) {
		return
	}
	if vk, ok := store.(valueKeeper); ok {
		if !vk.KeepValues() {
			return
		}
	} else if it.Value != nil && !owned {
		it.Value = bytes.Clone(it.Value)
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
	if r == nil {
		return cas.Item{}, false
	}
	if time.Since(r.at) > recentFor {
		// Expired, whatever key it is of: drop it, and what it holds.
		if slot.CompareAndSwap(r, nil) {
			recentLive.Add(-1)
		}
		return cas.Item{}, false
	}
	if r.key != key || r.store != store {
		return cas.Item{}, false
	}
	return r.item, true
}
