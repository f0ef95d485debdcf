package castest

import (
	"context"
	"testing"
	"time"

	"github.com/occkit/occkit/cas"
)

// BenchCAS measures what an adapter adds to a conditional write: every
// iteration of b alternates a CompareAndSwap of key "k" through s with
// raw, the same conditional write of value written by hand with the
// store's own client on a key of its own (raw keeps that key's version),
// so that drift in the machine's load hits both alike. It checks that s's
// key saw every write and reports the mean times as <name>-ns/op and
// raw-ns/op and their ratio as <name>/raw.
func BenchCAS(b *testing.B, name string, s cas.Store, value []byte, raw func(ctx context.Context) error) {
	ctx := context.Background()
	var (
		v              cas.Version
		adapter, plain time.Duration
	)
	for i := 0; b.Loop(); i++ {
		t0 := time.Now()
		if i%2 == 0 {
			nv, err := s.CompareAndSwap(ctx, "k", v, value)
			if err != nil {
				b.Fatal(err)
			}
			v = nv
			adapter += time.Since(t0)
			continue
		}
		if err := raw(ctx); err != nil {
			b.Fatal(err)
		}
		plain += time.Since(t0)
	}
	if it, err := s.Get(ctx, "k"); err != nil || it.Version != v || string(it.Value) != string(value) {
		b.Fatalf("store key = %+v, %v; want v%d", it, err, v)
	}
	half := float64(b.N) / 2
	b.ReportMetric(float64(adapter.Nanoseconds())/half, name+"-ns/op")
	b.ReportMetric(float64(plain.Nanoseconds())/half, "raw-ns/op")
	b.ReportMetric(float64(adapter)/float64(plain), name+"/raw")
}
