package castest

import (
	"context"
	"errors"
	"math/rand/v2"
	"strconv"
	"sync"
	"testing"

	"github.com/occkit/occkit/cas"
)

// addManyTests check cas.ManyAdder: independent outcomes in order, and
// exact sums when batches of overlapping keys run at once.
var addManyTests = []test{
	{"Outcomes", func(t *testing.T, h *Harness, s cas.Store) {
		a := capability[cas.ManyAdder](t, s)
		ctx := context.Background()
		mustAdd(t, h, a, "stock", 2, cas.Bounds{}, 2)
		mustCreate(t, s, "text", "abc")
		long := string(make([]byte, h.Limits.MaxKeyBytes+1))
		res := a.AddMany(ctx, []cas.Delta{
			{Key: "new", N: 5}, // absent: created
			{Key: "stock", N: -3, Bounds: cas.AtLeast(0)},  // refused: 2 left
			{Key: "text", N: 1},                            // not an integer
			{Key: long, N: 1},                              // an invalid key
			{Key: "stock2", N: -1, Bounds: cas.AtLeast(0)}, // absent and refused
		})
		if len(res) != 5 {
			t.Fatalf("AddMany returned %d results for 5 deltas", len(res))
		}
		if r := res[0]; r.Err != nil || r.Value != 5 || r.Version == 0 {
			t.Fatalf("the absent key's delta: %+v, want 5 at a version > 0", r)
		} else {
			wantItem(t, h, s, "new", "5", r.Version)
		}
		wantBound(t, res[1].Err, "stock", -3, 2)
		wantValue(t, h, s, "stock", 2)
		if !errors.Is(res[2].Err, cas.ErrNotInteger) {
			t.Fatalf("the delta of a text: %v, want ErrNotInteger", res[2].Err)
		}
		wantLatest(t, h, s, "text", "abc")
		if !errors.Is(res[3].Err, cas.ErrInvalidKey) {
			t.Fatalf("the delta of a key over the limit: %v, want ErrInvalidKey", res[3].Err)
		}
		wantBound(t, res[4].Err, "stock2", -1, 0)
		wantAbsent(t, h, s, "stock2")
	}},
	{"MatchesGet", func(t *testing.T, h *Harness, s cas.Store) {
		// Each applied delta's value and version are the key's.
		a := capability[cas.ManyAdder](t, s)
		var ds []cas.Delta
		for i := range 12 { // more than a store may send in one statement
			k := "k" + strconv.Itoa(i)
			mustAdd(t, h, a, k, int64(i), cas.Bounds{}, int64(i))
			ds = append(ds, cas.Delta{Key: k, N: 10})
		}
		for i, r := range a.AddMany(context.Background(), ds) {
			if r.Err != nil || r.Value != int64(i+10) {
				t.Fatalf("delta %d: %+v, want %d", i, r, i+10)
			}
			wantItem(t, h, s, ds[i].Key, strconv.Itoa(i+10), r.Version)
		}
	}},
	{"Input", func(t *testing.T, h *Harness, s cas.Store) {
		a := capability[cas.ManyAdder](t, s)
		if res := a.AddMany(context.Background(), nil); len(res) != 0 {
			t.Fatalf("AddMany of no deltas: %v", res)
		}
		for _, r := range a.AddMany(context.Background(), []cas.Delta{{Key: "a", N: 1}, {Key: "b", N: 1}, {Key: "a", N: 2}}) {
			if !errors.Is(r.Err, cas.ErrInvalidKey) {
				t.Fatalf("a key twice: %v, want ErrInvalidKey for every delta", r.Err)
			}
		}
		wantAbsent(t, h, s, "a")
		wantAbsent(t, h, s, "b")
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		for _, r := range a.AddMany(ctx, []cas.Delta{{Key: "a", N: 1}, {Key: "b", N: 1}}) {
			if !errors.Is(r.Err, context.Canceled) {
				t.Fatalf("a cancelled context: %v", r.Err)
			}
		}
		wantAbsent(t, h, s, "a")
	}},
	{"ConcurrentOverlapping", func(t *testing.T, h *Harness, s cas.Store) {
		// Batches of overlapping keys in every order at once: each delta
		// counted once (no deadlock, no loss), stock never below 0.
		a := capability[cas.ManyAdder](t, s)
		const keys = 6
		for k := range keys {
			mustAdd(t, h, a, "c"+strconv.Itoa(k), 1000, cas.Bounds{}, 1000)
		}
		var (
			mu      sync.Mutex
			applied [keys]int64
		)
		h.runWorkers(func(w int) {
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			for range h.opsPerWorker() {
				perm := rng.Perm(keys)[:2+rng.IntN(keys-1)]
				ds := make([]cas.Delta, len(perm))
				for i, k := range perm {
					ds[i] = cas.Delta{Key: "c" + strconv.Itoa(k), N: -1, Bounds: cas.AtLeast(0)}
				}
				for i, r := range a.AddMany(context.Background(), ds) {
					if r.Err != nil {
						t.Errorf("delta of %s: %v", ds[i].Key, r.Err)
						return
					}
					mu.Lock()
					applied[perm[i]]++
					mu.Unlock()
				}
			}
		})
		for k := range keys {
			wantValue(t, h, s, "c"+strconv.Itoa(k), 1000-applied[k])
		}
	}},
}
