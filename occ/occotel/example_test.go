package occotel_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/cenkalti/backoff/v4"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/occkit/occkit/adapters/memcas"
	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/hybrid"
	"github.com/occkit/occkit/occ"
	"github.com/occkit/occkit/occ/occotel"
)

func ExampleNew() {
	ctx := context.Background()

	// A MeterProvider read on demand; a service would use an exporter.
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(ctx)

	obs, err := occotel.New(mp, occotel.WithAttributes(attribute.String("store", "memcas")))
	if err != nil {
		panic(err)
	}

	// An Update whose first two writes lose to another writer.
	counters := cas.NewTyped(memcas.New(), cas.JSON[int]())
	interfere := 2
	n, _, err := occ.Update(ctx, counters, "visits", func(n int, _ bool) (int, error) {
		if interfere > 0 {
			interfere--
			_, v, _ := counters.Get(ctx, "visits")
			_, _ = counters.CompareAndSwap(ctx, "visits", v, n+1)
		}
		return n + 1, nil
	}, occ.WithObserver(obs), occ.WithBackOff(&backoff.ZeroBackOff{}))
	if err != nil {
		panic(err)
	}
	fmt.Println("visits:", n)

	printMetrics(ctx, reader)
	// Output:
	// visits: 3
	// occ.attempts{op=update,outcome=conflict,store=memcas} = 2
	// occ.attempts{op=update,outcome=success,store=memcas} = 1
	// occ.call.attempts{op=update,outcome=success,store=memcas}: count 1, sum 3
	// occ.call.duration{op=update,outcome=success,store=memcas}: count 1
	// occ.conflicts{op=update,store=memcas} = 2
}

func ExampleNewTracer() {
	ctx := context.Background()

	// A TracerProvider that keeps spans in memory; a service would use an
	// exporter (OTLP, say).
	spans := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
	defer tp.Shutdown(ctx)

	tracer := occotel.NewTracer(tp)

	// An Update whose first two writes lose to another writer.
	counters := cas.NewTyped(memcas.New(), cas.JSON[int]())
	interfere := 2
	_, _, err := occ.Update(ctx, counters, "visits", func(n int, _ bool) (int, error) {
		if interfere > 0 {
			interfere--
			_, v, _ := counters.Get(ctx, "visits")
			_, _ = counters.CompareAndSwap(ctx, "visits", v, n+1)
		}
		return n + 1, nil
	}, occ.WithObserver(tracer), occ.WithBackOff(&backoff.ZeroBackOff{}))
	if err != nil {
		panic(err)
	}

	// One span for the call, one event per attempt and per wait. (The
	// first conflict is retried at once from the state it returned; the
	// second waits.)
	for _, sp := range spans.GetSpans() {
		fmt.Printf("%s: %s\n", sp.Name, attrs(sp.Attributes, "occ.outcome", "occ.attempts"))
		for _, e := range sp.Events {
			fmt.Printf("  %s %s\n", e.Name, attrs(e.Attributes, "occ.attempt.number", "occ.attempt.outcome", "occ.wait.kind"))
		}
	}
	// Output:
	// occ.update: occ.outcome=success occ.attempts=3
	//   occ.attempt occ.attempt.number=1 occ.attempt.outcome=conflict
	//   occ.attempt occ.attempt.number=2 occ.attempt.outcome=conflict
	//   occ.wait occ.wait.kind=backoff
	//   occ.attempt occ.attempt.number=3 occ.attempt.outcome=success
}

func ExampleLocker() {
	ctx := context.Background()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(ctx)

	// Measure the locker's leases; count fenced writes with an Observer.
	locker, err := occotel.Locker(hybrid.NewLocalLocker(200*time.Millisecond), mp)
	if err != nil {
		panic(err)
	}
	obs, err := occotel.New(mp)
	if err != nil {
		panic(err)
	}

	// An update under a lease, released as it should be.
	stock := cas.NewTyped(memcas.New(), cas.JSON[int]())
	if _, _, err := hybrid.Update(ctx, locker, stock, "sku-42", func(n int, _ bool) (int, error) {
		return n + 1, nil
	}, occ.WithObserver(obs)); err != nil {
		panic(err)
	}

	// A holder that stalls past the lease's 200ms: the lease is lost.
	lease, err := locker.Acquire(ctx, "sku-42")
	if err != nil {
		panic(err)
	}
	<-lease.Context().Done()
	_ = lease.Release(ctx) // returns once the loss is counted

	printMetrics(ctx, reader)
	// Output:
	// hybrid.lease.hold.duration{end=lost}: count 1
	// hybrid.lease.hold.duration{end=released}: count 1
	// hybrid.lease.lost{cause=expired} = 1
	// hybrid.lock.acquire.duration{outcome=acquired}: count 2
	// occ.attempts{op=hybrid.update,outcome=success} = 1
	// occ.call.attempts{op=hybrid.update,outcome=success}: count 1, sum 1
	// occ.call.duration{op=hybrid.update,outcome=success}: count 1
}

// printMetrics prints what reader collects: the counters' values, and the
// sample counts of the histograms (with the sum of those that count
// attempts; durations vary from run to run), sorted: data points come in
// no particular order.
func printMetrics(ctx context.Context, reader *sdkmetric.ManualReader) {
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		panic(err)
	}
	var lines []string
	for _, m := range rm.ScopeMetrics[0].Metrics {
		name := func(attrs attribute.Set) string {
			return m.Name + "{" + attrs.Encoded(attribute.DefaultEncoder()) + "}"
		}
		switch d := m.Data.(type) {
		case metricdata.Sum[int64]:
			for _, dp := range d.DataPoints {
				lines = append(lines, fmt.Sprintf("%s = %d", name(dp.Attributes), dp.Value))
			}
		case metricdata.Histogram[int64]:
			for _, dp := range d.DataPoints {
				lines = append(lines, fmt.Sprintf("%s: count %d, sum %d", name(dp.Attributes), dp.Count, dp.Sum))
			}
		case metricdata.Histogram[float64]:
			for _, dp := range d.DataPoints {
				lines = append(lines, fmt.Sprintf("%s: count %d", name(dp.Attributes), dp.Count))
			}
		}
	}
	slices.Sort(lines)
	fmt.Println(strings.Join(lines, "\n"))
}

// attrs prints the values of keys found in kvs, in the order of keys.
func attrs(kvs []attribute.KeyValue, keys ...string) string {
	var out []string
	for _, k := range keys {
		for _, kv := range kvs {
			if string(kv.Key) == k {
				out = append(out, k+"="+kv.Value.String())
			}
		}
	}
	return strings.Join(out, " ")
}
