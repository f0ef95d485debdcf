// Package occotel gives an operator OpenTelemetry signals for occkit: an
// [occ.Observer] that records the attempts and calls of [occ.Retry],
// [occ.Update], [occ.Txn] and hybrid.Update as metrics ([New]), a
// [Tracer] that records each call as a span with an event per attempt and
// per wait ([NewTracer]), and a wrapper that measures a hybrid.Locker's
// leases ([Locker]). Which signal says what, and the alert thresholds the
// benchmarks support, are in docs/operations.md.
//
// # Usage
//
// Make one [Observer] and one [Tracer] per process (or per store), pass
// them to every call, and wrap each locker once:
//
//	obs, err := occotel.New(meterProvider, occotel.WithAttributes(attribute.String("store", "orders")))
//	if err != nil {
//		return err
//	}
//	tracer := occotel.NewTracer(tracerProvider)
//	n, _, err := occ.Update(ctx, counters, "visits", func(n int, _ bool) (int, error) {
//		return n + 1, nil
//	}, occ.WithObserver(obs), occ.WithObserver(tracer))
//
//	locker, err := occotel.Locker(redisLocker, meterProvider, occotel.WithAttributes(attribute.String("locker", "redis")))
//	left, _, err := hybrid.Update(ctx, locker, stock, "sku-42", sell, occ.WithObserver(obs), occ.WithObserver(tracer))
//
// A nil MeterProvider or TracerProvider means the global one
// (otel.GetMeterProvider(), otel.GetTracerProvider()).
//
// # Instruments
//
// The meter is named [ScopeName]. Every measurement of an [Observer]
// carries the op attribute ("retry", "update", "txn", "add",
// "hybrid.update" or "hybrid.txn") and the constant attributes given with
// [WithAttributes].
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
//   - hybrid.fenced.writes ({write}, counter): attempts whose write the
//     store refused because their fencing token was stale (cas.ErrFenced):
//     a lease that was lost while its holder still wrote. hybrid.Update
//     retries them with a new lease, so the data is safe; the lock is not.
//   - occ.escalations ({attempt}, counter): attempts that ran exclusively
//     (the store held the key, or a transaction's keys, from the read to
//     the write) because the call had lost occ.DefaultExclusiveAfter
//     writes in a row, or as many as occ.WithExclusiveAfter says.
//   - occ.adaptive.switches ({switch}, counter): keys hybrid.Adaptive moved
//     between its paths, with to = "locked" or "optimistic"
//     ([Observer.AdaptiveSwitch]).
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
// # Locks
//
// [Locker] wraps a hybrid.Locker (through hybrid.ObserveLocker) and records
// hybrid.lock.acquire.duration (how long each Acquire waited),
// hybrid.lease.hold.duration (grant to release or loss),
// hybrid.lease.lost (leases lost before their release, with cause
// "expired" or "revoked") and, for a locker that counts them
// (hybrid.RenewalCounter: etcdcas, rediscas), hybrid.lease.renewals. A
// lock going wrong shows here before the data does: acquire waits rise,
// leases are lost, and then hybrid.fenced.writes counts the writes the
// store refused. Key attributes are off unless [WithKeys].
//
// # Traces
//
// A [Tracer] is an occ.Observer that also implements occ.CallStarter and
// occ.WaitObserver: each call is a span ("occ.update", "hybrid.update",
// ...) whose context the call's function runs with, so the store's spans
// are its children; an event per attempt ([EventAttempt]: number,
// outcome, duration, error, fenced, exclusive) and per wait ([EventWait]: backoff or
// turn, with its duration); the outcome and the attempt count as
// attributes when it ends. A [Locker] adds its lease events
// ([EventLeaseAcquired], [EventLeaseReleased], [EventLeaseLost]) to the
// span of the context a lease is acquired with.
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
