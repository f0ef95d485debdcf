package occ_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/occkit/occkit/adapters/memcas"
	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/occ"
)

// Selling stock across many buyers: each sale takes one item unless none
// is left. The store does the arithmetic and refuses the sale that would
// go below zero; no sale conflicts with another, none is lost.
func ExampleAdd() {
	ctx := context.Background()
	store := memcas.New()
	if _, _, err := occ.Add(ctx, store, "stock:sku-42", 100, cas.Bounds{}); err != nil {
		panic(err)
	}
	var mu sync.Mutex
	sold, soldOut := 0, 0
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 20 {
				_, _, err := occ.Add(ctx, store, "stock:sku-42", -1, cas.AtLeast(0))
				mu.Lock()
				switch {
				case err == nil:
					sold++
				case errors.Is(err, cas.ErrBound):
					soldOut++
				default:
					panic(err)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	left, _, _ := occ.Add(ctx, store, "stock:sku-42", 0, cas.Bounds{})
	fmt.Println("sold", sold, "sold out", soldOut, "left", left)
	// Output: sold 100 sold out 60 left 0
}

// storeOnly hides every capability but cas.Store: Add falls back to Update.
type storeOnly struct{ cas.Store }

// TestAddBothPaths sells more than the stock from concurrent callers, on
// a store that applies deltas and on one that does not: exactly the stock
// is sold, the rest is refused with a *cas.BoundError, and the value
// never goes below the bound.
func TestAddBothPaths(t *testing.T) {
	for _, tc := range []struct {
		name  string
		store cas.Store
	}{{"native", memcas.New()}, {"update", storeOnly{memcas.New()}}} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			if v, _, err := occ.Add(ctx, tc.store, "stock", 50, cas.AtMost(50)); err != nil || v != 50 {
				t.Fatalf("fill: %d, %v", v, err)
			}
			var mu sync.Mutex
			sold, refused := 0, 0
			var wg sync.WaitGroup
			for range 8 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range 10 {
						left, _, err := occ.Add(ctx, tc.store, "stock", -1, cas.AtLeast(0), occ.WithMaxAttempts(1000))
						mu.Lock()
						var be *cas.BoundError
						switch {
						case err == nil && left >= 0:
							sold++
						case errors.As(err, &be) && be.Current == 0 && be.Add == -1:
							refused++
						default:
							t.Errorf("add: %d, %v", left, err)
						}
						mu.Unlock()
					}
				}()
			}
			wg.Wait()
			if sold != 50 || refused != 30 {
				t.Fatalf("sold %d, refused %d; want 50 and 30", sold, refused)
			}
			if _, _, err := occ.Add(ctx, tc.store, "stock", 1, cas.AtMost(0)); !errors.Is(err, cas.ErrBound) {
				t.Fatalf("add above the bound: %v", err)
			}
			if _, err := tc.store.CompareAndSwap(ctx, "text", 0, []byte("ten")); err != nil {
				t.Fatal(err)
			}
			if _, _, err := occ.Add(ctx, tc.store, "text", 1, cas.Bounds{}); !errors.Is(err, cas.ErrNotInteger) {
				t.Fatalf("add to a text value: %v", err)
			}
		})
	}
}

// slowAdder is a cas.Adder whose deltas take a while on the way, as over a
// network, and that counts them.
type slowAdder struct {
	*memcas.Store
	writes atomic.Int64
}

func (s *slowAdder) Add(ctx context.Context, key string, n int64, b cas.Bounds) (int64, cas.Version, error) {
	s.writes.Add(1)
	time.Sleep(200 * time.Microsecond)
	return s.Store.Add(ctx, key, n, b)
}

// TestAddBatches runs concurrent sales and restocks of one key, each with
// its own bounds, through the batching of occ.Add: the key ends at the
// sum of the deltas that succeeded, every success saw a value within its
// bounds, fewer writes reached the store than deltas succeeded, and WithTurns(false) sends every delta.
func TestAddBatches(t *testing.T) {
	for _, turns := range []bool{true, false} {
		t.Run(fmt.Sprintf("turns=%v", turns), func(t *testing.T) {
			ctx := context.Background()
			s := &slowAdder{Store: memcas.New()}
			if _, _, err := occ.Add(ctx, s, "k", 300, cas.Bounds{}); err != nil {
				t.Fatal(err)
			}
			var mu sync.Mutex
			var sum int64 = 300
			ok, refused := 0, 0
			var wg sync.WaitGroup
			for g := range 16 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range 50 {
						n, b := int64(-1), cas.AtLeast(0)
						switch {
						case g%4 == 3 && i%5 == 0:
							n, b = 7, cas.AtMost(305) // a restock that must not overfill
						case g%4 == 2:
							n, b = -3, cas.Between(10, 1000) // a bigger sale that keeps a reserve
						}
						v, _, err := occ.Add(ctx, s, "k", n, b, occ.WithTurns(turns))
						mu.Lock()
						switch {
						case err == nil:
							ok++
							sum += n
							if mn, has := b.Min(); has && v < mn {
								t.Errorf("delta %d within %s left %d", n, b, v)
							}
							if mx, has := b.Max(); has && v > mx {
								t.Errorf("delta %d within %s left %d", n, b, v)
							}
						case errors.Is(err, cas.ErrBound):
							refused++
						default:
							t.Errorf("add: %v", err)
						}
						mu.Unlock()
					}
				}()
			}
			wg.Wait()
			it, err := s.Get(ctx, "k")
			if err != nil {
				t.Fatal(err)
			}
			if got, _ := cas.ParseInt("k", it.Value); got != sum {
				t.Fatalf("k = %d, but the successful deltas sum to %d", got, sum)
			}
			writes := s.writes.Load() - 1
			t.Logf("%d deltas succeeded, %d refused, %d writes", ok, refused, writes)
			if turns && writes >= int64(ok) {
				t.Fatalf("%d writes for %d deltas: nothing was batched", writes, ok)
			}
			if !turns && writes != int64(ok+refused) {
				t.Fatalf("WithTurns(false): %d writes for %d deltas", writes, ok+refused)
			}
		})
	}
}

// TestAddBatchCancelledWaiter: a delta whose context ends while it waits
// in its key's queue leaves it and is not applied.
func TestAddBatchCancelledWaiter(t *testing.T) {
	s := &slowAdder{Store: memcas.New()}
	ctx := context.Background()
	var wg sync.WaitGroup
	cancelled := 0
	var mu sync.Mutex
	for i := range 40 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cctx := ctx
			if i%2 == 1 {
				var cancel context.CancelFunc
				cctx, cancel = context.WithTimeout(ctx, time.Duration(i)*50*time.Microsecond)
				defer cancel()
			}
			_, _, err := occ.Add(cctx, s, "k", 1, cas.Bounds{})
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
			case errors.Is(err, context.DeadlineExceeded):
				cancelled++
			default:
				t.Errorf("add: %v", err)
			}
		}()
	}
	wg.Wait()
	it, _ := s.Get(ctx, "k")
	if got, _ := cas.ParseInt("k", it.Value); got != int64(40-cancelled) {
		t.Fatalf("k = %d after %d deltas of which %d were cancelled", got, 40, cancelled)
	}
}

// mapStore is a cas.Adder whose type cannot key a map: a struct value
// holding a map.
type mapStore struct {
	*memcas.Store
	tags map[string]string
}

// TestAddUncomparableStore: occ.Add on a store value that cannot be a map
// key works (one delta at a time) instead of panicking.
func TestAddUncomparableStore(t *testing.T) {
	s := mapStore{Store: memcas.New(), tags: map[string]string{}}
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 25 {
				if _, _, err := occ.Add(context.Background(), s, "k", 1, cas.Bounds{}); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	if v, _, err := occ.Add(context.Background(), s, "k", 0, cas.Bounds{}); err != nil || v != 100 {
		t.Fatalf("k = %d, %v; want 100", v, err)
	}
}

// BenchmarkAddHotKeyLooping: 4 callers, each sending its next delta of
// one key as soon as the last returned (a closed loop, as the lab's
// workers and a handler pool under load do), through a store whose
// deltas take 200 µs. It reports deltas/write: the batch a write
// carries on average, at most 4 here. (A line whose leader took its
// batch as the last batch ended split the callers into two groups that
// alternated: about 2.)
//
//	go test -run '^$' -bench AddHotKeyLooping ./occ/
func BenchmarkAddHotKeyLooping(b *testing.B) {
	ctx := context.Background()
	s := &slowAdder{Store: memcas.New()}
	occ.LoopCallers(b, 4, func() error {
		_, _, err := occ.Add(ctx, s, "k", 1, cas.Bounds{})
		return err
	})
	b.ReportMetric(float64(b.N)/float64(max(s.writes.Load(), 1)), "deltas/write")
}
