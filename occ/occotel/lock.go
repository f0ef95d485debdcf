package occotel

import (
	"context"
	"errors"
	"fmt"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/occkit/occkit/hybrid"
)

// Attribute keys of the lock metrics and lease events.
const (
	keyLockOutcome = attribute.Key("outcome")
	keyLockEnd     = attribute.Key("end")
	keyLockCause   = attribute.Key("cause")
	keyLockKey     = attribute.Key("key")

	keyLeaseToken = attribute.Key("hybrid.lease.token")
	keyLeaseWait  = attribute.Key("hybrid.lease.wait")
	keyLeaseHeld  = attribute.Key("hybrid.lease.held")
	keyLeaseCause = attribute.Key("hybrid.lease.cause")
	keyLeaseError = attribute.Key("hybrid.lease.error")
)

// Names of the span events a Locker adds to the span of the context its
// leases are acquired with (a Tracer's hybrid.update span, say).
const (
	EventLeaseAcquired = "hybrid.lease.acquired"
	EventLeaseRefused  = "hybrid.lease.acquire_failed"
	EventLeaseReleased = "hybrid.lease.released"
	EventLeaseLost     = "hybrid.lease.lost"
)

// Values of the outcome attribute of hybrid.lock.acquire.duration.
const (
	acquireOK = iota
	acquireCanceled
	acquireError
	numAcquireOutcomes
)

var acquireNames = [numAcquireOutcomes]string{acquireOK: "acquired", acquireCanceled: "canceled", acquireError: "error"}

// Values of the end attribute of hybrid.lease.hold.duration.
const (
	endReleased = iota
	endLost
	endReleaseFailed
	numEnds
)

var endNames = [numEnds]string{endReleased: "released", endLost: "lost", endReleaseFailed: "release_failed"}

// Values of the cause attribute of hybrid.lease.lost.
const (
	causeExpired = iota
	causeRevoked
	numCauses
)

var causeNames = [numCauses]string{causeExpired: "expired", causeRevoked: "revoked"}

// Locker returns l with its leases measured: every Acquire and every
// lease's end are recorded as OpenTelemetry metrics of a meter named
// ScopeName from mp (a nil mp means the global otel.GetMeterProvider()),
// through hybrid.ObserveLocker. Use the returned Locker where l was used
// (hybrid.Update, hybrid.Txn, hybrid.NewAdaptive):
//
//	locker, err := occotel.Locker(redisLocker, mp, occotel.WithAttributes(attribute.String("locker", "redis")))
//
// It records hybrid.lock.acquire.duration, hybrid.lease.hold.duration,
// hybrid.lease.lost and, if l is a hybrid.RenewalCounter,
// hybrid.lease.renewals (pass the locker that renews, not a wrapper of
// it); key attributes only with WithKeys. A lease acquired with a context
// that carries a recording span adds its events ([EventLeaseAcquired] and
// the others) to that span. Stale writes are counted by an Observer given
// to hybrid.Update, not here. See docs/operations.md#lease-instruments.
//
// Call Locker once per locker: each call creates its own instruments'
// callbacks. The returned Locker is safe for concurrent use if l is.
func Locker(l hybrid.Locker, mp metric.MeterProvider, opts ...Option) (hybrid.Locker, error) {
	c := newConfig(opts)
	in := newInstruments(mp)
	o := &lockObserver{
		acquire: in.durations("hybrid.lock.acquire.duration",
			"Duration of lock acquisitions, the wait behind other holders included, by outcome: acquired, canceled or error."),
		hold: in.durations("hybrid.lease.hold.duration",
			"How long leases were held, from the grant to their release or loss, by end: released, lost or release_failed."),
		lost: in.counter("hybrid.lease.lost", "{lease}",
			"Leases lost before their holder released them, by cause: expired (ran out unrenewed) or revoked (taken away before expiry)."),
		attrs: c.attrs,
		keys:  c.keys,
	}
	if rc, ok := l.(hybrid.RenewalCounter); ok {
		renewOpts := []metric.ObserveOption{metric.WithAttributeSet(attribute.NewSet(c.attrs...))}
		_, err := in.m.Int64ObservableCounter("hybrid.lease.renewals",
			metric.WithUnit("{renewal}"),
			metric.WithDescription("Renewals of leases (or of the sessions they live on) that succeeded."),
			metric.WithInt64Callback(func(_ context.Context, obs metric.Int64Observer) error {
				obs.Observe(int64(rc.Renewals()), renewOpts...)
				return nil
			}))
		in.err = errors.Join(in.err, err)
	}
	if in.err != nil {
		return nil, fmt.Errorf("occotel: creating lock instruments: %w", in.err)
	}
	for i, name := range acquireNames {
		o.acquireOpts[i] = o.recordOpts(keyLockOutcome.String(name))
	}
	for i, name := range endNames {
		o.holdOpts[i] = o.recordOpts(keyLockEnd.String(name))
	}
	for i, name := range causeNames {
		o.lostOpts[i] = []metric.AddOption{metric.WithAttributeSet(o.set(keyLockCause.String(name)))}
	}
	return hybrid.ObserveLocker(l, o), nil
}

// lockObserver records a Locker's acquisitions and leases; it is the
// hybrid.LockObserver of Locker.
type lockObserver struct {
	acquire, hold metric.Float64Histogram
	lost          metric.Int64Counter

	attrs []attribute.KeyValue
	keys  bool
	// Measurement options without key, built once.
	acquireOpts [numAcquireOutcomes][]metric.RecordOption
	holdOpts    [numEnds][]metric.RecordOption
	lostOpts    [numCauses][]metric.AddOption
}

// set returns the attribute set of the constant attributes and kv.
func (o *lockObserver) set(kv ...attribute.KeyValue) attribute.Set {
	return attrSet(o.attrs, kv...)
}

func (o *lockObserver) recordOpts(kv ...attribute.KeyValue) []metric.RecordOption {
	return []metric.RecordOption{metric.WithAttributeSet(o.set(kv...))}
}

// withKey returns the options of a measurement of key: pre (no key) unless
// keys are recorded.
func withKey[O any](o *lockObserver, pre []O, key string, kv attribute.KeyValue, mk func(attribute.Set) O) []O {
	if !o.keys {
		return pre
	}
	return []O{mk(o.set(kv, keyLockKey.String(key)))}
}

func recordOption(s attribute.Set) metric.RecordOption { return metric.WithAttributeSet(s) }
func addOption(s attribute.Set) metric.AddOption       { return metric.WithAttributeSet(s) }

// ObserveAcquire implements hybrid.LockObserver.
func (o *lockObserver) ObserveAcquire(ctx context.Context, a hybrid.Acquired) {
	i := acquireOK
	switch {
	case a.Err == nil:
	case errors.Is(a.Err, context.Canceled) || errors.Is(a.Err, context.DeadlineExceeded):
		i = acquireCanceled
	default:
		i = acquireError
	}
	o.acquire.Record(ctx, a.Wait.Seconds(), withKey(o, o.acquireOpts[i], a.Key, keyLockOutcome.String(acquireNames[i]), recordOption)...)
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		if a.Err != nil {
			span.AddEvent(EventLeaseRefused, trace.WithAttributes(keyLeaseWait.Float64(a.Wait.Seconds()), keyLeaseError.String(a.Err.Error())))
		} else {
			span.AddEvent(EventLeaseAcquired, trace.WithAttributes(keyLeaseToken.Int64(int64(a.Token)), keyLeaseWait.Float64(a.Wait.Seconds())))
		}
	}
}

// ObserveLeaseEnd implements hybrid.LockObserver.
func (o *lockObserver) ObserveLeaseEnd(ctx context.Context, e hybrid.LeaseEnd) {
	end := endReleased
	switch {
	case e.Lost:
		end = endLost
	case e.Err != nil:
		end = endReleaseFailed
	}
	o.hold.Record(ctx, e.Held.Seconds(), withKey(o, o.holdOpts[end], e.Key, keyLockEnd.String(endNames[end]), recordOption)...)
	cause := causeRevoked
	if e.Lost {
		if e.Expired {
			cause = causeExpired
		}
		o.lost.Add(ctx, 1, withKey(o, o.lostOpts[cause], e.Key, keyLockCause.String(causeNames[cause]), addOption)...)
	}
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	attrs := []attribute.KeyValue{keyLeaseToken.Int64(int64(e.Token)), keyLeaseHeld.Float64(e.Held.Seconds())}
	switch {
	case e.Lost:
		attrs = append(attrs, keyLeaseCause.String(causeNames[cause]))
		if e.Cause != nil {
			attrs = append(attrs, keyLeaseError.String(e.Cause.Error()))
		}
		span.AddEvent(EventLeaseLost, trace.WithAttributes(attrs...))
	case e.Err != nil:
		attrs = append(attrs, keyLeaseError.String(e.Err.Error()))
		span.AddEvent(EventLeaseReleased, trace.WithAttributes(attrs...))
	default:
		span.AddEvent(EventLeaseReleased, trace.WithAttributes(attrs...))
	}
}
