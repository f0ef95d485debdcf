package occ_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

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
