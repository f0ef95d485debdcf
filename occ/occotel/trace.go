package occotel

import (
	"context"
	"errors"
	"strings"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/occ"
)

// Span and event attribute keys.
const (
	keySpanOp       = attribute.Key("occ.op")
	keySpanKey      = attribute.Key("occ.key")
	keySpanOutcome  = attribute.Key("occ.outcome")
	keySpanAttempts = attribute.Key("occ.attempts")
	keySpanReason   = attribute.Key("occ.giveup.reason")

	keyAttemptNumber   = attribute.Key("occ.attempt.number")
	keyAttemptOutcome  = attribute.Key("occ.attempt.outcome")
	keyAttemptDuration = attribute.Key("occ.attempt.duration")
	keyAttemptError    = attribute.Key("occ.attempt.error")
	keyAttemptFenced   = attribute.Key("occ.attempt.fenced")
	keyAttemptExcl     = attribute.Key("occ.attempt.exclusive")

	keyWaitKind     = attribute.Key("occ.wait.kind")
	keyWaitDuration = attribute.Key("occ.wait.duration")
	keyWaitAfter    = attribute.Key("occ.wait.after")
)

// Names of the span events a Tracer adds.
const (
	// EventAttempt is added to a call's span for each attempt.
	EventAttempt = "occ.attempt"
	// EventWait is added for each wait between attempts.
	EventWait = "occ.wait"
)

// Tracer records every Retry, Update, Txn and Add call (and
// hybrid.Update and hybrid.Txn, which run on Retry) as an OpenTelemetry
// span: pass it to occ.WithObserver, beside or instead of an Observer.
//
// A call's span is named after its op ("occ.update", "occ.txn",
// "occ.retry", "occ.add", "hybrid.update", "hybrid.txn"), is a child of
// the span in the caller's context, and is the parent of what the call's
// function does (the store's own spans, and a Locker's lease events):
// occ runs the function with the span's context (occ.CallStarter). It
// carries:
//
//   - attributes occ.op, occ.key (only WithKeys), and, when the call
//     ends, occ.outcome ("success", "failed", "gave-up"), occ.attempts
//     and, for a call that gave up, occ.giveup.reason ("attempts",
//     "budget", "backoff", "context"); the status is Error unless the
//     call succeeded;
//   - an event per attempt, [EventAttempt], with occ.attempt.number,
//     occ.attempt.outcome ("success", "conflict", "retryable",
//     "failed"), occ.attempt.duration (seconds), occ.attempt.error (the
//     error's text), occ.attempt.fenced (true when the store refused a
//     stale fencing token) and occ.attempt.exclusive (true when the
//     attempt ran exclusively: occ.WithExclusiveAfter);
//   - an event per wait between attempts, [EventWait], stamped when the
//     wait began, with occ.wait.kind ("backoff", or "turn": queued behind
//     this process's other calls of a hot key), occ.wait.duration
//     (seconds) and occ.wait.after (the attempts made before it). A
//     retry sent at once from the state a conflict returned has no wait.
//
// The calls that a Combiner's leader carries in its batch are in the
// leader's span (one span per batch); they have no span of their own.
//
// A Tracer is safe for concurrent use; make one per process with
// NewTracer (the zero value is not usable).
type Tracer struct {
	tracer trace.Tracer
	attrs  []attribute.KeyValue
	keys   bool
}

var (
	_ occ.Observer     = (*Tracer)(nil)
	_ occ.CallStarter  = (*Tracer)(nil)
	_ occ.WaitObserver = (*Tracer)(nil)
)

// NewTracer returns a Tracer whose spans come from a tracer named
// ScopeName of tp; a nil tp means the global otel.GetTracerProvider().
// WithAttributes adds attributes to every span; WithKeys adds the key.
func NewTracer(tp trace.TracerProvider, opts ...Option) *Tracer {
	c := newConfig(opts)
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	return &Tracer{tracer: tp.Tracer(ScopeName), attrs: c.attrs, keys: c.keys}
}

// spanKey finds, in a call's context, the span a Tracer started for it:
// a Tracer ends only the spans it started, never the caller's.
type spanKey struct{ t *Tracer }

// spanNames are the span names of the ops occ and hybrid report.
var spanNames = map[string]string{"retry": "occ.retry", "update": "occ.update", "txn": "occ.txn", "add": "occ.add"}

func spanName(op string) string {
	if n, ok := spanNames[op]; ok {
		return n
	}
	if strings.Contains(op, ".") {
		return op
	}
	return "occ." + op
}

// StartCall implements occ.CallStarter: it starts the call's span.
func (t *Tracer) StartCall(ctx context.Context, s occ.CallStart) context.Context {
	attrs := make([]attribute.KeyValue, 0, len(t.attrs)+2)
	attrs = append(attrs, t.attrs...)
	attrs = append(attrs, keySpanOp.String(s.Op))
	if t.keys && s.Key != "" {
		attrs = append(attrs, keySpanKey.String(s.Key))
	}
	ctx, span := t.tracer.Start(ctx, spanName(s.Op), trace.WithSpanKind(trace.SpanKindInternal), trace.WithAttributes(attrs...))
	return context.WithValue(ctx, spanKey{t}, span)
}

// span returns the span t started for the call of ctx, if it records.
func (t *Tracer) span(ctx context.Context) trace.Span {
	span, _ := ctx.Value(spanKey{t}).(trace.Span)
	if span == nil || !span.IsRecording() {
		return nil
	}
	return span
}

// ObserveAttempt implements occ.Observer: it adds an EventAttempt to the
// call's span.
func (t *Tracer) ObserveAttempt(ctx context.Context, a occ.Attempt) {
	span := t.span(ctx)
	if span == nil {
		return
	}
	attrs := make([]attribute.KeyValue, 0, 6)
	attrs = append(attrs,
		keyAttemptNumber.Int(a.Number),
		keyAttemptOutcome.String(a.Outcome.String()),
		keyAttemptDuration.Float64(a.Latency.Seconds()))
	if a.Exclusive {
		attrs = append(attrs, keyAttemptExcl.Bool(true))
	}
	if a.Err != nil {
		attrs = append(attrs, keyAttemptError.String(a.Err.Error()))
		if errors.Is(a.Err, cas.ErrFenced) {
			attrs = append(attrs, keyAttemptFenced.Bool(true))
		}
	}
	span.AddEvent(EventAttempt, trace.WithAttributes(attrs...))
}

// ObserveWait implements occ.WaitObserver: it adds an EventWait, stamped
// when the wait began, to the call's span.
func (t *Tracer) ObserveWait(ctx context.Context, w occ.Wait) {
	span := t.span(ctx)
	if span == nil {
		return
	}
	span.AddEvent(EventWait,
		trace.WithTimestamp(time.Now().Add(-w.Duration)),
		trace.WithAttributes(
			keyWaitKind.String(w.Kind.String()),
			keyWaitDuration.Float64(w.Duration.Seconds()),
			keyWaitAfter.Int(w.After)))
}

// ObserveCall implements occ.Observer: it sets the call's outcome and
// attempts on its span, and ends it.
func (t *Tracer) ObserveCall(ctx context.Context, c occ.Call) {
	span, _ := ctx.Value(spanKey{t}).(trace.Span)
	if span == nil {
		return
	}
	defer span.End()
	if !span.IsRecording() {
		return
	}
	span.SetAttributes(keySpanOutcome.String(c.Outcome.String()), keySpanAttempts.Int(c.Attempts))
	switch c.Outcome {
	case occ.OutcomeSuccess:
		return
	case occ.OutcomeGaveUp:
		span.SetAttributes(keySpanReason.String(reasonNames[giveUpReason(c.Err)]))
	}
	msg := ""
	if c.Err != nil {
		msg = c.Err.Error()
	}
	span.SetStatus(codes.Error, msg)
}
