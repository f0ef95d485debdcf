package occ

import (
	"container/list"
	"errors"
	"reflect"
	"sync"
	"sync/atomic"

	"github.com/occkit/occkit/cas"
)

// Cache remembers the last known value and version of keys of one store,
// so that Update (with WithCache) can skip the read when this process
// already knows a key's current version: an update then costs one
// conditional write, one round trip.
//
// Entries never make a write unsafe: the conditional write is the only
// judge. A stale entry costs one refused write, after which the conflict's
// current item (which every occkit adapter returns) refreshes the entry and
// the retry writes again, still without a separate read. When keys are
// also written by other processes, entries go stale and updates cost a
// refused write more. A transaction pays a refused commit, and learns the
// current state of one key: once more than half of the transactions that
// started from entries lately found them stale, the cache serves
// transactions only one read in 32 (to keep measuring) and they read,
// until its entries hold again (docs/performance.md).
//
// A Cache is bounded (least recently used entries are evicted; each entry
// costs about 150 bytes plus its key and value), belongs to one store
// (updates of another store ignore it), and is safe for concurrent use:
// share one per store across the goroutines of a process.
type Cache struct {
	store  cas.Store
	shards [cacheShards]cacheShard
	hits   atomic.Int64
	misses atomic.Int64
	// stale is how often the writes that started from an entry lately
	// found it stale, in 1/1024 (see noteServed); probes counts the gets
	// while it is above staleBypass.
	stale  atomic.Int32
	probes atomic.Uint32
}

// While more than half of the transactions that started from entries
// lately found them stale (other processes write the keys), a Cache
// serves transactions only one get in probeEvery (the others miss, and
// the transaction reads): a refused commit costs more than the read the
// entry saved, and its conflict carries the current state of one key
// only. The probes keep measuring, and the cache serves again once its
// entries hold. Update is not affected: a refused write of one key
// carries that key's current state, and costs what the read would.
const (
	staleBypass = 512
	probeEvery  = 32
)

// noteServed records the outcome of a commit that started from entries:
// stale when it conflicted at one of them. Each outcome moves the
// estimate an eighth of the way to 1024 (stale) or to 0.
func (c *Cache) noteServed(stale bool) {
	for {
		old := c.stale.Load()
		next := old - old/8
		if stale {
			next = old + (1024-old)/8
		}
		if c.stale.CompareAndSwap(old, next) {
			return
		}
	}
}

const cacheShards = 16

type cacheShard struct {
	mu    sync.Mutex
	max   int
	items map[string]*list.Element
	lru   list.List // front: most recent; values are *cas.Item
}

// NewCache returns an empty cache of at most maxEntries entries for store
// (at least one per shard).
func NewCache(store cas.Store, maxEntries int) *Cache {
	c := &Cache{store: store}
	per := max(maxEntries/cacheShards, 1)
	for i := range c.shards {
		c.shards[i].max = per
		c.shards[i].items = map[string]*list.Element{}
	}
	return c
}

func (c *Cache) shard(key string) *cacheShard {
	h := uint32(2166136261)
	for i := 0; i < len(key); i++ {
		h ^= uint32(key[i])
		h *= 16777619
	}
	return &c.shards[h%cacheShards]
}

// serves reports whether the cache belongs to s.
func (c *Cache) serves(s cas.Store) bool {
	if c == nil || c.store == nil || s == nil {
		return false
	}
	a, b := reflect.TypeOf(c.store), reflect.TypeOf(s)
	return a == b && a.Comparable() && c.store == s
}

// serve is get for a transaction's read: while the entries that
// transactions started from were mostly stale lately, it serves only
// probes (see staleBypass).
func (c *Cache) serve(key string) (cas.Item, bool) {
	if c.stale.Load() > staleBypass && c.probes.Add(1)%probeEvery != 0 {
		c.misses.Add(1)
		return cas.Item{}, false
	}
	return c.get(key)
}

// get returns the cached item of key; its Value must not be modified.
func (c *Cache) get(key string) (cas.Item, bool) {
	sh := c.shard(key)
	sh.mu.Lock()
	e, ok := sh.items[key]
	var it cas.Item
	if ok {
		sh.lru.MoveToFront(e)
		it = *e.Value.(*cas.Item)
	}
	sh.mu.Unlock()
	if ok {
		c.hits.Add(1)
	} else {
		c.misses.Add(1)
	}
	return it, ok
}

// put records it as the key's current state unless the cache already
// knows a newer version. it.Value must not be modified afterwards.
func (c *Cache) put(it cas.Item) {
	sh := c.shard(it.Key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if e, ok := sh.items[it.Key]; ok {
		cur := e.Value.(*cas.Item)
		if cur.Version <= it.Version || it.Version == 0 {
			*cur = it
		}
		sh.lru.MoveToFront(e)
		return
	}
	if sh.lru.Len() >= sh.max {
		old := sh.lru.Back()
		sh.lru.Remove(old)
		delete(sh.items, old.Value.(*cas.Item).Key)
	}
	v := it
	sh.items[it.Key] = sh.lru.PushFront(&v)
}

// Remember records items as the current state of their keys, as reads
// through the cache would, except where the cache already knows a newer
// version of a key. It is for state this process learned by other means
// (a bulk load, a batch read, the writes that created the keys), so that
// the first update of each key skips its read. Items must be keys of the
// cache's store, as the store returned them (Version 0: the key is
// absent); their values must not be modified afterwards. A wrong or stale
// item costs one refused write, never a lost update.
func (c *Cache) Remember(items ...cas.Item) {
	for _, it := range items {
		c.put(it)
	}
}

// noteWrite records the outcome of a write of value to key: on success
// (err nil) the version nv it made, after a conflict the current state
// the conflict carries, and otherwise nothing (the key's entry is
// dropped). value must not be modified afterwards.
func (c *Cache) noteWrite(key string, value []byte, nv cas.Version, err error) {
	if err == nil {
		c.put(cas.Item{Key: key, Value: value, Version: nv})
	} else if cur, ok := conflictCurrent(err, key); ok {
		c.put(cur)
	} else {
		c.forget(key)
	}
}

// conflictCurrent returns the current state of key that err, a conflict
// of a write of key, carries.
func conflictCurrent(err error, key string) (cas.Item, bool) {
	var ce *cas.ConflictError
	if errors.As(err, &ce) && ce.HasCurrent && ce.Key == key {
		return ce.Current, true
	}
	return cas.Item{}, false
}

// forget drops key's entry.
func (c *Cache) forget(key string) {
	sh := c.shard(key)
	sh.mu.Lock()
	if e, ok := sh.items[key]; ok {
		sh.lru.Remove(e)
		delete(sh.items, key)
	}
	sh.mu.Unlock()
}

// CacheStats are a Cache's counters.
type CacheStats struct {
	Entries      int
	Hits, Misses int64
}

// Stats returns the cache's counters.
func (c *Cache) Stats() CacheStats {
	st := CacheStats{Hits: c.hits.Load(), Misses: c.misses.Load()}
	for i := range c.shards {
		c.shards[i].mu.Lock()
		st.Entries += c.shards[i].lru.Len()
		c.shards[i].mu.Unlock()
	}
	return st
}

// WithCache makes Update and Txn use c for reads of c's store: a cached
// key is not read before its conditional write, and every write and
// every conflict carrying the current item refreshes the cache.
func WithCache(c *Cache) Option { return Option{kind: optCache, cache: c} }
