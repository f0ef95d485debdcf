package hybrid_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/hybrid"
	"github.com/occkit/occkit/hybrid/lockertest"
	"github.com/occkit/occkit/occ"
)

// lockLog is a LockObserver that keeps what it is told.
type lockLog struct {
	mu       sync.Mutex
	acquires []hybrid.Acquired
	ends     []hybrid.LeaseEnd
	ended    chan struct{} // one send per end
}

func newLockLog() *lockLog { return &lockLog{ended: make(chan struct{}, 100)} }

func (l *lockLog) ObserveAcquire(_ context.Context, a hybrid.Acquired) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.acquires = append(l.acquires, a)
}

func (l *lockLog) ObserveLeaseEnd(_ context.Context, e hybrid.LeaseEnd) {
	l.mu.Lock()
	l.ends = append(l.ends, e)
	l.mu.Unlock()
	l.ended <- struct{}{}
}

func (l *lockLog) snapshot() ([]hybrid.Acquired, []hybrid.LeaseEnd) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]hybrid.Acquired(nil), l.acquires...), append([]hybrid.LeaseEnd(nil), l.ends...)
}

// awaitEnd waits for the next lease end to be reported.
func (l *lockLog) awaitEnd(t *testing.T) {
	t.Helper()
	select {
	case <-l.ended:
	case <-time.After(10 * time.Second):
		t.Fatal("no lease end reported within 10s")
	}
}

// TestObservedLocalLockerConformance: the wrapper keeps every property of
// the locker it wraps (lockertest on the local locker, with ObserveLocker
// around it).
func TestObservedLocalLockerConformance(t *testing.T) {
	h := localHarness(2 * time.Second)
	newLockers := h.NewLockers
	h.NewLockers = func(t *testing.T, n int) []hybrid.Locker {
		ls := newLockers(t, n)
		o := hybrid.ObserveLocker(ls[0], newLockLog())
		for i := range ls {
			ls[i] = o
		}
		return ls
	}
	lockertest.Run(t, h)
}

// TestObserveLockerReleased: an acquire is reported with its token and
// wait, a release with how long the lease was held, once.
func TestObserveLockerReleased(t *testing.T) {
	ctx := context.Background()
	log := newLockLog()
	l := hybrid.ObserveLocker(hybrid.NewLocalLocker(time.Second), log)
	g, err := l.Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := g.(hybrid.ExpiringLease); !ok {
		t.Fatalf("the lease of an observed local locker is a %T, not an ExpiringLease", g)
	}
	time.Sleep(20 * time.Millisecond)
	if err := g.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := g.Release(ctx); err != nil {
		t.Fatalf("second release: %v", err)
	}
	acq, ends := log.snapshot()
	if len(acq) != 1 || acq[0].Key != "k" || acq[0].Token != g.Token() || acq[0].Err != nil || acq[0].Wait <= 0 {
		t.Fatalf("acquires %+v, want one of k with token %d", acq, g.Token())
	}
	if len(ends) != 1 {
		t.Fatalf("ends %+v, want one", ends)
	}
	if e := ends[0]; e.Key != "k" || e.Token != g.Token() || e.Lost || e.Cause != nil || e.Expired || e.Err != nil || e.Held < 20*time.Millisecond {
		t.Fatalf("end %+v, want a release of k after at least 20ms", e)
	}
}

// TestObserveLockerWait: an Acquire that waits for the holder before it
// reports that wait; one whose context ends reports its error.
func TestObserveLockerWait(t *testing.T) {
	ctx := context.Background()
	log := newLockLog()
	l := hybrid.ObserveLocker(hybrid.NewLocalLocker(time.Second), log)
	first, err := l.Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
	defer cancel()
	if _, err := l.Acquire(short, "k"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("acquire of a held key with a 10ms deadline: %v", err)
	}
	go func() {
		time.Sleep(30 * time.Millisecond)
		_ = first.Release(ctx)
	}()
	second, err := l.Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	defer second.Release(ctx)
	acq, _ := log.snapshot()
	if len(acq) != 3 {
		t.Fatalf("acquires %+v, want 3", acq)
	}
	if a := acq[1]; !errors.Is(a.Err, context.DeadlineExceeded) || a.Token != 0 || a.Wait < 10*time.Millisecond {
		t.Fatalf("timed-out acquire reported as %+v", a)
	}
	if a := acq[2]; a.Err != nil || a.Token != second.Token() || a.Wait < 25*time.Millisecond {
		t.Fatalf("waiting acquire reported as %+v, want a wait of about 30ms", a)
	}
}

// TestObserveLockerExpired: a lease held past its TTL is reported lost,
// expired, when the locker sees it (without a Release), and not again
// when it is released.
func TestObserveLockerExpired(t *testing.T) {
	ctx := context.Background()
	log := newLockLog()
	l := hybrid.ObserveLocker(hybrid.NewLocalLocker(30*time.Millisecond), log)
	g, err := l.Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	log.awaitEnd(t)
	_, ends := log.snapshot()
	if e := ends[0]; !e.Lost || !e.Expired || !errors.Is(e.Cause, hybrid.ErrLeaseLost) || e.Held < 25*time.Millisecond || e.Token != g.Token() {
		// Held runs from Acquire's return; the TTL from the grant inside
		// it, a moment earlier: held "about the TTL", not at least.
		t.Fatalf("end %+v, want lost and expired after about 30ms", e)
	}
	if err := g.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if _, ends := log.snapshot(); len(ends) != 1 {
		t.Fatalf("ends %+v, want the loss only", ends)
	}
}

// TestObserveLockerRevoked: a lease taken away before its expiry is
// reported lost and not expired; so is one whose loss only its Release
// reports; and one whose Release fails otherwise is reported released
// with the error.
func TestObserveLockerRevoked(t *testing.T) {
	ctx := context.Background()
	errDown := errors.New("server unreachable")
	tests := []struct {
		name       string
		revoke     bool  // cancel the lease's Context with a loss before Release
		releaseErr error // what the lease's Release returns
		wantLost   bool
		wantErr    error
	}{
		{"revoked", true, nil, true, nil},
		{"loss seen by Release", false, hybrid.ErrLeaseLost, true, nil},
		{"release failed", false, errDown, false, errDown},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			log := newLockLog()
			fake := &fakeLocker{releaseErr: tt.releaseErr}
			l := hybrid.ObserveLocker(fake, log)
			g, err := l.Acquire(ctx, "k")
			if err != nil {
				t.Fatal(err)
			}
			if _, ok := g.(hybrid.ExpiringLease); ok {
				t.Fatal("a lease without expiry became an ExpiringLease")
			}
			if tt.revoke {
				fake.lease.cancel(errRevoked)
				log.awaitEnd(t)
			}
			if err := g.Release(ctx); !errors.Is(err, tt.releaseErr) {
				t.Fatalf("release: %v", err)
			}
			if !tt.revoke {
				log.awaitEnd(t)
			}
			_, ends := log.snapshot()
			if len(ends) != 1 {
				t.Fatalf("ends %+v, want one", ends)
			}
			e := ends[0]
			if e.Lost != tt.wantLost || e.Expired || e.Err != tt.wantErr {
				t.Fatalf("end %+v, want lost %v, not expired, Err %v", e, tt.wantLost, tt.wantErr)
			}
			if tt.wantLost && !errors.Is(e.Cause, hybrid.ErrLeaseLost) {
				t.Fatalf("cause %v, want a loss", e.Cause)
			}
		})
	}
}

var errRevoked = errors.Join(hybrid.ErrLeaseLost, errors.New("revoked by the server"))

// fakeLocker grants one lease without expiry whose loss the test decides
// (the loss and release paths of the wrapper; lockers on real backends
// run lockertest).
type fakeLocker struct {
	releaseErr error
	lease      *fakeLease
}

func (f *fakeLocker) Acquire(ctx context.Context, key string) (hybrid.Lease, error) {
	g := &fakeLease{releaseErr: f.releaseErr}
	g.ctx, g.cancel = context.WithCancelCause(context.Background())
	f.lease = g
	return g, nil
}

type fakeLease struct {
	releaseErr error
	ctx        context.Context
	cancel     context.CancelCauseFunc
}

func (g *fakeLease) Token() uint64            { return 7 }
func (g *fakeLease) Context() context.Context { return g.ctx }
func (g *fakeLease) Release(context.Context) error {
	if g.releaseErr == nil {
		g.cancel(hybrid.ErrLeaseReleased)
	} else {
		g.cancel(g.releaseErr)
	}
	return g.releaseErr
}

// TestObserveLockerKeepsMargin: a WithSafetyMargin locker keeps its
// margin through the wrapper, in either order: Update refuses to write
// under a lease with less left.
func TestObserveLockerKeepsMargin(t *testing.T) {
	ctx := context.Background()
	for _, order := range []string{"margin inside", "margin outside"} {
		t.Run(order, func(t *testing.T) {
			local := hybrid.NewLocalLocker(200 * time.Millisecond)
			var l hybrid.Locker
			if order == "margin inside" {
				l = hybrid.ObserveLocker(hybrid.WithSafetyMargin(local, time.Hour), newLockLog())
			} else {
				l = hybrid.WithSafetyMargin(hybrid.ObserveLocker(local, newLockLog()), time.Hour)
			}
			counter := cas.NewTyped(newFencedMap(), cas.JSON[int]())
			_, _, err := hybrid.Update(ctx, l, counter, "k", func(n int, _ bool) (int, error) { return n + 1, nil }, occ.WithMaxAttempts(1))
			if !errors.Is(err, hybrid.ErrLeaseExpiring) {
				t.Fatalf("Update under a 200ms lease with a 1h margin: %v, want ErrLeaseExpiring", err)
			}
		})
	}
}

// TestUpdateReportsItsOp: hybrid.Update's and hybrid.Txn's attempts reach
// occ's observers as hybrid.update (with the key) and hybrid.txn.
func TestUpdateReportsItsOp(t *testing.T) {
	ctx := context.Background()
	store := newFencedMap()
	var calls []occ.Call
	obs := occ.WithObserver(occ.ObserverFuncs{Call: func(_ context.Context, c occ.Call) { calls = append(calls, c) }})
	locker := hybrid.NewLocalLocker(time.Second)
	counter := cas.NewTyped(store, cas.JSON[int]())
	if _, _, err := hybrid.Update(ctx, locker, counter, "k", func(n int, _ bool) (int, error) { return n + 1, nil }, obs); err != nil {
		t.Fatal(err)
	}
	if err := hybrid.Txn(ctx, locker, store, []string{"k"}, func(tx *occ.Tx) error { return nil }, obs); err != nil {
		t.Fatal(err)
	}
	if len(calls) != 2 || calls[0].Op != hybrid.OpUpdate || calls[0].Key != "k" || calls[1].Op != hybrid.OpTxn || calls[1].Key != "" {
		t.Fatalf("calls %+v, want hybrid.update of k, then hybrid.txn", calls)
	}
}
