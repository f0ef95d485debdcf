package lab

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

func TestHistogramQuantiles(t *testing.T) {
	var h, a, b latencyHistogram
	r := rand.New(rand.NewPCG(1, 2))
	var all []time.Duration
	for i := range 100_000 {
		d := time.Duration(r.ExpFloat64() * float64(200*time.Microsecond))
		if i%1000 == 0 {
			d = time.Duration(r.IntN(100)) // tiny values are exact
		}
		all = append(all, d)
		h.Record(d)
		if i%2 == 0 {
			a.Record(d)
		} else {
			b.Record(d)
		}
	}
	a.Merge(&b)
	slices.Sort(all)
	for _, q := range []float64{0.001, 0.5, 0.9, 0.99, 0.999, 1} {
		exact := all[int(q*float64(len(all))+0.9999999)-1]
		for name, hh := range map[string]*latencyHistogram{"one": &h, "merged": &a} {
			got := hh.Quantile(q)
			if diff := float64(got-exact) / float64(max(exact, 1)); diff > 0.008 || diff < -0.008 {
				t.Errorf("%s: q%v = %v, exact %v (%.2f%% off)", name, q, got, exact, 100*diff)
			}
		}
	}
	if h.n != 100_000 || a.n != 100_000 || h.Max() != all[len(all)-1] {
		t.Errorf("count %d/%d, max %v (want %v)", h.n, a.n, h.Max(), all[len(all)-1])
	}
	var empty latencyHistogram
	if empty.Quantile(0.5) != 0 {
		t.Error("empty histogram has a median")
	}
}

func TestHistogramBuckets(t *testing.T) {
	prevHi := uint64(0)
	for i := 1; i < histBuckets; i++ {
		lo, hi := histBounds(i)
		if lo != prevHi+1 || hi < lo {
			t.Fatalf("bucket %d is [%d, %d], previous ended at %d", i, lo, hi, prevHi)
		}
		if histIndex(lo) != i || histIndex(hi) != i {
			t.Fatalf("bucket %d = [%d, %d] but those values index %d and %d", i, lo, hi, histIndex(lo), histIndex(hi))
		}
		prevHi = hi
		if hi >= 1<<62 {
			break
		}
	}
}
