package occ_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	"github.com/occkit/occkit/adapters/memcas"
	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/occ"
)

// A counter that used to be guarded by a mutex (or a distributed lock):
// each increment reads the current value and writes it back only if nobody
// else wrote in between, retrying otherwise. No increment is lost.
func ExampleUpdate() {
	ctx := context.Background()
	counters := cas.NewTyped(memcas.New(), cas.JSON[int]())

	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 100 {
				// Before: mu.Lock(); visits++; mu.Unlock()
				_, _, err := occ.Update(ctx, counters, "visits", func(n int, exists bool) (int, error) {
					return n + 1, nil
				}, occ.WithMaxAttempts(100))
				if err != nil {
					panic(err)
				}
			}
		}()
	}
	wg.Wait()

	n, _, _ := counters.Get(ctx, "visits")
	fmt.Println("visits:", n)
	// Output: visits: 800
}

// Moving money between two accounts: both balances are read inside the
// transaction, both are written, and the commit applies the two writes
// atomically only if neither balance changed since it was read.
func ExampleTxn() {
	ctx := context.Background()
	store := memcas.New()
	accounts := cas.NewTyped(store, cas.JSON[int]())
	accounts.CompareAndSwap(ctx, "alice", 0, 100)
	accounts.CompareAndSwap(ctx, "bob", 0, 20)

	errInsufficient := errors.New("insufficient funds")
	transfer := func(from, to string, amount int) error {
		return occ.Txn(ctx, store, func(tx *occ.Tx) error {
			var a, b int
			if err := getJSON(tx, from, &a); err != nil {
				return err
			}
			if err := getJSON(tx, to, &b); err != nil {
				return err
			}
			if a < amount {
				return errInsufficient // not retried, nothing written
			}
			putJSON(tx, from, a-amount)
			putJSON(tx, to, b+amount)
			return nil
		})
	}

	fmt.Println(transfer("alice", "bob", 30))
	fmt.Println(transfer("bob", "alice", 500))
	a, _, _ := accounts.Get(ctx, "alice")
	b, _, _ := accounts.Get(ctx, "bob")
	fmt.Println("alice:", a, "bob:", b)
	// Output:
	// <nil>
	// insufficient funds
	// alice: 70 bob: 50
}

func getJSON(tx *occ.Tx, key string, v *int) error {
	raw, ok, err := tx.Get(key)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("no account %q", key)
	}
	return cas.JSON[int]().Unmarshal(raw, v)
}

func putJSON(tx *occ.Tx, key string, v int) {
	raw, _ := cas.JSON[int]().Marshal(v)
	tx.Put(key, raw)
}

// Retry around arbitrary code: read inside the function, return the
// conflict unwrapped (or wrapped with %w), and Retry calls the function
// again. Any other error stops the loop and is returned as is.
func ExampleRetry() {
	ctx := context.Background()
	store := memcas.New()
	store.CompareAndSwap(ctx, "stock/sku-42", 0, []byte{3})

	errSoldOut := errors.New("sold out")
	sell := func() error {
		return occ.Retry(ctx, func(ctx context.Context) error {
			it, err := store.Get(ctx, "stock/sku-42")
			if err != nil {
				return err
			}
			if it.Value[0] == 0 {
				return errSoldOut
			}
			_, err = store.CompareAndSwap(ctx, "stock/sku-42", it.Version, []byte{it.Value[0] - 1})
			return err
		}, occ.WithMaxAttempts(20))
	}
	for range 4 {
		fmt.Println(sell())
	}
	// Output:
	// <nil>
	// <nil>
	// <nil>
	// sold out
}

// When the loop gives up, the error says why and still matches the last
// conflict.
func ExampleGiveUpError() {
	ctx := context.Background()
	alwaysConflicts := func(ctx context.Context) error {
		return &cas.ConflictError{Key: "hot", Expected: 1}
	}
	err := occ.Retry(ctx, alwaysConflicts, occ.WithMaxAttempts(3))
	fmt.Println(err)
	fmt.Println(errors.Is(err, occ.ErrAttemptsExhausted), errors.Is(err, cas.ErrConflict))
	// Output:
	// occ: gave up after 3 attempts (occ: attempt limit reached): cas: version conflict on key "hot": expected version 1
	// true true
}

// A retry budget shared by every writer of a process caps retries to a
// fraction of first attempts: here 10% of calls, plus a reserve of 50.
func ExampleBudget() {
	budget, err := occ.NewBudget(0.1, 50)
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	counters := cas.NewTyped(memcas.New(), cas.JSON[int]())
	_, _, err = occ.Update(ctx, counters, "k", func(n int, _ bool) (int, error) { return n + 1, nil },
		occ.WithBudget(budget))
	fmt.Println(err, budget.Stats().Rejected)
	// Output: <nil> 0
}

// A stock counter decremented by 100 concurrent buyers of one process:
// with a Combiner, the buyers queue behind one leader that applies their
// decrements in order and writes once per batch, instead of conflicting
// with each other. Each buyer gets the stock left after its own purchase;
// the buyers who find it sold out get their own error.
func ExampleCombiner() {
	ctx := context.Background()
	store := memcas.New()
	stock := cas.NewTyped(store, cas.JSON[int]())
	if _, err := stock.CompareAndSwap(ctx, "sku-42", 0, 80); err != nil {
		panic(err)
	}
	errSoldOut := errors.New("sold out")
	combiner := occ.NewCombiner() // one per process

	var (
		mu          sync.Mutex
		sold, short int
		wg          sync.WaitGroup
	)
	for range 100 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _, err := occ.Update(ctx, stock, "sku-42", func(n int, _ bool) (int, error) {
				if n == 0 {
					return 0, errSoldOut
				}
				return n - 1, nil
			}, occ.WithCombiner(combiner))
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				sold++
			case errors.Is(err, errSoldOut):
				short++
			default:
				panic(err)
			}
		}()
	}
	wg.Wait()
	left, _, _ := stock.Get(ctx, "sku-42")
	fmt.Println("sold:", sold, "sold out:", short, "left:", left)
	// Output: sold: 80 sold out: 20 left: 0
}

// Transfers between two hot accounts from many goroutines, combined: the
// transactions waiting while a commit is in flight run in one Txn and
// commit at once. A transfer refused for want of funds gets its own error,
// which stands because the batch's commit validated what it read.
func ExampleTxn_combiner() {
	ctx := context.Background()
	store := memcas.New()
	accounts := cas.NewTyped(store, cas.JSON[int]())
	for _, k := range []string{"alice", "bob"} {
		if _, err := accounts.CompareAndSwap(ctx, k, 0, 50); err != nil {
			panic(err)
		}
	}
	errNoFunds := errors.New("insufficient funds")
	combiner := occ.NewCombiner() // one per process
	move := func(from, to string) func(tx *occ.Tx) error {
		return func(tx *occ.Tx) error {
			var a, b int
			for k, p := range map[string]*int{from: &a, to: &b} {
				v, _, err := tx.Get(k)
				if err != nil {
					return err
				}
				if err := json.Unmarshal(v, p); err != nil {
					return err
				}
			}
			if a < 10 {
				return errNoFunds
			}
			va, _ := json.Marshal(a - 10)
			vb, _ := json.Marshal(b + 10)
			tx.Put(from, va)
			tx.Put(to, vb)
			return nil
		}
	}
	var (
		mu             sync.Mutex
		moved, refused int
		wg             sync.WaitGroup
	)
	for range 20 { // alice sends 10 twenty times: only five can go
		wg.Go(func() {
			err := occ.Txn(ctx, store, move("alice", "bob"), occ.WithCombiner(combiner))
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				moved++
			case errors.Is(err, errNoFunds):
				refused++
			default:
				panic(err)
			}
		})
	}
	wg.Wait()
	a, _, _ := accounts.Get(ctx, "alice")
	b, _, _ := accounts.Get(ctx, "bob")
	fmt.Println("moved:", moved, "refused:", refused, "alice:", a, "bob:", b)
	// Output: moved: 5 refused: 15 alice: 0 bob: 100
}

// A batch job that only cares about how many updates per second it gets
// through a hot key, not about any one update's latency, opts out of the
// process's turns: its calls neither wait for a starving caller's turn
// nor take one.
func ExampleWithTurns() {
	ctx := context.Background()
	counters := cas.NewTyped(memcas.New(), cas.JSON[int]())

	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 50 {
				_, _, err := occ.Update(ctx, counters, "processed", func(n int, _ bool) (int, error) {
					return n + 1, nil
				}, occ.WithTurns(false), occ.WithMaxAttempts(1000))
				if err != nil {
					panic(err)
				}
			}
		}()
	}
	wg.Wait()

	n, _, _ := counters.Get(ctx, "processed")
	fmt.Println("processed:", n)
	// Output: processed: 200
}

// A service that loads its rows in one batch at start remembers them in
// its version cache, so that the first update of each row is one
// conditional write instead of a read and a write.
func ExampleCache_Remember() {
	ctx := context.Background()
	store := memcas.New()
	stock := cas.NewTyped(store, cas.JSON[int]())
	cache := occ.NewCache(store, 1000)

	// The batch load (here: the writes that created the rows).
	for _, sku := range []string{"sku-1", "sku-2"} {
		v, err := stock.CompareAndSwap(ctx, sku, 0, 10)
		if err != nil {
			panic(err)
		}
		b, _ := stock.Encode(sku, 10)
		cache.Remember(cas.Item{Key: sku, Value: b, Version: v})
	}

	n, _, err := occ.Update(ctx, stock, "sku-1", func(n int, _ bool) (int, error) { return n - 1, nil }, occ.WithCache(cache))
	if err != nil {
		panic(err)
	}
	fmt.Println("sku-1:", n, "cache hits:", cache.Stats().Hits)
	// Output: sku-1: 9 cache hits: 1
}
