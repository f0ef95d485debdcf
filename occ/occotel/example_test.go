package occotel_test

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/cenkalti/backoff/v4"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/occkit/occkit/adapters/memcas"
	"github.com/occkit/occkit/cas"
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

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		panic(err)
	}
	// Print the counters and the attempts per call, sorted: data points
	// come in no particular order.
	var lines []string
	for _, m := range rm.ScopeMetrics[0].Metrics {
		switch d := m.Data.(type) {
		case metricdata.Sum[int64]:
			for _, dp := range d.DataPoints {
				lines = append(lines, fmt.Sprintf("%s{%s} = %d", m.Name, dp.Attributes.Encoded(attribute.DefaultEncoder()), dp.Value))
			}
		case metricdata.Histogram[int64]:
			for _, dp := range d.DataPoints {
				lines = append(lines, fmt.Sprintf("%s{%s}: %d call, %d attempts", m.Name, dp.Attributes.Encoded(attribute.DefaultEncoder()), dp.Count, dp.Sum))
			}
		}
	}
	slices.Sort(lines)
	fmt.Println(strings.Join(lines, "\n"))
	// Output:
	// visits: 3
	// occ.attempts{op=update,outcome=conflict,store=memcas} = 2
	// occ.attempts{op=update,outcome=success,store=memcas} = 1
	// occ.call.attempts{op=update,outcome=success,store=memcas}: 1 call, 3 attempts
	// occ.conflicts{op=update,store=memcas} = 2
}
