// Package occotel records the attempts and calls of [occ.Retry],
// [occ.Update] and [occ.Txn] as OpenTelemetry metrics: an [occ.Observer]
// backed by instruments of a [metric.MeterProvider].
//
// # Usage
//
// Make one [Observer] per process (or per store) and pass it to every call:
//
//	obs, err := occotel.New(meterProvider, occotel.WithAttributes(attribute.String("store", "orders")))
//	if err != nil {
//		return err
//	}
//	n, _, err := occ.Update(ctx, counters, "visits", func(n int, _ bool) (int, error) {
//		return n + 1, nil
//	}, occ.WithObserver(obs))
//
// A nil MeterProvider means the global one, otel.GetMeterProvider().
//
// # Instruments
//
// The meter is named [ScopeName]. Every measurement carries the op
// attribute ("retry", "update" or "txn") and the constant attributes given
// with [WithAttributes].
//
//   - occ.attempts ({attempt}, counter): every call of the function, with
//     outcome "success", "conflict", "retryable" or "failed".
//   - occ.conflicts ({conflict}, counter): attempts that failed with a
//     version conflict.
//   - occ.call.attempts ({attempt}, histogram, buckets 1, 2, 3, 4, 5, 7,
//     10, 15, 20, 30, 50): attempts per call, with the call's outcome
//     "success", "failed" or "gave-up".
//   - occ.call.duration (s, histogram): the call's duration, all attempts and
//     waits included, with the call's outcome.
//   - occ.giveups ({call}, counter): calls that gave up while still failing
//     with a retryable error, with reason "attempts" (the attempt limit),
//     "budget" (the retry budget), "backoff" (the BackOff stopped) or
//     "context" (the context ended).
//   - occ.budget.rejections ({call}, counter): give-ups whose reason is
//     "budget".
//
// The ratio of occ.conflicts to occ.attempts is the conflict rate, the number
// that says whether optimistic writes pay off for a workload; a growing
// occ.giveups{reason="attempts"} or occ.budget.rejections says that
// contention has outgrown retries.
//
// Keys (the Key field of [occ.Attempt] and [occ.Call]) are not used as
// attributes: their number is unbounded and would blow up the number of time
// series. Attribute sets are built once, so recording a measurement does not
// allocate.
//
// # Prometheus
//
// Prometheus users get these metrics through OpenTelemetry's Prometheus
// exporter, go.opentelemetry.io/otel/exporters/prometheus: build the
// MeterProvider with that exporter as its reader and pass it to [New]. By
// default the exporter turns dots into underscores and adds the unit and
// _total suffixes Prometheus expects, so occ.attempts becomes
// occ_attempts_total and occ.call.duration occ_call_duration_seconds.
package occotel
