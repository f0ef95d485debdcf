package occotel

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/hybrid"
	"github.com/occkit/occkit/occ"
)

// ScopeName is the instrumentation scope (meter name) the instruments are
// created under.
const ScopeName = "github.com/occkit/occkit/occ"

// Attribute keys set on measurements.
const (
	keyOp      = attribute.Key("op")
	keyOutcome = attribute.Key("outcome")
	keyReason  = attribute.Key("reason")
)

// Give-up reasons, the values of the reason attribute of occ.giveups.
const (
	reasonAttempts = iota
	reasonBudget
	reasonBackOff
	reasonContext
	numReasons
)

var reasonNames = [numReasons]string{
	reasonAttempts: "attempts",
	reasonBudget:   "budget",
	reasonBackOff:  "backoff",
	reasonContext:  "context",
}

// numOutcomes covers every occ.Outcome plus one slot for a value this
// package does not know (recorded as "unknown").
const numOutcomes = int(occ.OutcomeGaveUp) + 2

func outcomeIndex(o occ.Outcome) int {
	if o > occ.OutcomeGaveUp {
		return numOutcomes - 1
	}
	return int(o)
}

// knownOps are the Op values occ and hybrid report today; their attribute
// sets are built by New. Any other Op gets its sets built on first use.
var knownOps = []string{"retry", "update", "txn", "add", hybrid.OpUpdate, hybrid.OpTxn}

// Option configures New.
type Option func(*config)

type config struct {
	attrs []attribute.KeyValue
	keys  bool
}

func newConfig(opts []Option) config {
	var c config
	for _, opt := range opts {
		if opt != nil {
			opt(&c)
		}
	}
	return c
}

// WithAttributes adds constant attributes to every measurement, such as the
// name of the store or of the service. They must have bounded cardinality.
// The attributes op, outcome and reason are set by the Observer and take
// precedence over constant attributes with the same key. Several
// WithAttributes options add up.
func WithAttributes(attrs ...attribute.KeyValue) Option {
	return func(c *config) { c.attrs = append(c.attrs, attrs...) }
}

// WithKeys records the key of each call and lease: as the occ.key
// attribute of a Tracer's spans and as the key attribute of a Locker's
// metrics. Off by default: keys are unbounded, and as a metric attribute
// each key is a time series of its own (and a key may name a customer).
// Turn it on for a Locker only where its keys are few (a handful of hot
// keys, a fixed set of jobs). Observer's occ.* metrics never carry keys.
func WithKeys() Option {
	return func(c *config) { c.keys = true }
}

// Observer records occ attempts and calls as OpenTelemetry metrics. Pass it
// to occ.WithObserver. An Observer is safe for concurrent use and can serve
// any number of concurrent calls; create it with New (the zero value is not
// usable).
//
// Attempt and call keys are never recorded: they are unbounded.
type Observer struct {
	attempts     metric.Int64Counter
	conflicts    metric.Int64Counter
	callAttempts metric.Int64Histogram
	callDuration metric.Float64Histogram
	giveups      metric.Int64Counter
	rejections   metric.Int64Counter
	fenced       metric.Int64Counter
	escalations  metric.Int64Counter
	switches     metric.Int64Counter
	switchOpts   [2][]metric.AddOption // to optimistic, to locked

	constAttrs []attribute.KeyValue

	// ops maps an Op to its precomputed measurement options. The map is
	// never modified once published: an unknown Op copies it under mu.
	ops atomic.Pointer[map[string]*opOptions]
	mu  sync.Mutex
}

var _ occ.Observer = (*Observer)(nil)

// opOptions are the measurement options of one Op, built once so that
// recording allocates nothing. A metric.MeasurementOption serves both as an
// AddOption and a RecordOption; the slices are kept so that a variadic call
// does not build a new one.
type opOptions struct {
	op         []metric.AddOption                 // {op}
	outcome    [numOutcomes][]metric.AddOption    // {op, outcome}
	outcomeRec [numOutcomes][]metric.RecordOption // {op, outcome}
	reason     [numReasons][]metric.AddOption     // {op, reason}
}

// New returns an Observer whose instruments are created by a meter named
// ScopeName from mp; a nil mp means the global otel.GetMeterProvider().
func New(mp metric.MeterProvider, opts ...Option) (*Observer, error) {
	c := newConfig(opts)
	in := newInstruments(mp)
	o := &Observer{
		attempts: in.counter("occ.attempts", "{attempt}",
			"Attempts of occ.Retry, occ.Update and occ.Txn calls: every call of the function, by outcome."),
		conflicts: in.counter("occ.conflicts", "{conflict}",
			"Attempts that failed with a version conflict."),
		callAttempts: in.int64Histogram("occ.call.attempts", "{attempt}",
			"Attempts per occ call.",
			1, 2, 3, 4, 5, 7, 10, 15, 20, 30, 50),
		callDuration: in.durations("occ.call.duration",
			"Duration of occ calls, all attempts and waits included."),
		giveups: in.counter("occ.giveups", "{call}",
			"occ calls that gave up while still failing with a retryable error, by reason: attempts, budget, backoff or context."),
		rejections: in.counter("occ.budget.rejections", "{call}",
			"occ calls that gave up because the shared retry budget refused a retry."),
		fenced: in.counter("hybrid.fenced.writes", "{write}",
			"Attempts whose write the store refused because their fencing token was stale (cas.ErrFenced): a lease lost before its write."),
		escalations: in.counter("occ.escalations", "{attempt}",
			"Attempts that ran exclusively, the store holding the key from read to write, because the call had lost too many writes in a row (occ.WithExclusiveAfter)."),
		switches: in.counter("occ.adaptive.switches", "{switch}",
			"Keys that hybrid.Adaptive switched between optimistic updates and the lease path, by the mode switched to."),
		constAttrs: c.attrs,
	}
	if in.err != nil {
		return nil, fmt.Errorf("occotel: creating instruments: %w", in.err)
	}
	for i, to := range []string{"optimistic", "locked"} {
		o.switchOpts[i] = []metric.AddOption{metric.WithAttributeSet(attrSet(o.constAttrs, attribute.String("to", to)))}
	}

	ops := make(map[string]*opOptions, len(knownOps))
	for _, op := range knownOps {
		ops[op] = o.build(op)
	}
	o.ops.Store(&ops)
	return o, nil
}

// build returns the measurement options of op.
func (o *Observer) build(op string) *opOptions {
	set := func(kv ...attribute.KeyValue) metric.MeasurementOption {
		return metric.WithAttributeSet(attrSet(o.constAttrs, kv...))
	}
	opKV := keyOp.String(op)
	p := &opOptions{op: []metric.AddOption{set(opKV)}}
	for i := range numOutcomes {
		name := "unknown"
		if i < numOutcomes-1 {
			name = occ.Outcome(i).String()
		}
		s := set(opKV, keyOutcome.String(name))
		p.outcome[i] = []metric.AddOption{s}
		p.outcomeRec[i] = []metric.RecordOption{s}
	}
	for i, name := range reasonNames {
		p.reason[i] = []metric.AddOption{set(opKV, keyReason.String(name))}
	}
	return p
}

// options returns the measurement options of op, building them on the first
// use of an Op that New did not know.
func (o *Observer) options(op string) *opOptions {
	if p, ok := (*o.ops.Load())[op]; ok {
		return p
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	old := *o.ops.Load()
	if p, ok := old[op]; ok {
		return p
	}
	p := o.build(op)
	ops := make(map[string]*opOptions, len(old)+1)
	for k, v := range old {
		ops[k] = v
	}
	ops[op] = p
	o.ops.Store(&ops)
	return p
}

// ObserveAttempt implements occ.Observer: it counts the attempt in
// occ.attempts; when it failed with a conflict, in occ.conflicts; when the
// store refused its stale fencing token (cas.ErrFenced), in
// hybrid.fenced.writes; when it ran exclusively, in occ.escalations.
func (o *Observer) ObserveAttempt(ctx context.Context, a occ.Attempt) {
	p := o.options(a.Op)
	o.attempts.Add(ctx, 1, p.outcome[outcomeIndex(a.Outcome)]...)
	if a.Outcome == occ.OutcomeConflict {
		o.conflicts.Add(ctx, 1, p.op...)
	}
	if a.Err != nil && a.Outcome != occ.OutcomeSuccess && errors.Is(a.Err, cas.ErrFenced) {
		o.fenced.Add(ctx, 1, p.op...)
	}
	if a.Exclusive {
		o.escalations.Add(ctx, 1, p.op...)
	}
}

// ObserveCall implements occ.Observer: it records the call's attempts and
// duration and, when it gave up, counts it in occ.giveups (and in
// occ.budget.rejections when the budget was the reason).
func (o *Observer) ObserveCall(ctx context.Context, c occ.Call) {
	p := o.options(c.Op)
	i := outcomeIndex(c.Outcome)
	o.callAttempts.Record(ctx, int64(c.Attempts), p.outcomeRec[i]...)
	o.callDuration.Record(ctx, c.Latency.Seconds(), p.outcomeRec[i]...)
	if c.Outcome != occ.OutcomeGaveUp {
		return
	}
	r := giveUpReason(c.Err)
	o.giveups.Add(ctx, 1, p.reason[r]...)
	if r == reasonBudget {
		o.rejections.Add(ctx, 1, p.op...)
	}
}

// giveUpReason classifies the error of a call that gave up. Only the
// GiveUpError's Reason is looked at, not its Last error, so that a nested
// occ call that gave up inside the function does not lend its reason.
func giveUpReason(err error) int {
	gu, ok := err.(*occ.GiveUpError) // what occ returns: no allocation
	if !ok {
		var wrapped *occ.GiveUpError
		if !errors.As(err, &wrapped) {
			return reasonContext
		}
		gu = wrapped
	}
	switch {
	case errors.Is(gu.Reason, occ.ErrAttemptsExhausted):
		return reasonAttempts
	case errors.Is(gu.Reason, occ.ErrBudgetExhausted):
		return reasonBudget
	case errors.Is(gu.Reason, occ.ErrBackOffStopped):
		return reasonBackOff
	default:
		return reasonContext
	}
}

// AdaptiveSwitch counts a switch of hybrid.Adaptive in
// occ.adaptive.switches (attribute to = "locked" or "optimistic"). Its
// signature is that of hybrid.AdaptiveConfig.OnSwitch:
//
//	hybrid.NewAdaptive(locker, hybrid.AdaptiveConfig{OnSwitch: obs.AdaptiveSwitch})
//
// The key is not recorded (unbounded cardinality).
func (o *Observer) AdaptiveSwitch(key string, locked bool, score float64) {
	i := 0
	if locked {
		i = 1
	}
	o.switches.Add(context.Background(), 1, o.switchOpts[i]...)
}
