package occ

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/cenkalti/backoff/v4"
	"github.com/occkit/occkit/adapters/memcas"
	"github.com/occkit/occkit/cas"
)

func incrInt(n int, _ bool) (int, error) { return n + 1, nil }

// Round trips per Update with a cache: cold = read + write, warm = write
// only, stale = a refused write then a successful one, never a read.
func TestCacheRoundTrips(t *testing.T) {
	ctx := context.Background()
	cs := newCountingStore(memcas.New())
	cache := NewCache(cs, 100)
	counters := cas.NewTyped[int](cs, cas.JSON[int]())
	opt := WithCache(cache)

	if _, _, err := Update(ctx, counters, "k", incrInt, opt); err != nil {
		t.Fatal(err)
	}
	if g, w := cs.getsOf("k"), cs.casOf("k"); g != 1 || w != 1 {
		t.Fatalf("cold update: %d reads, %d writes; want 1 and 1", g, w)
	}
	for i := range 5 {
		if _, _, err := Update(ctx, counters, "k", incrInt, opt); err != nil {
			t.Fatal(err)
		}
		if g, w := cs.getsOf("k"), cs.casOf("k"); g != 1 || w != 2+i {
			t.Fatalf("warm update %d: %d reads, %d writes in all; want 1 and %d", i, g, w, 2+i)
		}
	}
	// Another process writes: the cached version is stale.
	it, _ := cs.Store.Get(ctx, "k")
	if _, err := cs.Store.CompareAndSwap(ctx, "k", it.Version, []byte("100")); err != nil {
		t.Fatal(err)
	}
	g0, w0 := cs.getsOf("k"), cs.casOf("k")
	n, _, err := Update(ctx, counters, "k", incrInt, opt, noSleep())
	if err != nil || n != 101 {
		t.Fatalf("update after a foreign write = %d, %v; want 101", n, err)
	}
	if g, w := cs.getsOf("k")-g0, cs.casOf("k")-w0; g != 0 || w != 2 {
		t.Fatalf("stale entry: %d reads, %d writes; want 0 reads, 2 writes (one refused)", g, w)
	}
	if st := cache.Stats(); st.Entries != 1 || st.Hits != 6 || st.Misses != 1 {
		t.Fatalf("stats %+v, want 1 entry, 6 hits, 1 miss", st)
	}
}

// A conflict that does not carry the current item drops the entry, and the
// retry reads.
func TestCacheConflictWithoutCurrent(t *testing.T) {
	ctx := context.Background()
	cs := newCountingStore(memcas.New())
	cs.stripCurrent = true
	cache := NewCache(cs, 100)
	counters := cas.NewTyped[int](cs, cas.JSON[int]())
	if _, _, err := Update(ctx, counters, "k", incrInt, WithCache(cache)); err != nil {
		t.Fatal(err)
	}
	it, _ := cs.Store.Get(ctx, "k")
	cs.Store.CompareAndSwap(ctx, "k", it.Version, []byte("7"))
	g0 := cs.getsOf("k")
	n, _, err := Update(ctx, counters, "k", incrInt, WithCache(cache), WithBackOff(&backoff.ZeroBackOff{}))
	if err != nil || n != 8 {
		t.Fatalf("update = %d, %v; want 8", n, err)
	}
	if g := cs.getsOf("k") - g0; g != 1 {
		t.Fatalf("%d reads after a conflict without current, want 1", g)
	}
}

// A cache made for one store is ignored by updates of another: versions
// of different stores are unrelated, and using them would be unsafe.
func TestCacheBelongsToOneStore(t *testing.T) {
	ctx := context.Background()
	a, b := newCountingStore(memcas.New()), newCountingStore(memcas.New())
	cache := NewCache(a, 100)
	ta, tb := cas.NewTyped[int](a, cas.JSON[int]()), cas.NewTyped[int](b, cas.JSON[int]())
	for range 3 {
		Update(ctx, ta, "k", incrInt, WithCache(cache))
		Update(ctx, tb, "k", incrInt, WithCache(cache))
	}
	if a.getsOf("k") != 1 || b.getsOf("k") != 3 {
		t.Fatalf("reads: store a %d (want 1, cached), store b %d (want 3, not cached)", a.getsOf("k"), b.getsOf("k"))
	}
	if n, _, _ := tb.Get(ctx, "k"); n != 3 {
		t.Fatalf("store b counter = %d, want 3", n)
	}
}

func TestCacheBounded(t *testing.T) {
	ctx := context.Background()
	s := memcas.New()
	cache := NewCache(s, 64)
	counters := cas.NewTyped(s, cas.JSON[int]())
	for i := range 1000 {
		if _, _, err := Update(ctx, counters, fmt.Sprintf("k%d", i), incrInt, WithCache(cache)); err != nil {
			t.Fatal(err)
		}
	}
	if st := cache.Stats(); st.Entries > 64 {
		t.Fatalf("%d entries, bound 64", st.Entries)
	}
}

// Many goroutines share a cache while a second "process" writes the same
// keys without it: every increment is counted exactly once.
func TestCacheConcurrentWithForeignWriters(t *testing.T) {
	ctx := context.Background()
	s := memcas.New()
	cache := NewCache(s, 16)
	counters := cas.NewTyped(s, cas.JSON[int]())
	keys := []string{"a", "b", "c", "d"}
	var ok atomic.Int64
	var wg sync.WaitGroup
	for w := range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			opts := []Option{WithMaxAttempts(1000), WithBackOff(&backoff.ZeroBackOff{})}
			if w < 8 {
				opts = append(opts, WithCache(cache))
			}
			for i := range 200 {
				if _, _, err := Update(ctx, counters, keys[(w+i)%len(keys)], incrInt, opts...); err != nil {
					t.Error(err)
					return
				}
				ok.Add(1)
			}
		}()
	}
	wg.Wait()
	total := 0
	for _, k := range keys {
		n, _, err := counters.Get(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		total += n
	}
	if int64(total) != ok.Load() {
		t.Fatalf("counters sum to %d, %d increments succeeded", total, ok.Load())
	}
}

// Txn reads cached keys without a round trip, and the commit's version
// checks keep a stale entry from doing harm.
func TestCacheTxn(t *testing.T) {
	ctx := context.Background()
	cc := newCountingCommitter(memcas.New())
	cache := NewCache(cc, 100)
	put(t, cc.countingStore.Store, "a", "100")
	put(t, cc.countingStore.Store, "b", "0")
	move := func(tx *Tx) error {
		av, bv, err := getAB(tx)
		if err != nil {
			return err
		}
		tx.Put("a", []byte(fmt.Sprint(atoi(t, av)-10)))
		tx.Put("b", []byte(fmt.Sprint(atoi(t, bv)+10)))
		return nil
	}
	for range 3 {
		if err := Txn(ctx, cc, move, WithCache(cache)); err != nil {
			t.Fatal(err)
		}
	}
	if g := cc.getsOf("a") + cc.getsOf("b"); g != 2 {
		t.Fatalf("%d reads over three transactions, want 2 (then cached)", g)
	}
	// A foreign write makes "a" stale in the cache.
	it, _ := cc.countingStore.Store.Get(ctx, "a")
	cc.countingStore.Store.CompareAndSwap(ctx, "a", it.Version, []byte("1000"))
	if err := Txn(ctx, cc, move, WithCache(cache), WithBackOff(&backoff.ZeroBackOff{})); err != nil {
		t.Fatal(err)
	}
	a, _ := cc.countingStore.Store.Get(ctx, "a")
	b, _ := cc.countingStore.Store.Get(ctx, "b")
	if string(a.Value) != "990" || string(b.Value) != "40" {
		t.Fatalf("a=%s b=%s, want 990 and 40: the stale cached read must not commit", a.Value, b.Value)
	}
	if commits := cc.recordedCommits(); len(commits) != 5 {
		t.Fatalf("%d commits, want 5 (3, then a refused one and its retry)", len(commits))
	}
}

func TestCacheDecodeDoesNotAlias(t *testing.T) {
	ctx := context.Background()
	s := memcas.New()
	cache := NewCache(s, 10)
	raw := cas.NewTyped(s, cas.Bytes())
	if _, _, err := Update(ctx, raw, "k", func(b []byte, _ bool) ([]byte, error) { return []byte("abc"), nil }, WithCache(cache)); err != nil {
		t.Fatal(err)
	}
	// A mutate that changes its input in place and then fails must not
	// corrupt the cached value.
	errBoom := errors.New("boom")
	Update(ctx, raw, "k", func(b []byte, _ bool) ([]byte, error) { b[0] = 'X'; return nil, errBoom }, WithCache(cache))
	got, _, err := Update(ctx, raw, "k", func(b []byte, _ bool) ([]byte, error) { return append(b, 'd'), nil }, WithCache(cache))
	if err != nil || string(got) != "abcd" {
		t.Fatalf("got %q, %v; want abcd", got, err)
	}
}

// TestCacheRemember: a remembered item spares the first update its read;
// a stale one costs a refused write, and the update is still right; an
// item older than the cache's entry is ignored.
func TestCacheRemember(t *testing.T) {
	ctx := context.Background()
	cs := newCountingStore(memcas.New())
	counters := cas.NewTyped[int](cs, cas.JSON[int]())
	v1 := put(t, cs.Store, "a", "41")
	v2 := put(t, cs.Store, "b", "7")
	cache := NewCache(cs, 100)
	cache.Remember(cas.Item{Key: "a", Value: []byte("41"), Version: v1}, cas.Item{Key: "b", Value: []byte("6"), Version: v2 - 1})

	n, _, err := Update(ctx, counters, "a", incrInt, WithCache(cache))
	if err != nil || n != 42 {
		t.Fatalf("Update(a): %d, %v; want 42", n, err)
	}
	if g, w := cs.getsOf("a"), cs.casOf("a"); g != 0 || w != 1 {
		t.Fatalf("remembered key: %d reads, %d writes; want 0 and 1", g, w)
	}
	n, _, err = Update(ctx, counters, "b", incrInt, WithCache(cache))
	if err != nil || n != 8 {
		t.Fatalf("Update(b) from a stale item: %d, %v; want 8", n, err)
	}
	if g, w := cs.getsOf("b"), cs.casOf("b"); g != 0 || w != 2 {
		t.Fatalf("stale item: %d reads, %d writes; want 0 and 2 (one refused)", g, w)
	}
	it, ok := cache.get("a")
	cache.Remember(cas.Item{Key: "a", Value: []byte("0"), Version: v1})
	if again, _ := cache.get("a"); !ok || again.Version != it.Version || string(again.Value) != "42" {
		t.Fatalf("an older item replaced the entry: %+v", again)
	}
}

// txnCountingStore is memcas counting commits and reads (GetMany counts
// once).
type txnCountingStore struct {
	*memcas.Store
	commits, reads atomic.Int64
}

func (s *txnCountingStore) Get(ctx context.Context, key string) (cas.Item, error) {
	s.reads.Add(1)
	return s.Store.Get(ctx, key)
}

func (s *txnCountingStore) GetMany(ctx context.Context, keys []string) ([]cas.Item, error) {
	s.reads.Add(1)
	return s.Store.GetMany(ctx, keys)
}

func (s *txnCountingStore) Commit(ctx context.Context, ops []cas.Op) ([]cas.Version, error) {
	s.commits.Add(1)
	return s.Store.Commit(ctx, ops)
}

// TestCacheStepsAsideWhenStale: when another process writes the keys
// between every transaction, the cache's entries are stale every time; it
// then serves transactions only probes, so that they read instead of
// paying a refused commit each; once the other writer stops, it serves
// again.
func TestCacheStepsAsideWhenStale(t *testing.T) {
	ctx := context.Background()
	store := &txnCountingStore{Store: memcas.New()}
	cache := NewCache(store, 16)
	incrBoth := func(tx *Tx) error {
		if err := tx.Prefetch("a", "b"); err != nil {
			return err
		}
		for _, k := range []string{"a", "b"} {
			v, _, _ := tx.Get(k)
			n, _ := strconv.Atoi(string(v))
			tx.Put(k, []byte(strconv.Itoa(n+1)))
		}
		return nil
	}
	if err := Txn(ctx, store, incrBoth, WithCache(cache)); err != nil {
		t.Fatal(err)
	}
	c0 := store.commits.Load()
	for range 200 {
		if err := Txn(ctx, store.Store, incrBoth); err != nil { // the other process
			t.Fatal(err)
		}
		if err := Txn(ctx, store, incrBoth, WithCache(cache)); err != nil {
			t.Fatal(err)
		}
	}
	// Without stepping aside every transaction commits twice (the stale
	// entries' refused commit, then the retry): 400.
	if n := store.commits.Load() - c0; n > 240 {
		t.Fatalf("%d commits for 200 transactions from mostly stale entries, want the cache to step aside (about 215)", n)
	}
	// The other writer stops: the probes (one get in probeEvery) find
	// the entries fresh, and the cache serves again (no reads).
	for range 8 * probeEvery {
		if err := Txn(ctx, store, incrBoth, WithCache(cache)); err != nil {
			t.Fatal(err)
		}
	}
	r0 := store.reads.Load()
	for range 100 {
		if err := Txn(ctx, store, incrBoth, WithCache(cache)); err != nil {
			t.Fatal(err)
		}
	}
	if n := store.reads.Load() - r0; n > 10 {
		t.Fatalf("%d reads for 100 transactions once the entries hold, want the cache to serve again", n)
	}
	for _, k := range []string{"a", "b"} {
		it, _ := store.Get(ctx, k)
		if want := strconv.Itoa(501 + 8*probeEvery); string(it.Value) != want {
			t.Fatalf("%s = %s, want %s", k, it.Value, want)
		}
	}
}
