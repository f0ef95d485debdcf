// Package cachebench holds the benchmarks every adapter runs alike: what
// occ's version cache costs when another process writes the same keys,
// and the goroutines that drive a benchmark's calls (Workers).
package cachebench

import (
	"context"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/occ"
)

// ForeignWriters runs b.N increments from 16 workers sharing a version
// cache over keys counters of mine, while foreign workers (another
// process: theirs is a second store on the same data, without the cache)
// increment the same counters until the cached workers are done. It checks
// that the counters add up to every increment, and reports the round trips
// per cached update (roundTrips counts mine's) and both throughputs.
func ForeignWriters(b *testing.B, mine, theirs cas.Store, keys, foreign int, roundTrips func() int64) {
	ctx := context.Background()
	mt, tt := cas.NewTyped(mine, cas.JSON[int]()), cas.NewTyped(theirs, cas.JSON[int]())
	cache := occ.NewCache(mine, 2*keys)
	incr := func(n int, _ bool) (int, error) { return n + 1, nil }
	key := func(rng *rand.Rand) string { return "c" + strconv.Itoa(rng.IntN(keys)) }
	var done, foreignDone atomic.Int64
	stop := make(chan struct{})
	var fwg sync.WaitGroup
	for w := range foreign {
		fwg.Add(1)
		go func() {
			defer fwg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 99))
			for {
				select {
				case <-stop:
					return
				default:
				}
				if _, _, err := occ.Update(ctx, tt, key(rng), incr, occ.WithMaxAttempts(100)); err != nil {
					b.Error(err)
					return
				}
				foreignDone.Add(1)
			}
		}()
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	before := roundTrips()
	start := time.Now()
	for w := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			for next.Add(1) <= int64(b.N) {
				if _, _, err := occ.Update(ctx, mt, key(rng), incr, occ.WithMaxAttempts(100), occ.WithCache(cache)); err != nil {
					b.Error(err)
					return
				}
				done.Add(1)
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	trips := roundTrips() - before
	close(stop)
	fwg.Wait()
	total := 0
	for k := range keys {
		if n, _, err := tt.Get(ctx, "c"+strconv.Itoa(k)); err == nil {
			total += n
		}
	}
	if int64(total) != done.Load()+foreignDone.Load() {
		b.Fatalf("counters sum to %d, %d + %d increments succeeded", total, done.Load(), foreignDone.Load())
	}
	b.ReportMetric(float64(trips)/float64(done.Load()), "roundtrips/update")
	b.ReportMetric(float64(done.Load())/elapsed.Seconds(), "cached-ops/s")
	b.ReportMetric(float64(foreignDone.Load())/elapsed.Seconds(), "foreign-ops/s")
}

// Workers runs b.N calls of op over workers goroutines (b.N/workers each:
// op(w, i) is worker w's i-th call) and waits for them; a worker stops at
// its first error, which fails b.
func Workers(b *testing.B, workers int, op func(w, i int) error) {
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range b.N / workers {
				if err := op(w, i); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
}

// TableVsStore is the benchmark of a repository table's Modify against
// occ.Update over the adapter's Store where nothing conflicts: it seeds
// 1000 keys through seed (the table's row and the store's counter of
// each), then runs sub-benchmarks "table" (modify) and "store" (an
// increment through occ.Update over store) over workers goroutines, each
// call on a key of its own pattern. Read the two ns/op lines as a ratio.
func TableVsStore(b *testing.B, workers int, store cas.Store, seed func(ctx context.Context, key string) error, modify func(ctx context.Context, key string) error) {
	TableVsStoreKeys(b, workers, 1000, store, seed, modify)
}

// TableVsStoreKeys is TableVsStore over n keys: with n 1, every call of
// both sub-benchmarks is on one hot row (the calls of the process take
// turns at it), which shows what the table's path adds to each turn.
func TableVsStoreKeys(b *testing.B, workers, n int, store cas.Store, seed func(ctx context.Context, key string) error, modify func(ctx context.Context, key string) error) {
	ctx := context.Background()
	keys := make([]string, n)
	for i := range keys {
		keys[i] = "k" + strconv.Itoa(i)
		if err := seed(ctx, keys[i]); err != nil {
			b.Fatal(err)
		}
		if _, err := store.CompareAndSwap(ctx, keys[i], 0, []byte("0")); err != nil {
			b.Fatal(err)
		}
	}
	typed := cas.NewTyped(store, cas.JSON[int64]())
	run := func(b *testing.B, op func(key string) error) {
		Workers(b, workers, func(w, i int) error { return op(keys[(w*131+i*7)%len(keys)]) })
	}
	b.Run("table", func(b *testing.B) {
		run(b, func(k string) error { return modify(ctx, k) })
	})
	b.Run("store", func(b *testing.B) {
		run(b, func(k string) error {
			_, _, err := occ.Update(ctx, typed, k, func(n int64, _ bool) (int64, error) { return n + 1, nil })
			return err
		})
	})
}
