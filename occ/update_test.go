package occ

import (
	"context"
	"errors"
	"math"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/occkit/occkit/adapters/memcas"
	"github.com/occkit/occkit/cas"
)

// countingStore wraps a Store, counts calls per key and, with stripCurrent,
// hides the current state a conflict carries (as a backend that cannot
// return it would). It is not a cas.Committer: embedding the interface
// keeps only the Store methods.
type countingStore struct {
	cas.Store
	stripCurrent bool

	mu   sync.Mutex
	gets map[string]int
	cass map[string]int
	dels map[string]int
}

func newCountingStore(s cas.Store) *countingStore {
	return &countingStore{Store: s, gets: map[string]int{}, cass: map[string]int{}, dels: map[string]int{}}
}

func (c *countingStore) Get(ctx context.Context, key string) (cas.Item, error) {
	c.mu.Lock()
	c.gets[key]++
	c.mu.Unlock()
	return c.Store.Get(ctx, key)
}

func (c *countingStore) CompareAndSwap(ctx context.Context, key string, expected cas.Version, value []byte) (cas.Version, error) {
	c.mu.Lock()
	c.cass[key]++
	c.mu.Unlock()
	v, err := c.Store.CompareAndSwap(ctx, key, expected, value)
	return v, c.strip(err)
}

func (c *countingStore) CompareAndDelete(ctx context.Context, key string, expected cas.Version) error {
	c.mu.Lock()
	c.dels[key]++
	c.mu.Unlock()
	return c.strip(c.Store.CompareAndDelete(ctx, key, expected))
}

func (c *countingStore) strip(err error) error {
	var ce *cas.ConflictError
	if !c.stripCurrent || !errors.As(err, &ce) {
		return err
	}
	return &cas.ConflictError{Key: ce.Key, Expected: ce.Expected}
}

func (c *countingStore) count(m map[string]int, key string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return m[key]
}

func (c *countingStore) getsOf(key string) int { return c.count(c.gets, key) }
func (c *countingStore) casOf(key string) int  { return c.count(c.cass, key) }

// put creates key with value v for a test's setup (the key must be absent)
// and returns its version.
func put(t *testing.T, s cas.Store, key, v string) cas.Version {
	t.Helper()
	ver, err := s.CompareAndSwap(context.Background(), key, 0, []byte(v))
	if err != nil {
		t.Fatalf("setup: put %q: %v", key, err)
	}
	return ver
}

// value returns the raw value of key and whether it exists.
func value(t *testing.T, s cas.Store, key string) (string, cas.Version, bool) {
	t.Helper()
	it, err := s.Get(context.Background(), key)
	if errors.Is(err, cas.ErrNotFound) {
		return "", 0, false
	}
	if err != nil {
		t.Fatalf("get %q: %v", key, err)
	}
	return string(it.Value), it.Version, true
}

func incr(n int, _ bool) (int, error) { return n + 1, nil }

func TestUpdateCreatesWhenAbsent(t *testing.T) {
	mem := memcas.New()
	counters := cas.NewTyped(mem, cas.JSON[int]())
	var gotCur int
	gotExists := true
	calls := 0
	n, ver, err := Update(context.Background(), counters, "visits", func(cur int, exists bool) (int, error) {
		calls++
		gotCur, gotExists = cur, exists
		return 5, nil
	})
	if err != nil {
		t.Fatalf("Update = %v", err)
	}
	if calls != 1 || gotCur != 0 || gotExists {
		t.Errorf("mutate called %d times with (%d, %v), want once with (0, false)", calls, gotCur, gotExists)
	}
	v, storedVer, ok := value(t, mem, "visits")
	if !ok || v != "5" {
		t.Errorf("stored %q (exists %v), want \"5\"", v, ok)
	}
	if n != 5 || ver == 0 || ver != storedVer {
		t.Errorf("Update returned (%d, %d), want (5, %d)", n, ver, storedVer)
	}
}

func TestUpdateIncrementsExisting(t *testing.T) {
	mem := memcas.New()
	old := put(t, mem, "visits", "41")
	counters := cas.NewTyped(mem, cas.JSON[int]())
	var gotCur int
	var gotExists bool
	n, ver, err := Update(context.Background(), counters, "visits", func(cur int, exists bool) (int, error) {
		gotCur, gotExists = cur, exists
		return cur + 1, nil
	})
	if err != nil {
		t.Fatalf("Update = %v", err)
	}
	if gotCur != 41 || !gotExists {
		t.Errorf("mutate saw (%d, %v), want (41, true)", gotCur, gotExists)
	}
	v, storedVer, _ := value(t, mem, "visits")
	if v != "42" || n != 42 || ver != storedVer || ver <= old {
		t.Errorf("stored %q@%d, returned %d@%d; want 42 at a version above %d", v, storedVer, n, ver, old)
	}
}

func TestUpdateUsesConflictCurrent(t *testing.T) {
	tests := []struct {
		name         string
		strip        bool
		wantGets     int
		wantMutate   int
		secondCur    int
		secondExists bool
	}{
		{"conflict carries current: no extra read", false, 1, 2, 100, true},
		{"conflict without current: read again", true, 2, 2, 100, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mem := memcas.New()
			v1 := put(t, mem, "k", "1")
			cs := newCountingStore(mem)
			cs.stripCurrent = tt.strip
			typed := cas.NewTyped[int](cs, cas.JSON[int]())

			type seen struct {
				cur    int
				exists bool
			}
			var calls []seen
			n, ver, err := Update(context.Background(), typed, "k", func(cur int, exists bool) (int, error) {
				calls = append(calls, seen{cur, exists})
				if len(calls) == 1 {
					// A competing writer gets in between read and write.
					if _, err := mem.CompareAndSwap(context.Background(), "k", v1, []byte("100")); err != nil {
						t.Fatalf("competing write: %v", err)
					}
				}
				return cur + 1, nil
			}, noSleep())
			if err != nil {
				t.Fatalf("Update = %v", err)
			}
			if got := cs.getsOf("k"); got != tt.wantGets {
				t.Errorf("Get called %d times, want %d", got, tt.wantGets)
			}
			if got := cs.casOf("k"); got != 2 {
				t.Errorf("CompareAndSwap called %d times, want 2 (one conflict, one success)", got)
			}
			if len(calls) != tt.wantMutate {
				t.Fatalf("mutate called %d times, want %d", len(calls), tt.wantMutate)
			}
			if calls[0] != (seen{1, true}) || calls[1] != (seen{tt.secondCur, tt.secondExists}) {
				t.Errorf("mutate saw %+v, want [{1 true} {%d %v}]", calls, tt.secondCur, tt.secondExists)
			}
			v, storedVer, _ := value(t, mem, "k")
			if v != "101" || n != 101 || ver != storedVer {
				t.Errorf("stored %q@%d, returned %d@%d; want 101 (the competing write is not lost)", v, storedVer, n, ver)
			}
		})
	}
}

func TestUpdateConflictCurrentAbsent(t *testing.T) {
	// A competing writer deletes the key: the conflict says it is absent, so
	// the retry creates it from the zero value without reading.
	mem := memcas.New()
	v1 := put(t, mem, "k", "7")
	cs := newCountingStore(mem)
	typed := cas.NewTyped[int](cs, cas.JSON[int]())
	type seen struct {
		cur    int
		exists bool
	}
	var calls []seen
	n, _, err := Update(context.Background(), typed, "k", func(cur int, exists bool) (int, error) {
		calls = append(calls, seen{cur, exists})
		if len(calls) == 1 {
			if err := mem.CompareAndDelete(context.Background(), "k", v1); err != nil {
				t.Fatalf("competing delete: %v", err)
			}
		}
		return cur + 10, nil
	}, noSleep())
	if err != nil {
		t.Fatalf("Update = %v", err)
	}
	if !slices.Equal(calls, []seen{{7, true}, {0, false}}) {
		t.Errorf("mutate saw %+v, want [{7 true} {0 false}]", calls)
	}
	if got := cs.getsOf("k"); got != 1 {
		t.Errorf("Get called %d times, want 1", got)
	}
	if v, _, _ := value(t, mem, "k"); v != "10" || n != 10 {
		t.Errorf("stored %q, returned %d; want 10", v, n)
	}
}

func TestUpdateMutateError(t *testing.T) {
	errRefused := errors.New("stock would go negative")
	tests := []struct {
		name    string
		initial string // "" = absent
	}{
		{"key absent", ""},
		{"key present", "3"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mem := memcas.New()
			var ver0 cas.Version
			if tt.initial != "" {
				ver0 = put(t, mem, "k", tt.initial)
			}
			cs := newCountingStore(mem)
			typed := cas.NewTyped[int](cs, cas.JSON[int]())
			calls := 0
			n, ver, err := Update(context.Background(), typed, "k", func(int, bool) (int, error) {
				calls++
				return 99, errRefused
			}, noSleep())
			if err != errRefused {
				t.Fatalf("Update = %#v, want mutate's error as is", err)
			}
			if n != 0 || ver != 0 {
				t.Errorf("Update returned (%d, %d) with an error, want zero values", n, ver)
			}
			if calls != 1 {
				t.Errorf("mutate called %d times, want 1", calls)
			}
			if got := cs.casOf("k"); got != 0 {
				t.Errorf("CompareAndSwap called %d times after mutate failed, want 0", got)
			}
			v, ver1, ok := value(t, mem, "k")
			if ok != (tt.initial != "") || v != tt.initial || ver1 != ver0 {
				t.Errorf("store holds %q@%d (exists %v), want it untouched", v, ver1, ok)
			}
		})
	}
}

func TestUpdateMutateErrorRetryable(t *testing.T) {
	mem := memcas.New()
	typed := cas.NewTyped(mem, cas.JSON[int]())
	calls := 0
	n, _, err := Update(context.Background(), typed, "k", func(cur int, _ bool) (int, error) {
		calls++
		if calls == 1 {
			return 0, errTransient
		}
		return cur + 1, nil
	}, noSleep(), WithRetryable(func(err error) bool { return err == errTransient }))
	if err != nil || n != 1 || calls != 2 {
		t.Fatalf("Update = (%d, %v) after %d mutate calls, want (1, nil) after 2", n, err, calls)
	}
}

func TestUpdateCodecErrors(t *testing.T) {
	t.Run("stored value does not decode", func(t *testing.T) {
		mem := memcas.New()
		put(t, mem, "k", "{not json")
		cs := newCountingStore(mem)
		typed := cas.NewTyped[int](cs, cas.JSON[int]())
		calls := 0
		_, _, err := Update(context.Background(), typed, "k", func(n int, _ bool) (int, error) {
			calls++
			return n + 1, nil
		}, noSleep(), WithMaxAttempts(5))
		var ce *cas.CodecError
		if !errors.As(err, &ce) || !ce.Decode || ce.Key != "k" {
			t.Fatalf("Update = %v (%T), want a decode *cas.CodecError for key k", err, err)
		}
		var gu *GiveUpError
		if errors.As(err, &gu) {
			t.Errorf("decode error wrapped in a GiveUpError: it was treated as retryable")
		}
		if calls != 0 {
			t.Errorf("mutate called %d times, want 0", calls)
		}
		if got := cs.getsOf("k"); got != 1 {
			t.Errorf("Get called %d times, want 1 (a decode error is not retried)", got)
		}
		if v, _, _ := value(t, mem, "k"); v != "{not json" {
			t.Errorf("stored value changed to %q", v)
		}
	})

	t.Run("conflict current does not decode", func(t *testing.T) {
		mem := memcas.New()
		v1 := put(t, mem, "k", "1")
		cs := newCountingStore(mem)
		typed := cas.NewTyped[int](cs, cas.JSON[int]())
		calls := 0
		_, _, err := Update(context.Background(), typed, "k", func(n int, _ bool) (int, error) {
			calls++
			if calls == 1 {
				if _, err := mem.CompareAndSwap(context.Background(), "k", v1, []byte("garbage")); err != nil {
					t.Fatalf("competing write: %v", err)
				}
			}
			return n + 1, nil
		}, noSleep(), WithMaxAttempts(5))
		var ce *cas.CodecError
		if !errors.As(err, &ce) || !ce.Decode {
			t.Fatalf("Update = %v, want a decode *cas.CodecError", err)
		}
		if calls != 1 {
			t.Errorf("mutate called %d times, want 1", calls)
		}
		if got := cs.casOf("k"); got != 1 {
			t.Errorf("CompareAndSwap called %d times, want 1", got)
		}
	})

	t.Run("new value does not encode", func(t *testing.T) {
		mem := memcas.New()
		cs := newCountingStore(mem)
		typed := cas.NewTyped[float64](cs, cas.JSON[float64]())
		calls := 0
		_, _, err := Update(context.Background(), typed, "k", func(float64, bool) (float64, error) {
			calls++
			return math.Inf(1), nil // encoding/json refuses infinities
		}, noSleep(), WithMaxAttempts(5))
		var ce *cas.CodecError
		if !errors.As(err, &ce) || ce.Decode {
			t.Fatalf("Update = %v, want an encode *cas.CodecError", err)
		}
		if calls != 1 {
			t.Errorf("mutate called %d times, want 1", calls)
		}
		if _, _, ok := value(t, mem, "k"); ok {
			t.Errorf("key written although the value did not encode")
		}
	})
}

func TestUpdateStoreErrorNotRetried(t *testing.T) {
	typed := cas.NewTyped[int](memcas.New(), cas.JSON[int]())
	calls := 0
	_, _, err := Update(context.Background(), typed, "", func(n int, _ bool) (int, error) {
		calls++
		return n, nil
	}, noSleep())
	if !errors.Is(err, cas.ErrInvalidKey) {
		t.Fatalf("Update with an empty key = %v, want cas.ErrInvalidKey", err)
	}
	if calls != 0 {
		t.Errorf("mutate called %d times, want 0", calls)
	}
}

func TestUpdateGivesUp(t *testing.T) {
	mem := memcas.New()
	put(t, mem, "k", "0")
	typed := cas.NewTyped[int](mem, cas.JSON[int]())
	calls := 0
	n, ver, err := Update(context.Background(), typed, "k", func(cur int, _ bool) (int, error) {
		calls++
		// Someone else always writes first.
		it, err := mem.Get(context.Background(), "k")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := mem.CompareAndSwap(context.Background(), "k", it.Version, []byte("1000")); err != nil {
			t.Fatal(err)
		}
		return cur + 1, nil
	}, noSleep(), WithMaxAttempts(4))
	var gu *GiveUpError
	if !errors.As(err, &gu) || gu.Attempts != 4 || !errors.Is(err, ErrAttemptsExhausted) || !errors.Is(err, cas.ErrConflict) {
		t.Fatalf("Update = %v, want *GiveUpError after 4 attempts matching ErrAttemptsExhausted and cas.ErrConflict", err)
	}
	var ce *cas.ConflictError
	if !errors.As(err, &ce) || ce.Key != "k" {
		t.Errorf("last conflict not reachable: %v", err)
	}
	if calls != 4 {
		t.Errorf("mutate called %d times, want 4", calls)
	}
	if n != 0 || ver != 0 {
		t.Errorf("Update returned (%d, %d) with an error, want zero values", n, ver)
	}
}

func TestUpdateContextCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	mem := memcas.New()
	typed := cas.NewTyped[int](mem, cas.JSON[int]())
	calls := 0
	_, _, err := Update(ctx, typed, "k", func(n int, _ bool) (int, error) {
		calls++
		return n + 1, nil
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Update = %v, want context.Canceled", err)
	}
	if calls != 0 {
		t.Errorf("mutate called %d times, want 0", calls)
	}
	if _, _, ok := value(t, mem, "k"); ok {
		t.Error("key written with a cancelled context")
	}
}

func TestUpdateObserver(t *testing.T) {
	mem := memcas.New()
	v1 := put(t, mem, "acct/1", "1")
	typed := cas.NewTyped[int](mem, cas.JSON[int]())
	obs := &recordingObserver{t: t}
	calls := 0
	_, _, err := Update(context.Background(), typed, "acct/1", func(cur int, _ bool) (int, error) {
		calls++
		if calls == 1 {
			if _, err := mem.CompareAndSwap(context.Background(), "acct/1", v1, []byte("2")); err != nil {
				t.Fatal(err)
			}
		}
		return cur + 1, nil
	}, noSleep(), WithObserver(obs))
	if err != nil {
		t.Fatal(err)
	}
	want := []Outcome{OutcomeConflict, OutcomeSuccess}
	if len(obs.attempts) != len(want) {
		t.Fatalf("observer saw %d attempts, want %d", len(obs.attempts), len(want))
	}
	for i, a := range obs.attempts {
		if a.Op != "update" || a.Key != "acct/1" || a.Number != i+1 || a.Outcome != want[i] {
			t.Errorf("attempt %d = {Op %q Key %q Number %d Outcome %v}, want {update acct/1 %d %v}", i, a.Op, a.Key, a.Number, a.Outcome, i+1, want[i])
		}
	}
	if len(obs.calls) != 1 || obs.calls[0].Op != "update" || obs.calls[0].Key != "acct/1" || obs.calls[0].Attempts != 2 || obs.calls[0].Outcome != OutcomeSuccess {
		t.Errorf("calls = %+v, want one {update acct/1 2 attempts success}", obs.calls)
	}
}

func TestUpdatePanicAndGoroutine(t *testing.T) {
	caller := goroutineID(t)
	typed := cas.NewTyped[int](memcas.New(), cas.JSON[int]())
	want := errors.New("panic value")
	var ran uint64
	returned := false
	func() {
		defer func() {
			if got := recover(); got != want {
				t.Errorf("recovered %v, want mutate's panic value", got)
			}
		}()
		_, _, _ = Update(context.Background(), typed, "k", func(int, bool) (int, error) {
			ran = goroutineID(t)
			panic(want)
		})
		returned = true
	}()
	if returned {
		t.Error("Update returned normally after mutate panicked")
	}
	if ran != caller {
		t.Errorf("mutate ran on goroutine %d, want the caller's %d", ran, caller)
	}
}

func TestUpdateConcurrentIncrements(t *testing.T) {
	const (
		workers = 8
		perW    = 200
	)
	// A broken Update could conflict forever and back off up to 1000 times
	// per call: the deadline turns that into failures, not a hang.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	mem := memcas.New()
	counters := cas.NewTyped(mem, cas.JSON[int]())
	var (
		wg        sync.WaitGroup
		mu        sync.Mutex
		successes int
		written   []int
		failures  []error
	)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range perW {
				if ctx.Err() != nil {
					return
				}
				n, ver, err := Update(ctx, counters, "counter", incr, WithMaxAttempts(1000))
				mu.Lock()
				if err != nil {
					failures = append(failures, err)
				} else {
					successes++
					written = append(written, n)
					if ver == 0 {
						failures = append(failures, errors.New("success with version 0"))
					}
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	for _, err := range failures[:min(len(failures), 5)] {
		t.Errorf("update failed: %v", err)
	}
	if successes == 0 {
		t.Fatal("no update succeeded")
	}
	final, _, err := counters.Get(context.Background(), "counter")
	if err != nil {
		t.Fatal(err)
	}
	if final != successes {
		t.Errorf("counter = %d, want %d (the number of successful updates): updates lost or applied twice", final, successes)
	}
	// Every successful update wrote a distinct value: exactly 1..successes.
	slices.Sort(written)
	for i, n := range written {
		if n != i+1 {
			t.Fatalf("written values are not 1..%d: position %d holds %d", successes, i, n)
		}
	}
}
