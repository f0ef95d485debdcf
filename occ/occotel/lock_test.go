package occotel_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"

	"github.com/occkit/occkit/adapters/etcdcas"
	"github.com/occkit/occkit/hybrid"
	"github.com/occkit/occkit/internal/etcdtest"
	"github.com/occkit/occkit/occ/occotel"
)

func end(name string) attribute.KeyValue   { return attribute.String("end", name) }
func cause(name string) attribute.KeyValue { return attribute.String("cause", name) }

// TestLockerAcquireAndRelease: the wait of an Acquire behind the holder
// is recorded, as are one that timed out and the hold times.
func TestLockerAcquireAndRelease(t *testing.T) {
	ctx := context.Background()
	h := newMeters(t)
	locker, err := occotel.Locker(hybrid.NewLocalLocker(time.Second), h.mp, occotel.WithAttributes(attribute.String("locker", "local")))
	if err != nil {
		t.Fatal(err)
	}
	local := attribute.String("locker", "local")
	first, err := locker.Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
	defer cancel()
	// The wait the canceled acquire must have measured: from the call to
	// the deadline (a loaded machine may take part of the 10 ms before it).
	deadline, _ := short.Deadline()
	minCanceled := time.Until(deadline).Seconds()
	if _, err := locker.Acquire(short, "k"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("acquire of a held key: %v", err)
	}
	go func() {
		time.Sleep(40 * time.Millisecond)
		_ = first.Release(ctx)
	}()
	second, err := locker.Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(10 * time.Millisecond)
	if err := second.Release(ctx); err != nil {
		t.Fatal(err)
	}

	m := h.collect()
	acq, _ := histogramPoint[float64](m, "hybrid.lock.acquire.duration", local, outcome("acquired"))
	check(t, "acquire.duration{acquired} count", acq.Count, 2)
	if acq.Sum < 0.03 {
		t.Errorf("acquire.duration{acquired} sum %vs, want the second acquire's wait of about 40ms in it", acq.Sum)
	}
	canceled, _ := histogramPoint[float64](m, "hybrid.lock.acquire.duration", local, outcome("canceled"))
	check(t, "acquire.duration{canceled} count", canceled.Count, 1)
	if canceled.Sum < minCanceled {
		t.Errorf("acquire.duration{canceled} sum %vs, want at least the %vs from the call to its deadline", canceled.Sum, minCanceled)
	}
	hold, _ := histogramPoint[float64](m, "hybrid.lease.hold.duration", local, end("released"))
	check(t, "hold.duration{released} count", hold.Count, 2)
	if hold.Sum < 0.05 {
		t.Errorf("hold.duration{released} sum %vs, want at least 40ms + 10ms", hold.Sum)
	}
	check(t, "lost", m.total("hybrid.lease.lost"), 0)
	if _, ok := m.find("hybrid.lease.renewals"); ok {
		t.Error("hybrid.lease.renewals recorded for a locker that does not renew")
	}
	for name, unit := range map[string]string{"hybrid.lock.acquire.duration": "s", "hybrid.lease.hold.duration": "s"} {
		mm, _ := m.find(name)
		check(t, name+" unit", mm.Unit, unit)
		if mm.Description == "" {
			t.Errorf("%s has no description", name)
		}
	}
}

// TestLockerLeaseExpired: a lease held past its TTL is counted lost,
// cause expired, as soon as the locker ends it (before any Release), and
// its Release afterwards counts nothing more; its span shows the loss.
func TestLockerLeaseExpired(t *testing.T) {
	s := newSpans(t)
	h := newMeters(t)
	locker, err := occotel.Locker(hybrid.NewLocalLocker(30*time.Millisecond), h.mp)
	if err != nil {
		t.Fatal(err)
	}
	ctx, span := s.tp.Tracer("test").Start(context.Background(), "job")
	t0 := time.Now()
	g, err := locker.Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	// The TTL runs from the grant, inside Acquire; the hold is measured
	// from Acquire's return, up to the call's length later.
	minHold := (30*time.Millisecond - time.Since(t0)).Seconds()
	m := h.waitFor("lost lease", func(m metrics) bool { return m.total("hybrid.lease.lost") > 0 })
	check(t, "lost{expired}", m.counter("hybrid.lease.lost", cause("expired")), 1)
	hold, _ := histogramPoint[float64](m, "hybrid.lease.hold.duration", end("lost"))
	check(t, "hold.duration{lost} count", hold.Count, 1)
	if hold.Sum < minHold {
		t.Errorf("hold.duration{lost} %vs, want at least the 30ms TTL less the Acquire call (%vs)", hold.Sum, minHold)
	}
	if err := g.Release(ctx); err != nil {
		t.Fatal(err)
	}
	m = h.collect()
	check(t, "lost after release", m.total("hybrid.lease.lost"), 1)
	released, _ := histogramPoint[float64](m, "hybrid.lease.hold.duration", end("released"))
	check(t, "hold.duration{released} count", released.Count, 0)
	if mm, _ := m.find("hybrid.lease.lost"); mm.Unit != "{lease}" || mm.Description == "" {
		t.Errorf("hybrid.lease.lost: unit %q, description %q", mm.Unit, mm.Description)
	}

	span.End()
	sp := s.named("job")
	lost := events(sp, occotel.EventLeaseLost)
	check(t, "lease lost events", len(lost), 1)
	wantAttr(t, "lease lost", lost[0].Attributes, "hybrid.lease.cause", "expired")
	wantAttr(t, "lease lost", lost[0].Attributes, "hybrid.lease.token", int64(g.Token()))
	check(t, "lease released events", len(events(sp, occotel.EventLeaseReleased)), 0)
}

// TestLockerLeaseRevoked: a lease taken away before its expiry (its lock
// gone on the server, its session revoked) is counted lost, cause
// revoked.
func TestLockerLeaseRevoked(t *testing.T) {
	ctx := context.Background()
	h := newMeters(t)
	fake := &revocableLocker{}
	locker, err := occotel.Locker(fake, h.mp)
	if err != nil {
		t.Fatal(err)
	}
	g, err := locker.Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	fake.cancel(fmt.Errorf("%w: the lock key was deleted", hybrid.ErrLeaseLost))
	m := h.waitFor("lost lease", func(m metrics) bool { return m.total("hybrid.lease.lost") > 0 })
	check(t, "lost{revoked}", m.counter("hybrid.lease.lost", cause("revoked")), 1)
	check(t, "lost{expired}", m.counter("hybrid.lease.lost", cause("expired")), 0)
	_ = g.Release(ctx)
}

// revocableLocker grants leases without expiry whose loss the test
// decides (as LoseLease does in lockertest).
type revocableLocker struct {
	cancel context.CancelCauseFunc
}

func (f *revocableLocker) Acquire(context.Context, string) (hybrid.Lease, error) {
	g := &revocableLease{}
	g.ctx, f.cancel = context.WithCancelCause(context.Background())
	g.cancel = f.cancel
	return g, nil
}

type revocableLease struct {
	ctx    context.Context
	cancel context.CancelCauseFunc
}

func (g *revocableLease) Token() uint64            { return 1 }
func (g *revocableLease) Context() context.Context { return g.ctx }
func (g *revocableLease) Release(context.Context) error {
	g.cancel(hybrid.ErrLeaseReleased)
	return nil
}

// TestLockerKeys: WithKeys puts the key on the lock metrics.
func TestLockerKeys(t *testing.T) {
	ctx := context.Background()
	h := newMeters(t)
	locker, err := occotel.Locker(hybrid.NewLocalLocker(time.Second), h.mp, occotel.WithKeys())
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"a", "b", "a"} {
		g, err := locker.Acquire(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		_ = g.Release(ctx)
	}
	m := h.collect()
	a, _ := histogramPoint[float64](m, "hybrid.lock.acquire.duration", outcome("acquired"), attribute.String("key", "a"))
	b, _ := histogramPoint[float64](m, "hybrid.lease.hold.duration", end("released"), attribute.String("key", "b"))
	check(t, "acquire{a} count", a.Count, 2)
	check(t, "hold{b} count", b.Count, 1)
}

// TestLockerRenewals: the renewals of an etcd locker, which keeps its
// session's lease alive about three times per TTL, are read at each
// collection; a lease held for two TTLs was renewed.
func TestLockerRenewals(t *testing.T) {
	if testing.Short() {
		t.Skip("skipped in -short: holds an etcd lease for 2s")
	}
	c := etcdtest.Start(t, etcdtest.Options{})
	el, err := etcdcas.NewLocker(c.Client(), etcdcas.LockerConfig{Prefix: "occotel-renewals/", TTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer el.Close()
	h := newMeters(t)
	locker, err := occotel.Locker(el, h.mp, occotel.WithAttributes(attribute.String("locker", "etcd")))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	g, err := locker.Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second)
	if err := g.Context().Err(); err != nil {
		t.Fatalf("the lease ended while held: %v", context.Cause(g.Context()))
	}
	if err := g.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// The locker's session goes on renewing after the release: its count
	// is read on both sides of the collection.
	before := el.Renewals()
	m := h.collect()
	after := el.Renewals()
	renewals := m.counter("hybrid.lease.renewals", attribute.String("locker", "etcd"))
	if renewals < 1 || uint64(renewals) < before || uint64(renewals) > after {
		t.Fatalf("hybrid.lease.renewals = %d, etcd locker counted %d before the collection and %d after: want the locker's count, at least 1", renewals, before, after)
	}
	if mm, _ := m.find("hybrid.lease.renewals"); mm.Unit != "{renewal}" {
		t.Errorf("unit %q", mm.Unit)
	}
	hold, _ := histogramPoint[float64](m, "hybrid.lease.hold.duration", attribute.String("locker", "etcd"), end("released"))
	check(t, "hold.duration{released} count", hold.Count, 1)
}

// TestLockerConcurrent: concurrent holders of a few keys through one
// wrapped locker: every acquire and every release is counted once.
func TestLockerConcurrent(t *testing.T) {
	const workers, rounds = 8, 25
	ctx := context.Background()
	h := newMeters(t)
	locker, err := occotel.Locker(hybrid.NewLocalLocker(time.Second), h.mp)
	if err != nil {
		t.Fatal(err)
	}
	var held atomic.Int64
	done := make(chan struct{})
	for w := range workers {
		go func() {
			defer func() { done <- struct{}{} }()
			for range rounds {
				g, err := locker.Acquire(ctx, fmt.Sprint("k", w%2))
				if err != nil {
					t.Error(err)
					return
				}
				held.Add(1)
				_ = g.Release(ctx)
			}
		}()
	}
	for range workers {
		<-done
	}
	m := h.collect()
	acq, _ := histogramPoint[float64](m, "hybrid.lock.acquire.duration", outcome("acquired"))
	hold, _ := histogramPoint[float64](m, "hybrid.lease.hold.duration", end("released"))
	check(t, "acquires", int64(acq.Count), held.Load())
	check(t, "releases", int64(hold.Count), int64(workers*rounds))
}
