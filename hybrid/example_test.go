package hybrid_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/hybrid"
)

// Selling from a hot stock under a lease lock with fenced writes: eight
// buyers, five items, never oversold.
func ExampleUpdate() {
	ctx := context.Background()
	store := newFencedMap() // any cas.FencedStore: memcas.New(), pgcas.New(...), ...
	stock := cas.NewTyped(store, cas.JSON[int]())
	stock.CompareAndSwap(ctx, "sku-42", 0, 5)
	locker := hybrid.NewLocalLocker(2 * time.Second)

	errSoldOut := errors.New("sold out")
	var mu sync.Mutex
	sold, refused := 0, 0
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _, err := hybrid.Update(ctx, locker, stock, "sku-42", func(n int, _ bool) (int, error) {
				if n == 0 {
					return 0, errSoldOut
				}
				return n - 1, nil
			})
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				sold++
			case errors.Is(err, errSoldOut):
				refused++
			}
		}()
	}
	wg.Wait()
	left, _, _ := stock.Get(ctx, "sku-42")
	fmt.Println("sold", sold, "refused", refused, "left", left)
	// Output: sold 5 refused 3 left 0
}

// Locking only the keys that are hot.
func ExampleUpdateAdaptive() {
	ctx := context.Background()
	counters := cas.NewTyped(newFencedMap(), cas.JSON[int]())
	a := hybrid.NewAdaptive(hybrid.NewLocalLocker(time.Second), hybrid.AdaptiveConfig{
		OnSwitch: func(key string, locked bool, score float64) { /* log or count it */ },
	})
	n, _, err := hybrid.UpdateAdaptive(ctx, a, counters, "page:/", func(n int, _ bool) (int, error) { return n + 1, nil })
	fmt.Println(n, err, a.Stats().Locked)
	// Output: 1 <nil> 0
}
