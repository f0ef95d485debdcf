package castest

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"sync"
	"testing"

	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/occ"
)

// mustAdd adds n to k within b and checks the answer against a Get.
func mustAdd(t *testing.T, h *Harness, a cas.Adder, k string, n int64, b cas.Bounds, want int64) cas.Version {
	t.Helper()
	got, ver, err := a.Add(context.Background(), k, n, b)
	if err != nil {
		t.Fatalf("add %d to %q within %s: %v", n, k, b, err)
	}
	if got != want || ver == 0 {
		t.Fatalf("add %d to %q = %d at version %d, want %d at a version > 0", n, k, got, ver, want)
	}
	wantItem(t, h, a, k, strconv.FormatInt(want, 10), ver)
	return ver
}

// wantBound checks that err is a *cas.BoundError for k holding cur.
func wantBound(t *testing.T, err error, k string, n int64, cur int64) {
	t.Helper()
	if !errors.Is(err, cas.ErrBound) {
		t.Fatalf("add %d to %q: err = %v, want ErrBound", n, k, err)
	}
	var be *cas.BoundError
	if !errors.As(err, &be) {
		t.Fatalf("err = %T %v, want a *cas.BoundError", err, err)
	}
	if be.Key != k || be.Add != n {
		t.Fatalf("bound error names key %q add %d, want %q %d", be.Key, be.Add, k, n)
	}
	if be.HasCurrent && be.Current != cur {
		t.Fatalf("bound error's current value = %d, want %d", be.Current, cur)
	}
}

var deltaTests = []test{
	{"CreatesAndAdds", func(t *testing.T, h *Harness, s cas.Store) {
		a := capability[cas.Adder](t, s)
		v1 := mustAdd(t, h, a, "stock", 5, cas.Bounds{}, 5)
		v2 := mustAdd(t, h, a, "stock", -2, cas.AtLeast(0), 3)
		if v2 <= v1 {
			t.Fatalf("versions %d then %d: a delta must advance the version", v1, v2)
		}
		// An int64 codec reads what a delta wrote.
		h.settle(t, func() error {
			n, ver, err := cas.NewTyped(s, cas.JSON[int64]()).Get(context.Background(), "stock")
			switch {
			case err == nil && n == 3 && ver == v2:
				return nil
			case (err == nil && ver < v2) || errors.Is(err, cas.ErrNotFound):
				return fmt.Errorf("JSON[int64] reads %d at %d (%v), want 3 at %d", n, ver, err, v2)
			}
			return wrong("JSON[int64] reads %d at %d (%v), want 3 at %d", n, ver, err, v2)
		})
	}},
	{"BoundRefusedWritesNothing", func(t *testing.T, h *Harness, s cas.Store) {
		a := capability[cas.Adder](t, s)
		ctx := context.Background()
		ver := mustAdd(t, h, a, "stock", 3, cas.AtLeast(0), 3)
		_, _, err := a.Add(ctx, "stock", -4, cas.AtLeast(0))
		wantBound(t, err, "stock", -4, 3)
		_, _, err = a.Add(ctx, "stock", 8, cas.AtMost(10))
		wantBound(t, err, "stock", 8, 3)
		_, _, err = a.Add(ctx, "stock", 1, cas.Between(-5, 3))
		wantBound(t, err, "stock", 1, 3)
		wantItem(t, h, s, "stock", "3", ver)
		ver = mustAdd(t, h, a, "stock", -3, cas.AtLeast(0), 0) // exactly on the bound
		mustAdd(t, h, a, "stock", 7, cas.AtMost(7), 7)
		mustAdd(t, h, a, "stock", -9, cas.Between(-2, 7), -2)
		_ = ver
		// An absent key counts as 0: a delta its bounds refuse creates
		// nothing.
		_, _, err = a.Add(ctx, "sold-out", -1, cas.AtLeast(0))
		wantBound(t, err, "sold-out", -1, 0)
		wantAbsent(t, h, s, "sold-out")
	}},
	{"Overflow", func(t *testing.T, h *Harness, s cas.Store) {
		a := capability[cas.Adder](t, s)
		ctx := context.Background()
		top := mustCreate(t, s, "top", strconv.FormatInt(math.MaxInt64, 10))
		_, _, err := a.Add(ctx, "top", 1, cas.Bounds{})
		wantBound(t, err, "top", 1, math.MaxInt64)
		bottom := mustCreate(t, s, "bottom", strconv.FormatInt(math.MinInt64, 10))
		_, _, err = a.Add(ctx, "bottom", -1, cas.Bounds{})
		wantBound(t, err, "bottom", -1, math.MinInt64)
		_, _, err = a.Add(ctx, "bottom", math.MinInt64, cas.Bounds{})
		wantBound(t, err, "bottom", math.MinInt64, math.MinInt64)
		// A result below a bound near the top of the range.
		_, _, err = a.Add(ctx, "top", -5, cas.Between(math.MaxInt64-1, math.MaxInt64))
		wantBound(t, err, "top", -5, math.MaxInt64)
		wantItem(t, h, s, "top", strconv.FormatInt(math.MaxInt64, 10), top)
		wantItem(t, h, s, "bottom", strconv.FormatInt(math.MinInt64, 10), bottom)
		mustAdd(t, h, a, "top", math.MinInt64, cas.Bounds{}, -1)
		mustAdd(t, h, a, "bottom", math.MaxInt64, cas.Bounds{}, -1)
	}},
	{"MixedWithCompareAndSwap", func(t *testing.T, h *Harness, s cas.Store) {
		a := capability[cas.Adder](t, s)
		ctx := context.Background()
		v1 := mustCreate(t, s, "n", "10")
		v2 := mustAdd(t, h, a, "n", 1, cas.Bounds{}, 11)
		// A write that read the key before the delta must conflict.
		_, err := s.CompareAndSwap(ctx, "n", v1, []byte("100"))
		wantConflict(t, h, err, "n", v1, v2, "11")
		v3 := mustSwap(t, s, "n", v2, "20")
		v4 := mustAdd(t, h, a, "n", 1, cas.Bounds{}, 21)
		if v4 <= v3 {
			t.Fatalf("versions %d then %d", v3, v4)
		}
		// A deleted key counts as 0 again, and its version keeps growing.
		if err := s.CompareAndDelete(ctx, "n", v4); err != nil {
			t.Fatal(err)
		}
		if v5 := mustAdd(t, h, a, "n", 2, cas.Bounds{}, 2); v5 <= v4 {
			t.Fatalf("delta after delete made version %d, not above %d", v5, v4)
		}
	}},
	{"NotInteger", func(t *testing.T, h *Harness, s cas.Store) {
		a := capability[cas.Adder](t, s)
		for i, v := range []string{"abc", "1.5", "007", "-0", "", `"5"`, "1e3", "99999999999999999999", " 5", "+5", "5 ", "\xff5", "9223372036854775808"} {
			k := "bad" + strconv.Itoa(i)
			ver := mustCreate(t, s, k, v)
			_, _, err := a.Add(context.Background(), k, 1, cas.Bounds{})
			if !errors.Is(err, cas.ErrNotInteger) {
				t.Fatalf("add to %q holding %q: err = %v, want ErrNotInteger", k, v, err)
			}
			wantItem(t, h, s, k, v, ver)
		}
	}},
	{"Input", func(t *testing.T, h *Harness, s cas.Store) {
		a := capability[cas.Adder](t, s)
		//lint:ignore SA1012 the nil context is the input under test
		if _, _, err := a.Add(nil, "k", 1, cas.Bounds{}); !errors.Is(err, cas.ErrNilContext) { //nolint:staticcheck
			t.Fatalf("nil context: %v", err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if _, _, err := a.Add(ctx, "k", 1, cas.Bounds{}); !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled context: %v", err)
		}
		if _, _, err := a.Add(context.Background(), "", 1, cas.Bounds{}); !errors.Is(err, cas.ErrInvalidKey) {
			t.Fatalf("empty key: %v", err)
		}
		wantAbsent(t, h, s, "k")
	}},
	{"ConcurrentExact", testDeltaConcurrent},
	{"ConcurrentStockNeverNegative", testDeltaStock},
	{"ConcurrentMixedWithUpdates", testDeltaMixed},
	{"OccAddStock", testOccAddStock},
}

// testOccAddStock sells more than the stock through occ.Add, which uses
// the store's deltas or, on a store without them, a version loop: exactly
// the stock is sold on either path, and the value ends at 0.
func testOccAddStock(t *testing.T, h *Harness, s cas.Store) {
	ctx := context.Background()
	stock := int64(h.workers() * h.opsPerWorker() / 2)
	if _, _, err := occ.Add(ctx, s, "stock", stock, cas.Bounds{}); err != nil {
		t.Fatal(err)
	}
	sellOut(t, h, s, stock, func() (int64, error) {
		left, _, err := occ.Add(ctx, s, "stock", -1, cas.AtLeast(0), occ.WithMaxAttempts(1000))
		return left, err
	})
}

// testDeltaConcurrent runs workers adding 1 to one key: every delta
// succeeds, the value ends at their number, and each returned value is
// returned once (each delta saw the one before it).
func testDeltaConcurrent(t *testing.T, h *Harness, s cas.Store) {
	a := capability[cas.Adder](t, s)
	total := h.workers() * h.opsPerWorker()
	seen := make([]int64, 0, total)
	var mu sync.Mutex
	h.runWorkers(func(int) {
		for range h.opsPerWorker() {
			n, _, err := a.Add(context.Background(), "hits", 1, cas.Bounds{})
			if err != nil {
				t.Errorf("add: %v", err)
				return
			}
			mu.Lock()
			seen = append(seen, n)
			mu.Unlock()
		}
	})
	if t.Failed() {
		return
	}
	sort.Slice(seen, func(i, j int) bool { return seen[i] < seen[j] })
	for i, n := range seen {
		if n != int64(i+1) {
			t.Fatalf("the deltas returned %d where %d was due: two deltas saw the same value", n, i+1)
		}
	}
	wantValue(t, h, s, "hits", int64(total))
}

// testDeltaStock runs more decrements bounded at 0 than there is stock:
// exactly the stock is sold, the rest fail with ErrBound, and the value
// ends at 0, never below.
func testDeltaStock(t *testing.T, h *Harness, s cas.Store) {
	a := capability[cas.Adder](t, s)
	stock := int64(h.workers() * h.opsPerWorker() / 3)
	mustAdd(t, h, a, "stock", stock, cas.Bounds{}, stock)
	sellOut(t, h, s, stock, func() (int64, error) {
		left, _, err := a.Add(context.Background(), "stock", -1, cas.AtLeast(0))
		return left, err
	})
}

// sellOut runs the harness's workers selling one item each time with
// sell, more often than there is stock: exactly stock sales succeed, none
// leaves a negative stock, the others fail with ErrBound, and "stock"
// ends at 0.
func sellOut(t *testing.T, h *Harness, s cas.Store, stock int64, sell func() (left int64, err error)) {
	t.Helper()
	total := h.workers() * h.opsPerWorker()
	var mu sync.Mutex
	var sold, refused int64
	h.runWorkers(func(int) {
		for range h.opsPerWorker() {
			left, err := sell()
			mu.Lock()
			switch {
			case err == nil && left >= 0:
				sold++
			case errors.Is(err, cas.ErrBound):
				refused++
			case err == nil:
				t.Errorf("a bounded delta left %d", left)
			default:
				t.Errorf("add: %v", err)
			}
			mu.Unlock()
		}
	})
	if sold != stock || sold+refused != int64(total) {
		t.Fatalf("sold %d and refused %d of %d with %d in stock", sold, refused, total, stock)
	}
	wantValue(t, h, s, "stock", 0)
}

// testDeltaMixed mixes deltas with read-modify-write increments
// (CompareAndSwap, retried on conflict) on one key: none is lost.
func testDeltaMixed(t *testing.T, h *Harness, s cas.Store) {
	a := capability[cas.Adder](t, s)
	ctx := context.Background()
	total := h.workers() * h.opsPerWorker()
	h.runWorkers(func(w int) {
		for range h.opsPerWorker() {
			if w%2 == 0 {
				if _, _, err := a.Add(ctx, "mixed", 1, cas.Bounds{}); err != nil {
					t.Errorf("add: %v", err)
					return
				}
				continue
			}
			for {
				var n int64
				it, err := s.Get(ctx, "mixed")
				switch {
				case errors.Is(err, cas.ErrNotFound):
				case err != nil:
					t.Errorf("get: %v", err)
					return
				default:
					if n, err = cas.ParseInt("mixed", it.Value); err != nil {
						t.Error(err)
						return
					}
				}
				_, err = s.CompareAndSwap(ctx, "mixed", it.Version, cas.FormatInt(n+1))
				if err == nil {
					break
				}
				if !errors.Is(err, cas.ErrConflict) {
					t.Errorf("compare-and-swap: %v", err)
					return
				}
			}
		}
	})
	wantValue(t, h, s, "mixed", int64(total))
}

// wantValue checks that k holds the integer want (with StaleReads,
// reading again while it holds another).
func wantValue(t *testing.T, h *Harness, s cas.Store, k string, want int64) {
	t.Helper()
	h.settle(t, func() error {
		it, err := s.Get(context.Background(), k)
		switch {
		case errors.Is(err, cas.ErrNotFound):
			return fmt.Errorf("get %q: %w, want %d", k, err, want)
		case err != nil:
			return wrong("get %q: %w", k, err)
		}
		got, err := cas.ParseInt(k, it.Value)
		switch {
		case err != nil:
			return wrong("%q holds %q (%v), want %d", k, it.Value, err, want)
		case got != want:
			return fmt.Errorf("%q holds %d, want %d", k, got, want)
		}
		return nil
	})
}
