package occotel_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cenkalti/backoff/v4"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/occkit/occkit/adapters/memcas"
	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/hybrid"
	"github.com/occkit/occkit/occ"
	"github.com/occkit/occkit/occ/occotel"
)

// spans is a TracerProvider that keeps every ended span in memory.
type spans struct {
	t   *testing.T
	exp *tracetest.InMemoryExporter
	tp  *sdktrace.TracerProvider
}

func newSpans(t *testing.T) *spans {
	t.Helper()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	shutdownAtCleanup(t, tp)
	return &spans{t: t, exp: exp, tp: tp}
}

// named returns the one ended span called name.
func (s *spans) named(name string) tracetest.SpanStub {
	s.t.Helper()
	var found []tracetest.SpanStub
	for _, sp := range s.exp.GetSpans() {
		if sp.Name == name {
			found = append(found, sp)
		}
	}
	if len(found) != 1 {
		s.t.Fatalf("%d spans named %s, want 1 (all: %v)", len(found), name, s.exp.GetSpans().Snapshots())
	}
	return found[0]
}

// attr returns the value of key among attrs.
func attr(attrs []attribute.KeyValue, key string) (attribute.Value, bool) {
	for _, kv := range attrs {
		if string(kv.Key) == key {
			return kv.Value, true
		}
	}
	return attribute.Value{}, false
}

// events returns the span's events called name.
func events(sp tracetest.SpanStub, name string) []sdktrace.Event {
	var evs []sdktrace.Event
	for _, e := range sp.Events {
		if e.Name == name {
			evs = append(evs, e)
		}
	}
	return evs
}

func wantAttr(t *testing.T, what string, attrs []attribute.KeyValue, key string, want any) {
	t.Helper()
	v, ok := attr(attrs, key)
	if !ok {
		t.Errorf("%s: no attribute %s in %v", what, key, attrs)
		return
	}
	if got := v.AsInterface(); got != want {
		t.Errorf("%s: %s = %v (%T), want %v (%T)", what, key, got, got, want, want)
	}
}

// TestTracerRetryConflicts: a Retry whose first three writes conflict is
// one span, a child of the caller's, with three conflict events, one
// success event, and a wait event of the backoff's duration after each
// conflict, in order; the store's work runs under the call's span.
func TestTracerRetryConflicts(t *testing.T) {
	s := newSpans(t)
	tracer := occotel.NewTracer(s.tp)
	ctx, parent := s.tp.Tracer("test").Start(context.Background(), "request")
	store := memcas.New()
	fn := conflictingWrites(store, "k", 3)
	var inner trace.SpanContext
	err := occ.Retry(ctx, func(ctx context.Context) error {
		inner = trace.SpanContextFromContext(ctx)
		return fn(ctx)
	}, occ.WithObserver(tracer), occ.WithBackOff(backoff.NewConstantBackOff(2*time.Millisecond)))
	if err != nil {
		t.Fatal(err)
	}
	parent.End()

	sp := s.named("occ.retry")
	if sp.Parent.SpanID() != parent.SpanContext().SpanID() || sp.SpanContext.TraceID() != parent.SpanContext().TraceID() {
		t.Errorf("span's parent %v, want the caller's span %v", sp.Parent.SpanID(), parent.SpanContext().SpanID())
	}
	if inner.SpanID() != sp.SpanContext.SpanID() {
		t.Errorf("the function ran under span %v, want the call's %v", inner.SpanID(), sp.SpanContext.SpanID())
	}
	if sp.SpanKind != trace.SpanKindInternal || sp.Status.Code != codes.Unset {
		t.Errorf("kind %v status %v, want internal and unset", sp.SpanKind, sp.Status)
	}
	wantAttr(t, "span", sp.Attributes, "occ.op", "retry")
	wantAttr(t, "span", sp.Attributes, "occ.outcome", "success")
	wantAttr(t, "span", sp.Attributes, "occ.attempts", int64(4))
	if _, ok := attr(sp.Attributes, "occ.key"); ok {
		t.Error("occ.key recorded without WithKeys")
	}

	var order []string
	conflicts, waits := 0, 0
	for i, e := range sp.Events {
		outcome, _ := attr(e.Attributes, "occ.attempt.outcome")
		order = append(order, e.Name+":"+outcome.AsString())
		if i > 0 && e.Time.Before(sp.Events[i-1].Time) {
			t.Errorf("event %d (%s) stamped before the one before it", i, e.Name)
		}
		switch e.Name {
		case occotel.EventAttempt:
			if outcome.AsString() == "conflict" {
				conflicts++
				wantAttr(t, "conflict event", e.Attributes, "occ.attempt.number", int64(conflicts))
				if msg, _ := attr(e.Attributes, "occ.attempt.error"); msg.AsString() == "" {
					t.Errorf("conflict event without its error: %v", e.Attributes)
				}
			}
			if d, _ := attr(e.Attributes, "occ.attempt.duration"); d.AsFloat64() <= 0 {
				t.Errorf("attempt event with duration %v", d.AsFloat64())
			}
		case occotel.EventWait:
			waits++
			wantAttr(t, "wait event", e.Attributes, "occ.wait.kind", "backoff")
			wantAttr(t, "wait event", e.Attributes, "occ.wait.after", int64(waits))
			if d, _ := attr(e.Attributes, "occ.wait.duration"); d.AsFloat64() < 0.002 {
				t.Errorf("wait event %d lasted %vs, want the backoff's 2ms at least", waits, d.AsFloat64())
			}
		}
	}
	want := []string{
		"occ.attempt:conflict", "occ.wait:", "occ.attempt:conflict", "occ.wait:",
		"occ.attempt:conflict", "occ.wait:", "occ.attempt:success",
	}
	if len(order) != len(want) {
		t.Fatalf("events %v, want %v", order, want)
	}
	for i := range want {
		if order[i] != want[i] {
			t.Fatalf("events %v, want %v", order, want)
		}
	}
}

// TestTracerUpdate: an Update whose writes lose N times shows N conflict
// events; the first conflict's retry runs at once from the state it
// carried (no wait), the later ones wait.
func TestTracerUpdate(t *testing.T) {
	const n = 4
	s := newSpans(t)
	tracer := occotel.NewTracer(s.tp, occotel.WithKeys(), occotel.WithAttributes(attribute.String("store", "memcas")))
	ctx := context.Background()
	counters := cas.NewTyped(memcas.New(), cas.JSON[int]())
	if _, _, err := occ.Update(ctx, counters, "visits", contendedIncrement(ctx, counters, "visits", n),
		occ.WithObserver(tracer), occ.WithBackOff(&backoff.ZeroBackOff{})); err != nil {
		t.Fatal(err)
	}
	sp := s.named("occ.update")
	wantAttr(t, "span", sp.Attributes, "occ.key", "visits")
	wantAttr(t, "span", sp.Attributes, "store", "memcas")
	wantAttr(t, "span", sp.Attributes, "occ.attempts", int64(n+1))
	conflicts := 0
	for _, e := range events(sp, occotel.EventAttempt) {
		if v, _ := attr(e.Attributes, "occ.attempt.outcome"); v.AsString() == "conflict" {
			conflicts++
		}
	}
	check(t, "conflict events", conflicts, n)
	check(t, "attempt events", len(events(sp, occotel.EventAttempt)), n+1)
	check(t, "wait events", len(events(sp, occotel.EventWait)), n-1)
}

// TestTracerGaveUp: a call that gives up ends its span with an error
// status, the outcome, the attempts and the reason.
func TestTracerGaveUp(t *testing.T) {
	s := newSpans(t)
	tracer := occotel.NewTracer(s.tp)
	err := occ.Retry(context.Background(), conflictingWrites(memcas.New(), "k", math.MaxInt),
		occ.WithObserver(tracer), occ.WithMaxAttempts(3), occ.WithBackOff(&backoff.ZeroBackOff{}))
	if !errors.Is(err, occ.ErrAttemptsExhausted) {
		t.Fatalf("err = %v", err)
	}
	sp := s.named("occ.retry")
	if sp.Status.Code != codes.Error || sp.Status.Description != err.Error() {
		t.Errorf("status %+v, want Error with %q", sp.Status, err)
	}
	wantAttr(t, "span", sp.Attributes, "occ.outcome", "gave-up")
	wantAttr(t, "span", sp.Attributes, "occ.attempts", int64(3))
	wantAttr(t, "span", sp.Attributes, "occ.giveup.reason", "attempts")
	check(t, "attempt events", len(events(sp, occotel.EventAttempt)), 3)
}

// TestTracerTxn: a transaction whose first commit conflicts.
func TestTracerTxn(t *testing.T) {
	s := newSpans(t)
	tracer := occotel.NewTracer(s.tp)
	ctx := context.Background()
	store := memcas.New()
	attempt := 0
	if err := occ.Txn(ctx, store, func(tx *occ.Tx) error {
		attempt++
		if _, _, err := tx.Get("a"); err != nil {
			return err
		}
		if attempt == 1 {
			if _, err := store.CompareAndSwap(ctx, "a", 0, []byte("theirs")); err != nil {
				return err
			}
		}
		tx.Put("a", []byte("mine"))
		return nil
	}, occ.WithObserver(tracer), occ.WithBackOff(&backoff.ZeroBackOff{})); err != nil {
		t.Fatal(err)
	}
	sp := s.named("occ.txn")
	wantAttr(t, "span", sp.Attributes, "occ.attempts", int64(2))
	evs := events(sp, occotel.EventAttempt)
	check(t, "attempt events", len(evs), 2)
	wantAttr(t, "first attempt", evs[0].Attributes, "occ.attempt.outcome", "conflict")
}

// TestTracerNotSampled: with a sampler that drops everything, the calls
// still work and nothing is recorded.
func TestTracerNotSampled(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp), sdktrace.WithSampler(sdktrace.NeverSample()))
	defer tp.Shutdown(context.Background())
	tracer := occotel.NewTracer(tp)
	if err := occ.Retry(context.Background(), conflictingWrites(memcas.New(), "k", 2), occ.WithObserver(tracer), occ.WithBackOff(&backoff.ZeroBackOff{})); err != nil {
		t.Fatal(err)
	}
	if n := len(exp.GetSpans()); n != 0 {
		t.Fatalf("%d spans exported, want none", n)
	}
}

// TestTracerNilProviderUsesGlobal: NewTracer(nil) takes the global
// TracerProvider.
func TestTracerNilProviderUsesGlobal(t *testing.T) {
	s := newSpans(t)
	prev := otel.GetTracerProvider()
	otel.SetTracerProvider(s.tp)
	defer otel.SetTracerProvider(prev)
	if err := occ.Retry(context.Background(), func(context.Context) error { return nil }, occ.WithObserver(occotel.NewTracer(nil))); err != nil {
		t.Fatal(err)
	}
	s.named("occ.retry")
}

// TestTracerWithObserver: a Tracer and an Observer side by side on one
// call both see it.
func TestTracerWithObserver(t *testing.T) {
	s := newSpans(t)
	h := newHarness(t)
	if err := occ.Retry(context.Background(), conflictingWrites(memcas.New(), "k", 2), h.opts(occ.WithObserver(occotel.NewTracer(s.tp)))...); err != nil {
		t.Fatal(err)
	}
	sp := s.named("occ.retry")
	wantAttr(t, "span", sp.Attributes, "occ.attempts", int64(3))
	check(t, "conflicts{retry}", h.collect().counter("occ.conflicts", op("retry")), 2)
}

// TestHybridUpdateFenced: a locker whose tokens fell behind the store's
// (a lock service that lost its token counter in a failover, say) gets
// its writes refused with cas.ErrFenced until its tokens catch up: each
// refusal is counted in hybrid.fenced.writes, shows in the hybrid.update
// span as a fenced attempt, and each lease as acquired and released.
func TestHybridUpdateFenced(t *testing.T) {
	ctx := context.Background()
	s := newSpans(t)
	h := newHarness(t)
	store := memcas.New()
	counters := cas.NewTyped(store, cas.JSON[int]())
	incr := func(n int, _ bool) (int, error) { return n + 1, nil }

	// The key was last written under token 3 of another locker.
	if _, err := store.CompareAndSwapFenced(ctx, "k", 0, 3, []byte("1")); err != nil {
		t.Fatal(err)
	}

	// A fresh locker hands out tokens 1, 2, 3: the first two are stale.
	reader := newMeters(t)
	locker, err := occotel.Locker(&countingLocker{Locker: hybrid.NewLocalLocker(time.Second)}, reader.mp)
	if err != nil {
		t.Fatal(err)
	}
	n, _, err := hybrid.Update(ctx, locker, counters, "k", incr,
		occ.WithObserver(h.obs), occ.WithObserver(occotel.NewTracer(s.tp)), occ.WithBackOff(&backoff.ZeroBackOff{}))
	if err != nil {
		t.Fatal(err)
	}
	check(t, "counter", n, 2)

	m := h.collect()
	check(t, "fenced{hybrid.update}", m.counter("hybrid.fenced.writes", op("hybrid.update")), 2)
	check(t, "fenced", m.total("hybrid.fenced.writes"), 2)
	check(t, "attempts{hybrid.update,retryable}", m.counter("occ.attempts", op("hybrid.update"), outcome("retryable")), 2)
	count, sum := m.callAttempts(op("hybrid.update"), outcome("success"))
	check(t, "call.attempts{hybrid.update,success} count", count, 1)
	check(t, "call.attempts{hybrid.update,success} sum", sum, 3)
	if mm, ok := m.find("hybrid.fenced.writes"); !ok || mm.Unit != "{write}" || mm.Description == "" {
		t.Errorf("hybrid.fenced.writes: unit %q, description %q", mm.Unit, mm.Description)
	}

	sp := s.named("hybrid.update")
	wantAttr(t, "span", sp.Attributes, "occ.op", "hybrid.update")
	wantAttr(t, "span", sp.Attributes, "occ.outcome", "success")
	wantAttr(t, "span", sp.Attributes, "occ.attempts", int64(3))
	fenced := 0
	for _, e := range events(sp, occotel.EventAttempt) {
		if v, ok := attr(e.Attributes, "occ.attempt.fenced"); ok && v.AsBool() {
			fenced++
			wantAttr(t, "fenced attempt", e.Attributes, "occ.attempt.outcome", "retryable")
		}
	}
	check(t, "fenced attempt events", fenced, 2)
	acquired := events(sp, occotel.EventLeaseAcquired)
	check(t, "lease acquired events", len(acquired), 3)
	for i, e := range acquired {
		wantAttr(t, "lease acquired", e.Attributes, "hybrid.lease.token", int64(i+1))
	}
	check(t, "lease released events", len(events(sp, occotel.EventLeaseReleased)), 3)

	lm := reader.collect()
	dp, _ := histogramPoint[float64](lm, "hybrid.lock.acquire.duration", outcome("acquired"))
	check(t, "acquire.duration{acquired} count", dp.Count, 3)
	hp, _ := histogramPoint[float64](lm, "hybrid.lease.hold.duration", attribute.String("end", "released"))
	check(t, "hold.duration{released} count", hp.Count, 3)
	check(t, "lost", lm.total("hybrid.lease.lost"), 0)
}

// countingLocker is a local locker whose tokens count from 1, as those
// of a lock service that lost its token counter would: behind the tokens
// a store has seen.
type countingLocker struct {
	hybrid.Locker
	n atomic.Uint64
}

func (c *countingLocker) Acquire(ctx context.Context, key string) (hybrid.Lease, error) {
	l, err := c.Locker.Acquire(ctx, key)
	if err != nil {
		return nil, err
	}
	return countedLease{ExpiringLease: l.(hybrid.ExpiringLease), token: c.n.Add(1)}, nil
}

// countedLease is a lease of countingLocker's.
type countedLease struct {
	hybrid.ExpiringLease
	token uint64
}

func (l countedLease) Token() uint64 { return l.token }

// TestHybridTxnSpan: hybrid.Txn's span is hybrid.txn, with its leases.
func TestHybridTxnSpan(t *testing.T) {
	ctx := context.Background()
	s := newSpans(t)
	reader := newMeters(t)
	locker, err := occotel.Locker(hybrid.NewLocalLocker(time.Second), reader.mp)
	if err != nil {
		t.Fatal(err)
	}
	store := memcas.New()
	if err := hybrid.Txn(ctx, locker, store, []string{"b", "a"}, func(tx *occ.Tx) error {
		tx.Put("a", []byte("1"))
		tx.Put("b", []byte("2"))
		return nil
	}, occ.WithObserver(occotel.NewTracer(s.tp))); err != nil {
		t.Fatal(err)
	}
	sp := s.named("hybrid.txn")
	wantAttr(t, "span", sp.Attributes, "occ.attempts", int64(1))
	check(t, "lease acquired events", len(events(sp, occotel.EventLeaseAcquired)), 2)
	check(t, "lease released events", len(events(sp, occotel.EventLeaseReleased)), 2)
}

// exclusiveStore is memcas with cas.Exclusive: UpdateExclusive reads and
// writes the key under a mutex that its plain writes take too, as a row
// lock would (the store's side of escalation; adapters with a real one
// pass castest).
type exclusiveStore struct {
	*memcas.Store
	mu sync.Mutex
}

func (s *exclusiveStore) CompareAndSwap(ctx context.Context, key string, expected cas.Version, value []byte) (cas.Version, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.Store.CompareAndSwap(ctx, key, expected, value)
}

func (s *exclusiveStore) UpdateExclusive(ctx context.Context, key string, fn func(cas.Item) ([]byte, bool, error)) (cas.Version, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	it, err := s.Store.Get(ctx, key)
	if errors.Is(err, cas.ErrNotFound) {
		it, err = cas.Item{Key: key}, nil
	}
	if err != nil {
		return 0, err
	}
	next, write, err := fn(it)
	if err != nil || !write {
		return it.Version, err
	}
	return s.Store.CompareAndSwap(ctx, key, it.Version, next)
}

// TestEscalation: an Update that loses two writes in a row with
// WithExclusiveAfter(2) runs its third attempt exclusively: counted in
// occ.escalations, and marked on its attempt event.
func TestEscalation(t *testing.T) {
	ctx := context.Background()
	s := newSpans(t)
	h := newHarness(t)
	store := &exclusiveStore{Store: memcas.New()}
	counters := cas.NewTyped(cas.Store(store), cas.JSON[int]())
	if _, _, err := occ.Update(ctx, counters, "n", contendedIncrement(ctx, counters, "n", 2), h.opts(occ.WithExclusiveAfter(2), occ.WithObserver(occotel.NewTracer(s.tp)))...); err != nil {
		t.Fatal(err)
	}
	m := h.collect()
	check(t, "escalations{update}", m.counter("occ.escalations", op("update")), 1)
	check(t, "conflicts{update}", m.counter("occ.conflicts", op("update")), 2)
	if mm, _ := m.find("occ.escalations"); mm.Unit != "{attempt}" || mm.Description == "" {
		t.Errorf("occ.escalations: unit %q, description %q", mm.Unit, mm.Description)
	}
	evs := events(s.named("occ.update"), occotel.EventAttempt)
	check(t, "attempt events", len(evs), 3)
	for i, e := range evs {
		_, marked := attr(e.Attributes, "occ.attempt.exclusive")
		check(t, fmt.Sprintf("attempt %d marked exclusive", i+1), marked, i == 2)
	}
}
