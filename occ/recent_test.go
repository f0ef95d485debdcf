package occ

import (
	"context"
	"errors"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/occkit/occkit/adapters/memcas"
	"github.com/occkit/occkit/cas"
)

// getCounter counts the reads that reach its store.
type getCounter struct {
	*bumpingStore
	gets atomic.Int64
}

func (s *getCounter) Get(ctx context.Context, key string) (cas.Item, error) {
	s.gets.Add(1)
	return s.bumpingStore.Get(ctx, key)
}

// TestRecentStateSkipsTheRead: after a key's line ends, the process's next
// Update of it starts from the state the line's last holder wrote,
// without reading, and remembers what it writes; a state overwritten
// elsewhere meanwhile costs a conflict and nothing else (the result is
// exact); past recentFor, and for a call that takes no turns, the key is
// read.
func TestRecentStateSkipsTheRead(t *testing.T) {
	unboundedHolds(t)
	forgetAllStates(t)
	ctx := context.Background()
	inner := memcas.New()
	store := &getCounter{bumpingStore: &bumpingStore{Store: inner, n: 2}}
	counter := cas.NewTyped[int](store, cas.JSON[int]())
	update := func(want int, opts ...Option) (gets int64) {
		t.Helper()
		g0 := store.gets.Load()
		n, _, err := Update(ctx, counter, "k", incrInt, opts...)
		if err != nil || n != want {
			t.Fatalf("Update: %d, %v; want %d", n, err, want)
		}
		return store.gets.Load() - g0
	}
	// Two conflicts open the key's line; the call writes and ends it.
	update(101)
	if lineFor(store, "k") != nil {
		t.Fatal("the line outlived its only call")
	}
	if gets := update(102); gets != 0 {
		t.Fatalf("the call after the line read the key %d times, want 0", gets)
	}
	if gets := update(103); gets != 0 {
		t.Fatalf("the call after a remembered write read the key %d times, want 0", gets)
	}
	// A writer elsewhere: the remembered state is stale.
	it, _ := inner.Get(ctx, "k")
	if _, err := inner.CompareAndSwap(ctx, "k", it.Version, []byte("200")); err != nil {
		t.Fatal(err)
	}
	update(201)
	if v, _, _ := counter.Get(ctx, "k"); v != 201 {
		t.Fatalf("counter %d, want 201", v)
	}
	if gets := update(202, WithTurns(false)); gets != 1 {
		t.Fatalf("a call without turns read the key %d times, want 1", gets)
	}
	time.Sleep(recentFor + 10*time.Millisecond)
	if gets := update(203); gets != 1 {
		t.Fatalf("a call past recentFor read the key %d times, want 1", gets)
	}
}

// TestRecentStateIsACopy: the state kept after a Txn's line is a copy of
// what the commit wrote, not the caller's buffer, which Put lets the
// caller reuse once Txn has returned.
func TestRecentStateIsACopy(t *testing.T) {
	unboundedHolds(t)
	ctx := context.Background()
	inner := memcas.New()
	store := &bumpingStore{Store: inner, n: 1} // the first commit conflicts
	buf := make([]byte, 0, 16)
	err := Txn(ctx, store, func(tx *Tx) error {
		v, _, err := tx.Get("k")
		if err != nil {
			return err
		}
		n, _ := strconv.Atoi(string(v))
		buf = strconv.AppendInt(buf[:0], int64(n+1), 10)
		tx.Put("k", buf)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	copy(buf[:3], "900") // the caller's buffer, reused
	counter := cas.NewTyped[int](store, cas.JSON[int]())
	if n, _, err := Update(ctx, counter, "k", incrInt); err != nil || n != 102 {
		t.Fatalf("Update after the Txn: %d, %v; want 102", n, err)
	}
}

// TestRecentStateStaleCostsNothing: a call that starts from a kept state
// written over elsewhere retries from the current state without counting
// it (a call whose next write conflicts too still has its immediate
// retry: no wait; no retry budget is drawn), and a call limited to one
// attempt does not start from a kept state at all.
func TestRecentStateStaleCostsNothing(t *testing.T) {
	unboundedHolds(t)
	ctx := context.Background()
	inner := memcas.New()
	store := &bumpingStore{Store: inner, n: 2}
	counter := cas.NewTyped[int](store, cas.JSON[int]())
	if _, _, err := Update(ctx, counter, "k", incrInt); err != nil { // a line, kept at its end
		t.Fatal(err)
	}
	overwrite := func(v string) {
		it, _ := inner.Get(ctx, "k")
		if _, err := inner.CompareAndSwap(ctx, "k", it.Version, []byte(v)); err != nil {
			t.Fatal(err)
		}
	}
	overwrite("500")
	if n, _, err := Update(ctx, counter, "k", incrInt, WithMaxAttempts(1)); err != nil || n != 501 {
		t.Fatalf("one attempt after the key was written elsewhere: %d, %v; want 501", n, err)
	}
	// Another store: a line, then a kept state made stale, and the call's
	// second write conflicting too: stale state, conflict, immediate
	// retry, no wait.
	bs := &bumpAt{bumpingStore: &bumpingStore{Store: inner, n: 2}}
	typed := cas.NewTyped[int](bs, cas.JSON[int]())
	if _, _, err := Update(ctx, typed, "k", incrInt); err != nil {
		t.Fatal(err)
	}
	overwrite("700")
	bs.at = bs.writes + 2
	var waits atomic.Int64
	n, _, err := Update(ctx, typed, "k", incrInt, WithMaxAttempts(3), withSleep(func(ctx context.Context, d time.Duration) error {
		waits.Add(1)
		return nil
	}))
	if err != nil || n != 101 {
		t.Fatalf("stale state, then a conflict: %d, %v; want 101", n, err)
	}
	if waits.Load() != 0 {
		t.Fatalf("%d backoff waits: the stale state used up the call's immediate retry", waits.Load())
	}
	// A retry budget with nothing in it: the retry after a stale state
	// draws nothing from it.
	overwrite("800")
	empty, err := NewBudget(0, 1)
	if err != nil || !empty.withdraw() {
		t.Fatalf("a budget of one token to draw: %v", err)
	}
	if n, _, err := Update(ctx, typed, "k", incrInt, WithBudget(empty)); err != nil || n != 801 {
		t.Fatalf("stale state under an empty retry budget: %d, %v; want 801", n, err)
	}
}

// bumpAt is a store whose write number at conflicts: a writer elsewhere
// writes 100 just before it.
type bumpAt struct {
	*bumpingStore
	at, writes int
}

func (s *bumpAt) CompareAndSwap(ctx context.Context, key string, expected cas.Version, value []byte) (cas.Version, error) {
	s.writes++
	if s.writes == s.at {
		s.bumpingStore.n = 1
	}
	return s.bumpingStore.CompareAndSwap(ctx, key, expected, value)
}

// TestTxnReadsRememberedStates: a Txn of keys whose turns just ended
// reads nothing from the store, and a remembered state written over
// elsewhere costs a conflict and a retry, never a wrong commit.
func TestTxnReadsRememberedStates(t *testing.T) {
	unboundedHolds(t)
	ctx := context.Background()
	inner := memcas.New()
	store := &txnCounter{Store: inner, bumps: 2}
	move := func(tx *Tx) error { // a: +1, b: -1
		if err := tx.Prefetch("a", "b"); err != nil {
			return err
		}
		for k, d := range map[string]int{"a": 1, "b": -1} {
			v, _, err := tx.Get(k)
			if err != nil {
				return err
			}
			n, _ := strconv.Atoi(string(v))
			tx.Put(k, []byte(strconv.Itoa(n+d)))
		}
		return nil
	}
	value := func(k string) string {
		it, _ := inner.Get(ctx, k)
		return string(it.Value)
	}
	// Two conflicts: the call takes the keys' turns; its commit ends them.
	// The next Txn reads nothing if it comes within recentFor; a machine
	// that stalls the test for longer (a loaded CI run) tries again.
	for try := 1; ; try++ {
		store.bumps = 2
		if err := Txn(ctx, store, move); err != nil {
			t.Fatal(err)
		}
		g0, t0 := store.gets.Load(), time.Now()
		if err := Txn(ctx, store, move); err != nil {
			t.Fatal(err)
		}
		n := store.gets.Load() - g0
		if n == 0 {
			break
		}
		if time.Since(t0) <= recentFor || try == 5 {
			t.Fatalf("the Txn after the turns read %d keys, want 0 (%v after the first, try %d)", n, time.Since(t0), try)
		}
	}
	a, b := value("a"), value("b")
	// A writer elsewhere: a's remembered state is stale.
	it, _ := inner.Get(ctx, "a")
	if _, err := inner.CompareAndSwap(ctx, "a", it.Version, []byte("500")); err != nil {
		t.Fatal(err)
	}
	if err := Txn(ctx, store, move, WithMaxAttempts(2)); err != nil {
		t.Fatalf("a Txn from a stale state: %v", err)
	}
	nb, _ := strconv.Atoi(b)
	if value("a") != "501" || value("b") != strconv.Itoa(nb-1) {
		t.Fatalf("a=%s b=%s after the stale Txn (a was %s, b %s), want a=501 b=%d", value("a"), value("b"), a, b, nb-1)
	}
}

// txnCounter is a committer whose next bumps commits conflict (a writer
// elsewhere writes b just before each), counting the keys it reads.
type txnCounter struct {
	*memcas.Store
	bumps int
	gets  atomic.Int64
}

func (s *txnCounter) Get(ctx context.Context, key string) (cas.Item, error) {
	s.gets.Add(1)
	return s.Store.Get(ctx, key)
}

func (s *txnCounter) GetMany(ctx context.Context, keys []string) ([]cas.Item, error) {
	s.gets.Add(int64(len(keys)))
	return s.Store.GetMany(ctx, keys)
}

func (s *txnCounter) Commit(ctx context.Context, ops []cas.Op) ([]cas.Version, error) {
	time.Sleep(50 * time.Microsecond) // a round trip: turns are for stores that have them
	if s.bumps > 0 {
		s.bumps--
		it, err := s.Store.Get(ctx, "b")
		if err != nil && !errors.Is(err, cas.ErrNotFound) {
			return nil, err
		}
		if _, err := s.Store.CompareAndSwap(ctx, "b", it.Version, []byte("100")); err != nil {
			return nil, err
		}
	}
	return s.Store.Commit(ctx, ops)
}

// staleStates remembers each of keys of s at a version a writer
// elsewhere then moves past.
func staleStates(t *testing.T, s cas.Store, inner *memcas.Store, keys []string) {
	t.Helper()
	ctx := context.Background()
	for _, k := range keys {
		v, err := inner.CompareAndSwap(ctx, k, 0, []byte("10"))
		if err != nil {
			t.Fatal(err)
		}
		rememberState(s, k, cas.Item{Key: k, Value: []byte("10"), Version: v}, false)
		if _, err := inner.CompareAndSwap(ctx, k, v, []byte("20")); err != nil {
			t.Fatal(err)
		}
	}
}

// keysInOwnSlots returns n keys whose remembered states take n different
// slots.
func keysInOwnSlots(n int) []string {
	var keys []string
	taken := map[*atomic.Pointer[recentState]]bool{}
	for i := 0; len(keys) < n; i++ {
		k := "k" + strconv.Itoa(i)
		if slot := recentSlot(k); !taken[slot] {
			taken[slot] = true
			keys = append(keys, k)
		}
	}
	return keys
}

func incrAll(keys []string) func(tx *Tx) error {
	return func(tx *Tx) error {
		if err := tx.Prefetch(keys...); err != nil {
			return err
		}
		for _, k := range keys {
			v, _, err := tx.Get(k)
			if err != nil {
				return err
			}
			n, _ := strconv.Atoi(string(v))
			tx.Put(k, []byte(strconv.Itoa(n+1)))
		}
		return nil
	}
}

// TestTxnStaleStatesDoNotCount: stale remembered states cost a Txn one
// attempt at most, which counts against neither its attempt limit nor
// its escalation.
func TestTxnStaleStatesDoNotCount(t *testing.T) {
	forgetAllStates(t)
	ctx := context.Background()
	// Twelve stale keys, no other writer during the call, two attempts.
	inner := memcas.New()
	keys := keysInOwnSlots(12)
	staleStates(t, inner, inner, keys)
	runs := 0
	if err := Txn(ctx, inner, func(tx *Tx) error { runs++; return incrAll(keys)(tx) }, WithMaxAttempts(2)); err != nil {
		t.Fatalf("a Txn over 12 stale remembered keys: %v (fn ran %d times)", err, runs)
	}
	if runs != 2 {
		t.Fatalf("fn ran %d times, want 2 (one stale attempt, then reads)", runs)
	}
	// A store whose plain commits always lose: with two attempts the
	// second escalates, the stale one not counting.
	r := &rivalled{Store: memcas.New()}
	staleStates(t, r, r.Store, []string{"a"})
	err := Txn(ctx, r, incrAll([]string{"a"}), WithMaxAttempts(2), withSleep(func(context.Context, time.Duration) error { return nil }))
	if err != nil || r.exclusive.Load() != 1 {
		t.Fatalf("two attempts on a rivalled key from a stale state: %v, %d exclusive commits; want success through one", err, r.exclusive.Load())
	}
}

// forgetAllStates empties the table of remembered states at the end of
// the test.
func forgetAllStates(t *testing.T) {
	t.Cleanup(func() {
		for i := range recentTable {
			if recentTable[i].p.Swap(nil) != nil {
				recentLive.Add(-1)
			}
		}
	})
}
