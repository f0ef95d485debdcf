package castest

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/occ"
)

var errExclusiveFn = errors.New("castest: fn's own error")

var exclusiveTests = []test{
	{"Semantics", func(t *testing.T, h *Harness, s cas.Store) {
		ex := capability[cas.Exclusive](t, s)
		ctx := context.Background()
		// An absent key: fn sees version 0; its value is created.
		v1, err := ex.UpdateExclusive(ctx, "k", func(cur cas.Item) ([]byte, bool, error) {
			if cur.Version != 0 || len(cur.Value) != 0 {
				t.Errorf("absent key seen as %+v", cur)
			}
			return []byte("one"), true, nil
		})
		if err != nil || v1 == 0 {
			t.Fatalf("create: %d, %v", v1, err)
		}
		wantItem(t, h, s, "k", "one", v1)
		v2, err := ex.UpdateExclusive(ctx, "k", func(cur cas.Item) ([]byte, bool, error) {
			if cur.Version != v1 || string(cur.Value) != "one" {
				t.Errorf("fn saw %+v, want %q at %d", cur, "one", v1)
			}
			return []byte("two"), true, nil
		})
		if err != nil || v2 <= v1 {
			t.Fatalf("update: %d, %v; want a version above %d", v2, err, v1)
		}
		wantItem(t, h, s, "k", "two", v2)
		// fn's error: returned as is, nothing written.
		if _, err := ex.UpdateExclusive(ctx, "k", func(cas.Item) ([]byte, bool, error) {
			return []byte("three"), true, errExclusiveFn
		}); err != errExclusiveFn {
			t.Fatalf("fn's error came back as %v", err)
		}
		// write == false: nothing written, the version read returned.
		if v, err := ex.UpdateExclusive(ctx, "k", func(cas.Item) ([]byte, bool, error) {
			return []byte("four"), false, nil
		}); err != nil || v != v2 {
			t.Fatalf("no write: %d, %v; want %d", v, err, v2)
		}
		wantItem(t, h, s, "k", "two", v2)
		// A deleted key is absent again, at a version above its last.
		if err := s.CompareAndDelete(ctx, "k", v2); err != nil {
			t.Fatal(err)
		}
		v3, err := ex.UpdateExclusive(ctx, "k", func(cur cas.Item) ([]byte, bool, error) {
			if cur.Version != 0 {
				t.Errorf("a deleted key seen as %+v", cur)
			}
			return []byte("again"), true, nil
		})
		if err != nil || v3 <= v2 {
			t.Fatalf("re-create: %d, %v; want a version above %d", v3, err, v2)
		}
		// Bad input is refused before anything is held.
		if _, err := ex.UpdateExclusive(ctx, "", func(cas.Item) ([]byte, bool, error) {
			t.Error("fn ran for an empty key")
			return nil, false, nil
		}); !errors.Is(err, cas.ErrInvalidKey) {
			t.Fatalf("empty key: %v, want cas.ErrInvalidKey", err)
		}
		if _, err := ex.UpdateExclusive(ctx, "k", func(cas.Item) ([]byte, bool, error) {
			return make([]byte, h.Limits.MaxValueBytes+1), true, nil
		}); !errors.Is(err, cas.ErrTooLarge) {
			t.Fatalf("oversized value: %v, want cas.ErrTooLarge", err)
		}
		wantItem(t, h, s, "k", "again", v3)
	}},
	{"HoldsTheKey", func(t *testing.T, h *Harness, s cas.Store) {
		// A write of the key while fn runs cannot get in between the
		// exclusive read and write: it waits or fails, and never
		// succeeds at the version fn saw.
		ex := capability[cas.Exclusive](t, s)
		ctx := context.Background()
		v0 := mustCreate(t, s, "k", "0")
		inFn := make(chan struct{})
		release := make(chan struct{})
		type res struct {
			v   cas.Version
			err error
		}
		rival := make(chan res, 1)
		done := make(chan res, 1)
		go func() {
			v, err := ex.UpdateExclusive(ctx, "k", func(cur cas.Item) ([]byte, bool, error) {
				close(inFn)
				<-release
				return []byte("held"), true, nil
			})
			done <- res{v, err}
		}()
		<-inFn
		go func() {
			v, err := s.CompareAndSwap(ctx, "k", v0, []byte("rival"))
			rival <- res{v, err}
		}()
		var r res
		early := false
		select {
		case r = <-rival: // refused at once (a store that refuses rather than waits)
			early = true
			if r.err == nil {
				close(release)
				t.Fatalf("a write at version %d succeeded while the key was held", v0)
			}
		case <-time.After(50 * time.Millisecond): // waiting (a row lock)
		}
		close(release)
		d := <-done
		if d.err != nil {
			t.Fatalf("exclusive update: %v", d.err)
		}
		if !early {
			r = <-rival
		}
		if r.err == nil || !errors.Is(r.err, cas.ErrConflict) {
			t.Fatalf("the rival write at version %d: %d, %v; want a conflict", v0, r.v, r.err)
		}
		wantItem(t, h, s, "k", "held", d.v)
	}},
	{"HolderPausedPastItsBound", testHolderPaused},
	{"PanicInFnReleases", func(t *testing.T, h *Harness, s cas.Store) {
		// A panic in fn ends the hold at once: a write of the key goes
		// through well within the hold's bound (2 s by default on every
		// adapter), not after it expires.
		ex := capability[cas.Exclusive](t, s)
		ctx := context.Background()
		v := mustCreate(t, s, "k", "1")
		mustPanic(t, func() {
			_, _ = ex.UpdateExclusive(ctx, "k", func(cas.Item) ([]byte, bool, error) { panic("castest: fn panics") })
		})
		writableAfterPanic(t, s, "k", v, time.Second)
	}},
	{"EscalatedIncrementsAcrossStores", func(t *testing.T, h *Harness, s cas.Store) {
		// Several stores of one backend stand for several processes:
		// their calls take no turns with each other's. Every call
		// succeeds at the default options and the counter is exact.
		capability[cas.Exclusive](t, s)
		stores := processes(t, h, s, 4)
		ctx := context.Background()
		var failed atomic.Int64
		per := h.opsPerWorker() / 2
		h.runWorkers(func(i int) {
			typed := cas.NewTyped(stores[i%len(stores)], cas.JSON[int]())
			for range per {
				if _, _, err := occ.Update(ctx, typed, "n", func(n int, _ bool) (int, error) { return n + 1, nil }); err != nil {
					if failed.Add(1) == 1 {
						t.Errorf("Update: %v", err)
					}
				}
			}
		})
		want := h.workers() * per
		wantLatest(t, h, s, "n", strconv.Itoa(want-int(failed.Load())))
		if failed.Load() > 0 {
			t.Fatalf("%d of %d updates failed", failed.Load(), want)
		}
	}},
}

// mustPanic calls f, an exclusive call whose fn panics, and fails t
// unless the panic reaches the caller.
func mustPanic(t *testing.T, f func()) {
	t.Helper()
	defer func() {
		if recover() == nil {
			t.Error("fn's panic did not reach the caller")
		}
	}()
	f()
}

// writableAfterPanic checks that key, at version v, takes a write within
// d after an exclusive call's fn panicked: the call left no hold on it.
func writableAfterPanic(t *testing.T, s cas.Store, key string, v cas.Version, d time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	if _, err := s.CompareAndSwap(ctx, key, v, []byte("2")); err != nil {
		t.Fatalf("a write after fn panicked: %v (the key is still held)", err)
	}
}

// testHolderPaused is the fault of a process pause: the holder of an
// exclusive update stops between its read and its write for five times
// its hold's bound. The others (another store of the same keys, as
// another process) wait only that long, then proceed; the holder's late
// write is refused as a conflict; every increment of the others counts,
// none twice.
func testHolderPaused(t *testing.T, h *Harness, s cas.Store) {
	capability[cas.Exclusive](t, s)
	if h.ShortHold == nil {
		t.Skip("skipped: Harness.ShortHold is not set")
	}
	short, bound := h.ShortHold(t, s)
	ex := capability[cas.Exclusive](t, short)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	mustCreate(t, s, "n", "100")
	others := cas.NewTyped(s, cas.JSON[int]())
	firstDone, holderErr := HolderPaused(t, bound, func(pause func()) error {
		_, err := ex.UpdateExclusive(ctx, "n", func(cas.Item) ([]byte, bool, error) {
			pause()
			return []byte("1000"), true, nil
		})
		return err
	}, func() error {
		_, _, err := occ.Update(ctx, others, "n", func(n int, _ bool) (int, error) { return n + 1, nil })
		return err
	})
	if !errors.Is(holderErr, cas.ErrConflict) {
		t.Fatalf("the paused holder's write: %v, want a conflict (its hold ended, nothing written)", holderErr)
	}
	wantLatest(t, h, s, "n", "120")
	if firstDone >= 5*bound {
		t.Fatalf("the others waited %v, until the holder resumed: the hold's bound (%v) freed nothing", firstDone, bound)
	}
	t.Logf("the others' first increment after %v (bound %v, pause %v)", firstDone, bound, 5*bound)
}

// HolderPaused plays the pause of the holder of an exclusive update, for
// the pause tests of adapters whose exclusive calls castest does not
// reach (a Table's ExclusiveModify), as testHolderPaused does for
// cas.Exclusive. hold runs the holder's update, and calls pause from
// inside its function: pause returns after five times bound. Once the
// holder is paused, four others (another store or table of the same
// keys) run increment five times each, at once; a failed increment is
// reported with t.Errorf and ends its worker. HolderPaused returns, once
// all have returned, how long after the pause began the others' first
// increment ended (0: none did), and hold's error.
func HolderPaused(t *testing.T, bound time.Duration, hold func(pause func()) error, increment func() error) (firstDone time.Duration, holderErr error) {
	t.Helper()
	held := make(chan struct{})
	paused := make(chan error, 1)
	go func() {
		paused <- hold(func() {
			close(held)
			time.Sleep(5 * bound)
		})
	}()
	select {
	case <-held:
	case err := <-paused:
		// hold ended without pausing (its exclusive call failed first):
		// nothing to run the others against.
		t.Fatalf("the holder ended before it held the key: %v", err)
	}
	start := time.Now()
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 5 {
				if err := increment(); err != nil {
					t.Errorf("an increment of the others: %v", err)
					return
				}
				mu.Lock()
				if firstDone == 0 {
					firstDone = time.Since(start)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return firstDone, <-paused
}
