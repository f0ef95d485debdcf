package occotel

import (
	"errors"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// durationBuckets are the bucket boundaries, in seconds, of the duration
// histograms: 100 µs to 10 s.
var durationBuckets = []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}

// instruments creates the instruments of New and Locker from the meter
// named ScopeName, collecting the errors of their creation in err.
type instruments struct {
	m   metric.Meter
	err error
}

// newInstruments returns the instruments of mp's meter named ScopeName; a
// nil mp means the global otel.GetMeterProvider().
func newInstruments(mp metric.MeterProvider) *instruments {
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	return &instruments{m: mp.Meter(ScopeName)}
}

func (in *instruments) counter(name, unit, desc string) metric.Int64Counter {
	c, err := in.m.Int64Counter(name, metric.WithUnit(unit), metric.WithDescription(desc))
	in.err = errors.Join(in.err, err)
	return c
}

// durations returns a histogram of seconds with durationBuckets.
func (in *instruments) durations(name, desc string) metric.Float64Histogram {
	h, err := in.m.Float64Histogram(name, metric.WithUnit("s"), metric.WithDescription(desc),
		metric.WithExplicitBucketBoundaries(durationBuckets...))
	in.err = errors.Join(in.err, err)
	return h
}

func (in *instruments) int64Histogram(name, unit, desc string, buckets ...float64) metric.Int64Histogram {
	h, err := in.m.Int64Histogram(name, metric.WithUnit(unit), metric.WithDescription(desc),
		metric.WithExplicitBucketBoundaries(buckets...))
	in.err = errors.Join(in.err, err)
	return h
}

// attrSet returns the attribute set of the constant attributes consts and
// kv; a value of kv wins over a constant with the same key.
func attrSet(consts []attribute.KeyValue, kv ...attribute.KeyValue) attribute.Set {
	all := make([]attribute.KeyValue, 0, len(consts)+len(kv))
	all = append(all, consts...)
	all = append(all, kv...)
	return attribute.NewSet(all...)
}
