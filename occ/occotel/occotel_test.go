package occotel_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/cenkalti/backoff/v4"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.uber.org/goleak"

	"github.com/occkit/occkit/adapters/memcas"
	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/occ"
	"github.com/occkit/occkit/occ/occotel"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// harness is an SDK MeterProvider of its own, read on demand with a
// ManualReader, and (from newHarness) an Observer recording into it.
type harness struct {
	t      *testing.T
	mp     *sdkmetric.MeterProvider
	reader *sdkmetric.ManualReader
	obs    *occotel.Observer
}

// newMeters returns a harness without an Observer, for Lockers.
func newMeters(t *testing.T) *harness {
	t.Helper()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	shutdownAtCleanup(t, mp)
	return &harness{t: t, mp: mp, reader: reader}
}

// shutdownAtCleanup shuts p (a MeterProvider or a TracerProvider) down when
// the test ends.
func shutdownAtCleanup(t *testing.T, p interface{ Shutdown(context.Context) error }) {
	t.Cleanup(func() {
		if err := p.Shutdown(context.Background()); err != nil {
			t.Errorf("shutdown: %v", err)
		}
	})
}

func newHarness(t *testing.T, opts ...occotel.Option) *harness {
	t.Helper()
	h := newMeters(t)
	obs, err := occotel.New(h.mp, opts...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	h.obs = obs
	return h
}

// opts returns the occ options of a test call: this observer and no wait
// between attempts.
func (h *harness) opts(more ...occ.Option) []occ.Option {
	return append([]occ.Option{occ.WithObserver(h.obs), occ.WithBackOff(&backoff.ZeroBackOff{})}, more...)
}

func (h *harness) collect() metrics {
	h.t.Helper()
	var rm metricdata.ResourceMetrics
	if err := h.reader.Collect(context.Background(), &rm); err != nil {
		h.t.Fatalf("collect: %v", err)
	}
	return metrics{t: h.t, rm: rm}
}

// waitFor collects until cond holds (for up to 10 s) and returns that
// collection.
func (h *harness) waitFor(what string, cond func(m metrics) bool) metrics {
	h.t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		m := h.collect()
		if cond(m) {
			return m
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("no %s within 10s", what)
		}
	}
}

// metrics is one collection, with lookups by instrument name and attributes.
type metrics struct {
	t  *testing.T
	rm metricdata.ResourceMetrics
}

func (m metrics) find(name string) (metricdata.Metrics, bool) {
	for _, sm := range m.rm.ScopeMetrics {
		for _, mm := range sm.Metrics {
			if mm.Name == name {
				return mm, true
			}
		}
	}
	return metricdata.Metrics{}, false
}

func (m metrics) sum(name string) metricdata.Sum[int64] {
	m.t.Helper()
	mm, ok := m.find(name)
	if !ok {
		return metricdata.Sum[int64]{}
	}
	s, ok := mm.Data.(metricdata.Sum[int64])
	if !ok {
		m.t.Fatalf("%s: data is %T, want Sum[int64]", name, mm.Data)
	}
	if !s.IsMonotonic || s.Temporality != metricdata.CumulativeTemporality {
		m.t.Fatalf("%s: monotonic %v, temporality %v; want a cumulative counter", name, s.IsMonotonic, s.Temporality)
	}
	return s
}

// counter returns the value of the counter's point with exactly attrs (0
// when there is none).
func (m metrics) counter(name string, attrs ...attribute.KeyValue) int64 {
	m.t.Helper()
	want := attribute.NewSet(attrs...)
	for _, dp := range m.sum(name).DataPoints {
		if dp.Attributes.Equals(&want) {
			return dp.Value
		}
	}
	return 0
}

// total returns the sum of all the counter's points.
func (m metrics) total(name string) int64 {
	m.t.Helper()
	var n int64
	for _, dp := range m.sum(name).DataPoints {
		n += dp.Value
	}
	return n
}

// points returns the number of the counter's points (attribute sets).
func (m metrics) points(name string) int {
	m.t.Helper()
	return len(m.sum(name).DataPoints)
}

func histogramPoint[N int64 | float64](m metrics, name string, attrs ...attribute.KeyValue) (metricdata.HistogramDataPoint[N], bool) {
	m.t.Helper()
	mm, ok := m.find(name)
	if !ok {
		return metricdata.HistogramDataPoint[N]{}, false
	}
	h, ok := mm.Data.(metricdata.Histogram[N])
	if !ok {
		m.t.Fatalf("%s: data is %T, want Histogram[%T]", name, mm.Data, N(0))
	}
	want := attribute.NewSet(attrs...)
	for _, dp := range h.DataPoints {
		if dp.Attributes.Equals(&want) {
			return dp, true
		}
	}
	return metricdata.HistogramDataPoint[N]{}, false
}

// callAttempts returns the sample count and sum of occ.call.attempts with attrs.
func (m metrics) callAttempts(attrs ...attribute.KeyValue) (count uint64, sum int64) {
	m.t.Helper()
	dp, _ := histogramPoint[int64](m, "occ.call.attempts", attrs...)
	return dp.Count, dp.Sum
}

// callDurations returns the sample count of occ.call.duration with attrs.
func (m metrics) callDurations(attrs ...attribute.KeyValue) uint64 {
	m.t.Helper()
	dp, _ := histogramPoint[float64](m, "occ.call.duration", attrs...)
	return dp.Count
}

// checkSucceeded checks the metrics of one call of name that succeeded
// after conflicts conflicts: an attempt per conflict, then one success.
func (m metrics) checkSucceeded(name string, conflicts int64) {
	m.t.Helper()
	check(m.t, "attempts{"+name+",conflict}", m.counter("occ.attempts", op(name), outcome("conflict")), conflicts)
	check(m.t, "attempts{"+name+",success}", m.counter("occ.attempts", op(name), outcome("success")), 1)
	check(m.t, "conflicts{"+name+"}", m.counter("occ.conflicts", op(name)), conflicts)
	count, sum := m.callAttempts(op(name), outcome("success"))
	check(m.t, "call.attempts{"+name+",success} count", count, 1)
	check(m.t, "call.attempts{"+name+",success} sum", sum, conflicts+1)
}

func op(name string) attribute.KeyValue      { return attribute.String("op", name) }
func outcome(name string) attribute.KeyValue { return attribute.String("outcome", name) }
func reason(name string) attribute.KeyValue  { return attribute.String("reason", name) }

func check[T comparable](t *testing.T, what string, got, want T) {
	t.Helper()
	if got != want {
		t.Errorf("%s = %v, want %v", what, got, want)
	}
}

// conflictingWrites returns a function for occ.Retry that reads key from
// store and writes it back with the version it read; during its first n
// calls another writer updates the key between the read and the write, so
// the write fails with a real conflict from the store.
func conflictingWrites(store *memcas.Store, key string, n int) func(ctx context.Context) error {
	calls := 0
	return func(ctx context.Context) error {
		calls++
		it, err := store.Get(ctx, key)
		if err != nil && !errors.Is(err, cas.ErrNotFound) {
			return err
		}
		if calls <= n {
			if _, err := store.CompareAndSwap(ctx, key, it.Version, []byte("theirs")); err != nil {
				return err
			}
		}
		_, err = store.CompareAndSwap(ctx, key, it.Version, []byte("mine"))
		return err
	}
}

// contendedIncrement returns a function for occ.Update that increments the
// counter; during its first n calls another writer increments key in
// counters between the read and the write, so the write conflicts.
func contendedIncrement(ctx context.Context, counters *cas.Typed[int], key string, n int) func(int, bool) (int, error) {
	calls := 0
	return func(v int, _ bool) (int, error) {
		calls++
		if calls <= n {
			_, ver, err := counters.Get(ctx, key)
			if err != nil && !errors.Is(err, cas.ErrNotFound) {
				return 0, err
			}
			if _, err := counters.CompareAndSwap(ctx, key, ver, v+1); err != nil {
				return 0, err
			}
		}
		return v + 1, nil
	}
}

func TestRetryConflictsThenSucceeds(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	store := memcas.New()

	if err := occ.Retry(ctx, conflictingWrites(store, "k", 2), h.opts()...); err != nil {
		t.Fatalf("Retry: %v", err)
	}

	m := h.collect()
	m.checkSucceeded("retry", 2)
	check(t, "attempts points", m.points("occ.attempts"), 2)
	check(t, "conflicts points", m.points("occ.conflicts"), 1)
	check(t, "call.duration{retry,success} count", m.callDurations(op("retry"), outcome("success")), 1)
	check(t, "giveups", m.total("occ.giveups"), 0)
	check(t, "budget.rejections", m.total("occ.budget.rejections"), 0)
}

func TestUpdate(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	store := memcas.New()
	counters := cas.NewTyped(store, cas.JSON[int]())

	// Another writer increments the counter between our read and our write
	// twice, so the third attempt writes.
	n, _, err := occ.Update(ctx, counters, "visits", contendedIncrement(ctx, counters, "visits", 2), h.opts()...)
	if err != nil {
		t.Fatalf("Update: %v", err)
	}
	check(t, "counter", n, 3)

	m := h.collect()
	m.checkSucceeded("update", 2)
	check(t, "call.duration{update,success} count", m.callDurations(op("update"), outcome("success")), 1)
	check(t, "giveups", m.total("occ.giveups"), 0)
}

func TestTxn(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	store := memcas.New()

	attempt := 0
	err := occ.Txn(ctx, store, func(tx *occ.Tx) error {
		attempt++
		if _, _, err := tx.Get("a"); err != nil {
			return err
		}
		if attempt == 1 { // invalidate the read: the commit conflicts
			if _, err := store.CompareAndSwap(ctx, "a", 0, []byte("theirs")); err != nil {
				return err
			}
		}
		tx.Put("a", []byte("mine"))
		tx.Put("b", []byte("mine"))
		return nil
	}, h.opts()...)
	if err != nil {
		t.Fatalf("Txn: %v", err)
	}

	h.collect().checkSucceeded("txn", 1)
}

func TestGiveUps(t *testing.T) {
	ctx := context.Background()
	alwaysConflicts := math.MaxInt
	tests := []struct {
		name string
		// run makes the calls with opts; it must end with one give-up.
		run func(t *testing.T, store *memcas.Store, opts []occ.Option) error
		// reason is the expected give-up reason.
		reason string
		// attempts and calls are the expected attempts in all, and the calls.
		attempts, calls int64
	}{
		{
			name:   "attempt limit",
			reason: "attempts", attempts: 2, calls: 1,
			run: func(t *testing.T, store *memcas.Store, opts []occ.Option) error {
				return occ.Retry(ctx, conflictingWrites(store, "k", alwaysConflicts), append(opts, occ.WithMaxAttempts(2))...)
			},
		},
		{
			name:   "budget",
			reason: "budget", attempts: 3, calls: 2,
			run: func(t *testing.T, store *memcas.Store, opts []occ.Option) error {
				// No deposits, one retry in reserve: the first call spends it,
				// the second is refused its retry.
				budget, err := occ.NewBudget(0, 1)
				if err != nil {
					t.Fatal(err)
				}
				opts = append(opts, occ.WithBudget(budget))
				if err := occ.Retry(ctx, conflictingWrites(store, "k", 1), opts...); err != nil {
					t.Fatalf("first call: %v", err)
				}
				return occ.Retry(ctx, conflictingWrites(store, "k", alwaysConflicts), opts...)
			},
		},
		{
			name:   "backoff",
			reason: "backoff", attempts: 1, calls: 1,
			run: func(t *testing.T, store *memcas.Store, opts []occ.Option) error {
				return occ.Retry(ctx, conflictingWrites(store, "k", alwaysConflicts), append(opts, occ.WithBackOff(&backoff.StopBackOff{}))...)
			},
		},
		{
			name:   "context cancelled during an attempt",
			reason: "context", attempts: 1, calls: 1,
			run: func(t *testing.T, store *memcas.Store, opts []occ.Option) error {
				ctx, cancel := context.WithCancel(ctx)
				defer cancel()
				fn := conflictingWrites(store, "k", alwaysConflicts)
				return occ.Retry(ctx, func(ctx context.Context) error {
					err := fn(ctx) // a conflict
					cancel()
					return err
				}, opts...)
			},
		},
		{
			name:   "context cancelled before the call",
			reason: "context", attempts: 0, calls: 1,
			run: func(t *testing.T, store *memcas.Store, opts []occ.Option) error {
				ctx, cancel := context.WithCancel(ctx)
				cancel()
				return occ.Retry(ctx, conflictingWrites(store, "k", alwaysConflicts), opts...)
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t)
			err := tt.run(t, memcas.New(), h.opts())
			var gu *occ.GiveUpError
			if !errors.As(err, &gu) {
				t.Fatalf("err = %v, want a *occ.GiveUpError", err)
			}

			m := h.collect()
			check(t, "giveups{retry,"+tt.reason+"}", m.counter("occ.giveups", op("retry"), reason(tt.reason)), 1)
			check(t, "giveups", m.total("occ.giveups"), 1)
			wantRejections := int64(0)
			if tt.reason == "budget" {
				wantRejections = 1
				check(t, "budget.rejections{retry}", m.counter("occ.budget.rejections", op("retry")), 1)
			}
			check(t, "budget.rejections", m.total("occ.budget.rejections"), wantRejections)

			check(t, "attempts", m.total("occ.attempts"), tt.attempts)
			check(t, "attempts{retry,conflict}", m.counter("occ.attempts", op("retry"), outcome("conflict")), tt.attempts-(tt.calls-1))
			check(t, "conflicts", m.total("occ.conflicts"), tt.attempts-(tt.calls-1))
			count, sum := m.callAttempts(op("retry"), outcome("gave-up"))
			check(t, "call.attempts{retry,gave-up} count", count, 1)
			check(t, "call.attempts{retry,gave-up} sum", sum, int64(gu.Attempts))
			check(t, "call.duration{retry,gave-up} count", m.callDurations(op("retry"), outcome("gave-up")), 1)
		})
	}
}

func TestFailedAndRetryable(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	errTransient := errors.New("transient")
	errPermanent := errors.New("permanent")

	calls := 0
	err := occ.Retry(ctx, func(context.Context) error {
		calls++
		if calls == 1 {
			return errTransient
		}
		return errPermanent
	}, h.opts(occ.WithRetryable(func(err error) bool { return errors.Is(err, errTransient) }))...)
	if !errors.Is(err, errPermanent) {
		t.Fatalf("err = %v, want %v", err, errPermanent)
	}

	m := h.collect()
	check(t, "attempts{retry,retryable}", m.counter("occ.attempts", op("retry"), outcome("retryable")), 1)
	check(t, "attempts{retry,failed}", m.counter("occ.attempts", op("retry"), outcome("failed")), 1)
	check(t, "conflicts", m.total("occ.conflicts"), 0)
	count, sum := m.callAttempts(op("retry"), outcome("failed"))
	check(t, "call.attempts{retry,failed} count", count, 1)
	check(t, "call.attempts{retry,failed} sum", sum, 2)
	check(t, "giveups", m.total("occ.giveups"), 0)
}

// TestGiveUpReason drives ObserveCall directly with errors occ does not
// return today: a wrapped GiveUpError, and one whose last error is itself a
// give-up for another reason.
func TestGiveUpReason(t *testing.T) {
	tests := []struct {
		name   string
		err    error
		reason string
	}{
		{"wrapped", fmt.Errorf("outer: %w", &occ.GiveUpError{Reason: occ.ErrBudgetExhausted, Attempts: 1, Last: cas.ErrConflict}), "budget"},
		{"nested give-up", &occ.GiveUpError{Reason: context.DeadlineExceeded, Attempts: 1, Last: &occ.GiveUpError{Reason: occ.ErrBudgetExhausted}}, "context"},
		{"wrapped reason", &occ.GiveUpError{Reason: fmt.Errorf("stop: %w", occ.ErrBackOffStopped), Attempts: 1}, "backoff"},
		{"not a GiveUpError", context.Canceled, "context"},
		{"nil", nil, "context"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t)
			h.obs.ObserveCall(context.Background(), occ.Call{Op: "retry", Attempts: 1, Outcome: occ.OutcomeGaveUp, Err: tt.err})
			m := h.collect()
			check(t, "giveups{retry,"+tt.reason+"}", m.counter("occ.giveups", op("retry"), reason(tt.reason)), 1)
			check(t, "giveups", m.total("occ.giveups"), 1)
		})
	}
}

func TestWithAttributes(t *testing.T) {
	store := attribute.String("store", "orders")
	h := newHarness(t,
		occotel.WithAttributes(store),
		occotel.WithAttributes(attribute.String("op", "shadowed"), attribute.String("region", "eu")))
	region := attribute.String("region", "eu")
	ctx := context.Background()

	if err := occ.Retry(ctx, conflictingWrites(memcas.New(), "k", 1), h.opts()...); err != nil {
		t.Fatalf("Retry: %v", err)
	}
	if err := occ.Retry(ctx, conflictingWrites(memcas.New(), "k", math.MaxInt), h.opts(occ.WithMaxAttempts(1))...); err == nil {
		t.Fatal("Retry with one attempt and a conflict succeeded")
	}

	m := h.collect()
	check(t, "attempts{retry,conflict}", m.counter("occ.attempts", store, region, op("retry"), outcome("conflict")), 2)
	check(t, "attempts{retry,success}", m.counter("occ.attempts", store, region, op("retry"), outcome("success")), 1)
	check(t, "conflicts{retry}", m.counter("occ.conflicts", store, region, op("retry")), 2)
	check(t, "giveups{retry,attempts}", m.counter("occ.giveups", store, region, op("retry"), reason("attempts")), 1)
	count, sum := m.callAttempts(store, region, op("retry"), outcome("success"))
	check(t, "call.attempts{retry,success} count", count, 1)
	check(t, "call.attempts{retry,success} sum", sum, 2)
	check(t, "call.duration{retry,gave-up} count", m.callDurations(store, region, op("retry"), outcome("gave-up")), 1)

	// Every point of every instrument carries the constant attributes.
	for _, sm := range m.rm.ScopeMetrics {
		for _, mm := range sm.Metrics {
			var sets []attribute.Set
			switch d := mm.Data.(type) {
			case metricdata.Sum[int64]:
				for _, dp := range d.DataPoints {
					sets = append(sets, dp.Attributes)
				}
			case metricdata.Histogram[int64]:
				for _, dp := range d.DataPoints {
					sets = append(sets, dp.Attributes)
				}
			case metricdata.Histogram[float64]:
				for _, dp := range d.DataPoints {
					sets = append(sets, dp.Attributes)
				}
			default:
				t.Errorf("%s: unexpected data %T", mm.Name, mm.Data)
			}
			for _, s := range sets {
				if v, _ := s.Value("store"); v.AsString() != "orders" {
					t.Errorf("%s: point %v lacks store=orders", mm.Name, s.Encoded(attribute.DefaultEncoder()))
				}
				if v, _ := s.Value("op"); v.AsString() != "retry" {
					t.Errorf("%s: point %v: op is not retry", mm.Name, s.Encoded(attribute.DefaultEncoder()))
				}
			}
		}
	}
}

func TestInstruments(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	// Two calls that give up record on every instrument.
	budget, err := occ.NewBudget(0, 1)
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		_ = occ.Retry(ctx, conflictingWrites(memcas.New(), "k", math.MaxInt), h.opts(occ.WithBudget(budget), occ.WithMaxAttempts(2))...)
	}

	m := h.collect()
	if len(m.rm.ScopeMetrics) != 1 {
		t.Fatalf("%d scopes, want 1", len(m.rm.ScopeMetrics))
	}
	check(t, "scope", m.rm.ScopeMetrics[0].Scope.Name, "github.com/occkit/occkit/occ")
	check(t, "scope", occotel.ScopeName, "github.com/occkit/occkit/occ")
	units := map[string]string{
		"occ.attempts":          "{attempt}",
		"occ.conflicts":         "{conflict}",
		"occ.call.attempts":     "{attempt}",
		"occ.call.duration":     "s",
		"occ.giveups":           "{call}",
		"occ.budget.rejections": "{call}",
	}
	var names []string
	for _, mm := range m.rm.ScopeMetrics[0].Metrics {
		names = append(names, mm.Name)
		unit, ok := units[mm.Name]
		if !ok {
			t.Errorf("unexpected instrument %s", mm.Name)
			continue
		}
		check(t, mm.Name+" unit", mm.Unit, unit)
		if mm.Description == "" {
			t.Errorf("%s has no description", mm.Name)
		}
	}
	if len(names) != len(units) {
		t.Errorf("instruments %v, want the %d of %v", names, len(units), units)
	}

	dp, ok := histogramPoint[int64](m, "occ.call.attempts", op("retry"), outcome("gave-up"))
	if !ok {
		t.Fatal("no occ.call.attempts{retry,gave-up} point")
	}
	if want := []float64{1, 2, 3, 4, 5, 7, 10, 15, 20, 30, 50}; !slices.Equal(dp.Bounds, want) {
		t.Errorf("occ.call.attempts bounds %v, want %v", dp.Bounds, want)
	}
	// The first call spends the budget's one retry and stops at the attempt
	// limit after 2 attempts; the second is refused a retry after 1.
	check(t, "count", dp.Count, 2)
	check(t, "sum", dp.Sum, 3)
	check(t, "bucket (0,1]", dp.BucketCounts[0], 1)
	check(t, "bucket (1,2]", dp.BucketCounts[1], 1)

	d, ok := histogramPoint[float64](m, "occ.call.duration", op("retry"), outcome("gave-up"))
	if !ok {
		t.Fatal("no occ.call.duration{retry,gave-up} point")
	}
	check(t, "duration count", d.Count, 2)
	if d.Sum <= 0 || d.Sum > 10 {
		t.Errorf("duration sum %vs, want in (0, 10]", d.Sum)
	}
}

func TestNilMeterProviderUsesGlobal(t *testing.T) {
	h := newMeters(t)
	otel.SetMeterProvider(h.mp)

	obs, err := occotel.New(nil)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	if err := occ.Retry(context.Background(), func(context.Context) error { return nil }, occ.WithObserver(obs)); err != nil {
		t.Fatal(err)
	}
	m := h.collect()
	check(t, "attempts{retry,success}", m.counter("occ.attempts", op("retry"), outcome("success")), 1)
}

// TestUnknownOp covers an Op that occ may add later: its attribute sets are
// built on first use, also by concurrent callers.
func TestUnknownOp(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	ops := []string{"a", "b", "c", "d"}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for _, name := range ops {
				h.obs.ObserveAttempt(ctx, occ.Attempt{Op: name, Number: 1, Outcome: occ.OutcomeConflict})
				h.obs.ObserveCall(ctx, occ.Call{Op: name, Attempts: 1, Outcome: occ.Outcome(200)})
			}
		})
	}
	wg.Wait()

	m := h.collect()
	for _, name := range ops {
		check(t, "attempts{"+name+",conflict}", m.counter("occ.attempts", op(name), outcome("conflict")), 8)
		check(t, "conflicts{"+name+"}", m.counter("occ.conflicts", op(name)), 8)
		count, _ := m.callAttempts(op(name), outcome("unknown"))
		check(t, "call.attempts{"+name+",unknown} count", count, 8)
	}
}

// TestConcurrent runs contended Updates of one key from many goroutines
// through one Observer and checks that the metrics add up.
func TestConcurrent(t *testing.T) {
	const goroutines, perGoroutine = 8, 50
	h := newHarness(t)
	ctx := context.Background()
	counters := cas.NewTyped(memcas.New(), cas.JSON[int]())
	opts := []occ.Option{
		occ.WithObserver(h.obs),
		occ.WithBackOffFunc(func() backoff.BackOff { return &backoff.ZeroBackOff{} }),
		occ.WithMaxAttempts(math.MaxInt),
	}

	var wg sync.WaitGroup
	for range goroutines {
		wg.Go(func() {
			for range perGoroutine {
				if _, _, err := occ.Update(ctx, counters, "n", func(n int, _ bool) (int, error) { return n + 1, nil }, opts...); err != nil {
					t.Errorf("Update: %v", err)
					return
				}
			}
		})
	}
	wg.Wait()

	n, _, err := counters.Get(ctx, "n")
	if err != nil {
		t.Fatal(err)
	}
	const calls = goroutines * perGoroutine
	check(t, "counter", n, calls)

	m := h.collect()
	conflicts := m.counter("occ.attempts", op("update"), outcome("conflict"))
	check(t, "attempts{update,success}", m.counter("occ.attempts", op("update"), outcome("success")), calls)
	check(t, "conflicts{update}", m.counter("occ.conflicts", op("update")), conflicts)
	check(t, "attempts", m.total("occ.attempts"), calls+conflicts)
	count, sum := m.callAttempts(op("update"), outcome("success"))
	check(t, "call.attempts count", count, calls)
	check(t, "call.attempts sum", sum, calls+conflicts)
	check(t, "call.duration count", m.callDurations(op("update"), outcome("success")), calls)
	t.Logf("%d calls, %d conflicts", calls, conflicts)
}

// TestNoAllocs checks that recording allocates nothing once an attribute
// set has been seen by the SDK.
func TestNoAllocs(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	attempt := occ.Attempt{Op: "update", Key: "k", Number: 2, Outcome: occ.OutcomeConflict, Err: cas.ErrConflict, Latency: time.Millisecond}
	success := occ.Call{Op: "update", Key: "k", Attempts: 3, Outcome: occ.OutcomeSuccess, Latency: time.Millisecond}
	gaveUp := occ.Call{Op: "txn", Attempts: 2, Outcome: occ.OutcomeGaveUp, Err: &occ.GiveUpError{Reason: occ.ErrBudgetExhausted, Attempts: 2, Last: cas.ErrConflict}}

	for _, tt := range []struct {
		name string
		f    func()
	}{
		{"ObserveAttempt", func() { h.obs.ObserveAttempt(ctx, attempt) }},
		{"ObserveCall success", func() { h.obs.ObserveCall(ctx, success) }},
		{"ObserveCall gave up", func() { h.obs.ObserveCall(ctx, gaveUp) }},
	} {
		if n := testing.AllocsPerRun(100, tt.f); n != 0 {
			t.Errorf("%s: %v allocations per run, want 0", tt.name, n)
		}
	}
}

func TestAdaptiveSwitch(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	obs, err := occotel.New(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)))
	if err != nil {
		t.Fatal(err)
	}
	obs.AdaptiveSwitch("k", true, 1.5)
	obs.AdaptiveSwitch("k", false, 0.1)
	obs.AdaptiveSwitch("j", true, 2)
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != "occ.adaptive.switches" {
				continue
			}
			for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
				to, _ := dp.Attributes.Value("to")
				got[to.AsString()] += dp.Value
			}
		}
	}
	if got["locked"] != 2 || got["optimistic"] != 1 {
		t.Fatalf("switches = %v, want locked 2, optimistic 1", got)
	}
}
