package hybrid_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/occkit/occkit/adapters/memcas"
	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/hybrid"
	"github.com/occkit/occkit/occ"
)

// BenchmarkAdaptiveOverhead compares hybrid.UpdateAdaptive with what its
// optimistic path is, occ.Update with a Combiner, where nothing else
// writes (so the key never locks): the difference is the Adaptive's
// bookkeeping. 8 goroutines per CPU share one key ("hot") or spread over
// 1000 keys ("cold").
func BenchmarkAdaptiveOverhead(b *testing.B) {
	incr := func(cur int64, _ bool) (int64, error) { return cur + 1, nil }
	for _, keys := range []int{1, 1000} {
		name := "hot"
		if keys > 1 {
			name = "cold"
		}
		names := make([]string, keys)
		for i := range names {
			names[i] = "k" + strconv.Itoa(i)
		}
		b.Run(name+"/occ+combiner", func(b *testing.B) {
			s := cas.NewTyped(memcas.New(), cas.JSON[int64]())
			c := occ.NewCombiner()
			b.SetParallelism(8)
			b.RunParallel(func(pb *testing.PB) {
				i := 0
				for pb.Next() {
					i++
					if _, _, err := occ.Update(context.Background(), s, names[i%keys], incr, occ.WithCombiner(c)); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
		b.Run(name+"/adaptive", func(b *testing.B) {
			s := cas.NewTyped(memcas.New(), cas.JSON[int64]())
			a := hybrid.NewAdaptive(hybrid.NewLocalLocker(time.Second), hybrid.AdaptiveConfig{})
			b.SetParallelism(8)
			b.RunParallel(func(pb *testing.PB) {
				i := 0
				for pb.Next() {
					i++
					if _, _, err := hybrid.UpdateAdaptive(context.Background(), a, s, names[i%keys], incr); err != nil {
						b.Error(err)
						return
					}
				}
			})
			if st := a.Stats(); st.Locked > 0 {
				b.Fatalf("%d keys locked with one writer process", st.Locked)
			}
		})
	}
}
