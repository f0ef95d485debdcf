package occ_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/occkit/occkit/adapters/memcas"
	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/occ"
)

// The benchmarks compare occ.Update with the loop a careful user would write
// by hand over the same store and codec, so that the framework's cost is the
// ratio between them (go test -bench 'Uncontended' -benchmem ./occ/).

func increment(n int, _ bool) (int, error) { return n + 1, nil }

func BenchmarkUncontended(b *testing.B) {
	ctx := context.Background()
	b.Run("occ.Update", func(b *testing.B) {
		counters := cas.NewTyped(memcas.New(), cas.JSON[int]())
		b.ReportAllocs()
		for b.Loop() {
			if _, _, err := occ.Update(ctx, counters, "k", increment); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("occ.Update+combiner", func(b *testing.B) {
		// The combiner's cost when there is nothing to combine.
		counters := cas.NewTyped(memcas.New(), cas.JSON[int]())
		cb := occ.NewCombiner()
		b.ReportAllocs()
		for b.Loop() {
			if _, _, err := occ.Update(ctx, counters, "k", increment, occ.WithCombiner(cb)); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("hand-loop", func(b *testing.B) {
		counters := cas.NewTyped(memcas.New(), cas.JSON[int]())
		b.ReportAllocs()
		for b.Loop() {
			if err := handUpdate(ctx, counters, "k"); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// handUpdate is the read/CAS loop occ.Update replaces.
func handUpdate(ctx context.Context, s *cas.Typed[int], key string) error {
	for {
		n, v, err := s.Get(ctx, key)
		if err != nil && !errors.Is(err, cas.ErrNotFound) {
			return err
		}
		_, err = s.CompareAndSwap(ctx, key, v, n+1)
		if errors.Is(err, cas.ErrConflict) {
			continue
		}
		return err
	}
}

// spin busy-waits for d, standing for work done between the read and the
// write (the critical section a lock would have protected).
func spin(d time.Duration) {
	for start := time.Now(); time.Since(start) < d; {
	}
}

// BenchmarkContended runs 8 goroutines incrementing one key and reports
// attempts per successful update, with the default backoff and with none,
// for an empty critical section and for 2µs of work inside it.
func BenchmarkContended(b *testing.B) {
	ctx := context.Background()
	type variant struct {
		name string
		work time.Duration
		opts []occ.Option
	}
	var variants []variant
	for _, work := range []time.Duration{0, 2 * time.Microsecond} {
		variants = append(variants,
			variant{fmt.Sprintf("work=%v/default-backoff", work), work, nil},
			variant{fmt.Sprintf("work=%v/no-backoff", work), work,
				[]occ.Option{occ.WithBackOffFunc(func() backoff.BackOff { return &backoff.ZeroBackOff{} })}})
	}
	for _, bc := range variants {
		b.Run(bc.name, func(b *testing.B) {
			mutate := func(n int, _ bool) (int, error) {
				spin(bc.work)
				return n + 1, nil
			}
			counters := cas.NewTyped(memcas.New(), cas.JSON[int]())
			var attempts, successes, most atomic.Int64
			obs := occ.ObserverFuncs{Call: func(_ context.Context, c occ.Call) {
				attempts.Add(int64(c.Attempts))
				for m := most.Load(); int64(c.Attempts) > m && !most.CompareAndSwap(m, int64(c.Attempts)); m = most.Load() {
				}
				if c.Outcome == occ.OutcomeSuccess {
					successes.Add(1)
				}
			}}
			opts := append([]occ.Option{occ.WithObserver(obs), occ.WithMaxAttempts(1000)}, bc.opts...)
			const workers = 8
			var next atomic.Int64
			n := int64(b.N)
			b.ResetTimer()
			var wg sync.WaitGroup
			for range workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for next.Add(1) <= n {
						if _, _, err := occ.Update(ctx, counters, "hot", mutate, opts...); err != nil {
							b.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
			b.StopTimer()
			got, _, _ := counters.Get(ctx, "hot")
			if int64(got) != successes.Load() || successes.Load() != n {
				b.Fatalf("counter %d, successes %d, want %d", got, successes.Load(), n)
			}
			b.ReportMetric(float64(attempts.Load())/float64(successes.Load()), "attempts/success")
			b.ReportMetric(float64(most.Load()), "max-attempts")
		})
	}
}

// BenchmarkRetryOverhead isolates the cost of the retry loop itself: a
// Retry whose function succeeds at once and does nothing.
func BenchmarkRetryOverhead(b *testing.B) {
	ctx := context.Background()
	calls := 0
	fn := func(context.Context) error { calls++; return nil }
	b.ReportAllocs()
	for b.Loop() {
		if err := occ.Retry(ctx, fn); err != nil {
			b.Fatal(err)
		}
	}
	if calls == 0 {
		b.Fatal("fn never called")
	}
}

// BenchmarkCombinerNothingToCombine: 8 goroutines per CPU update 1000
// keys of an in-process store, with and without a Combiner. Batches
// almost never form, so the difference is what the combiner costs a call
// that has nothing to combine (the lab's 1000-key memory cells).
func BenchmarkCombinerNothingToCombine(b *testing.B) {
	ctx := context.Background()
	keys := make([]string, 1000)
	for i := range keys {
		keys[i] = fmt.Sprintf("k%d", i)
	}
	for _, name := range []string{"occ.Update", "occ.Update+combiner"} {
		b.Run(name, func(b *testing.B) {
			counters := cas.NewTyped(memcas.New(), cas.JSON[int]())
			var opts []occ.Option
			if name == "occ.Update+combiner" {
				opts = append(opts, occ.WithCombiner(occ.NewCombiner()))
			}
			var seed atomic.Int64
			b.ReportAllocs()
			b.SetParallelism(8)
			b.RunParallel(func(pb *testing.PB) {
				i := int(seed.Add(7919))
				for pb.Next() {
					i++
					if _, _, err := occ.Update(ctx, counters, keys[i%len(keys)], increment, opts...); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}
