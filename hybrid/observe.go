package hybrid

import (
	"context"
	"errors"
	"sync/atomic"
	"time"
)

// Acquired describes one Acquire of a Locker wrapped by ObserveLocker.
type Acquired struct {
	Key string
	// Token is the fencing token of the lease granted; 0 when Acquire
	// failed.
	Token uint64
	// Wait is how long Acquire took: the wait for the holders before
	// this one, and the locker's round trips.
	Wait time.Duration
	// Err is Acquire's error; nil when it granted a lease.
	Err error
}

// LeaseEnd describes the end of a lease granted by a Locker wrapped by
// ObserveLocker: released by its holder, or lost.
type LeaseEnd struct {
	Key   string
	Token uint64
	// Held is how long the lease was held: from its grant to the return
	// of its Release, or to when its loss was seen.
	Held time.Duration
	// Lost reports a lease lost before its holder released it: its
	// Context ended with a cause matching ErrLeaseLost (or any cause but
	// ErrLeaseReleased), or its Release returned an error matching
	// ErrLeaseLost.
	Lost bool
	// Cause is the loss's cause; nil for a release.
	Cause error
	// Expired reports a lost ExpiringLease whose expiry had passed when
	// its loss was seen: it ran out unrenewed (its holder was paused or
	// too slow, or its renewals could not reach the server in time). A
	// lease lost before its expiry, or one with no expiry, was taken away:
	// the locker found its lock gone or held by another grant, its
	// session revoked, its connection ended, or the locker closed.
	Expired bool
	// Err is the error of a Release that failed for another reason than
	// the lease's loss (the server could not be reached, the context
	// ended): the lock stays until it expires or its connection ends.
	Err error
}

// LockObserver is told about the acquisitions and the leases of a Locker
// wrapped by ObserveLocker. Its methods must be quick and safe for
// concurrent use. ObserveAcquire runs on the goroutine of Acquire, with
// its context. ObserveLeaseEnd runs once per lease: on the goroutine of
// Release, with its context, or, for a loss seen before Release, on a
// goroutine of its own (context.AfterFunc's) with the values of the
// context given to Acquire.
type LockObserver interface {
	ObserveAcquire(ctx context.Context, a Acquired)
	ObserveLeaseEnd(ctx context.Context, e LeaseEnd)
}

// RenewalCounter is implemented by Lockers that renew their leases (or
// the session their leases live on) in the background: Renewals returns
// how many renewals have succeeded since the Locker was made. A renewal
// moves an ExpiringLease's expiry; lockers whose leases last as long as a
// connection (PostgreSQL advisory locks, MySQL GET_LOCK) or are never
// renewed (NewLocalLocker) have none to count. Wrappers such as
// ObserveLocker and WithSafetyMargin do not pass it on: read it from the
// Locker that renews.
type RenewalCounter interface {
	Renewals() uint64
}

// ObserveLocker returns a Locker that grants l's leases and tells o about
// every Acquire (its wait, its token or error) and the end of every lease
// (how long it was held; released or lost, and why). It watches each
// lease's Context, so a loss is reported when the locker sees it, also if
// the holder never calls Release; a lease's Release returns once its end
// has been reported, so what an observer counts is complete then.
//
// The leases it returns are ExpiringLeases exactly when l's are, and keep
// the safety margin of a WithSafetyMargin locker, in either order of
// wrapping; methods of l's lease types beyond Lease and ExpiringLease
// (pgcas's Tx) are not reachable through them, nor is l's Close: close l
// itself.
//
// The returned Locker is safe for concurrent use if l is.
func ObserveLocker(l Locker, o LockObserver) Locker {
	return observedLocker{l: l, o: o}
}

type observedLocker struct {
	l Locker
	o LockObserver
}

func (w observedLocker) Acquire(ctx context.Context, key string) (Lease, error) {
	t0 := time.Now()
	g, err := w.l.Acquire(ctx, key)
	granted := time.Now()
	octx := ctx
	if octx == nil {
		octx = context.Background()
	}
	a := Acquired{Key: key, Wait: granted.Sub(t0), Err: err}
	if err != nil {
		w.o.ObserveAcquire(octx, a)
		return nil, err
	}
	a.Token = g.Token()
	w.o.ObserveAcquire(octx, a)
	ol := &observedLease{Lease: g, o: w.o, key: key, granted: granted, ctx: context.WithoutCancel(octx), reported: make(chan struct{})}
	ol.stop = context.AfterFunc(g.Context(), ol.ended)
	if _, ok := g.(ExpiringLease); ok {
		return observedExpiringLease{ol}, nil
	}
	return ol, nil
}

// observedLease is a lease of an ObserveLocker locker.
type observedLease struct {
	Lease
	o       LockObserver
	key     string
	granted time.Time
	ctx     context.Context // Acquire's values, for a loss seen by ended
	stop    func() bool     // stops ended
	done    atomic.Bool     // the end is being reported
	// reported is closed once the end has been reported.
	reported chan struct{}
}

// ended runs when the lease's Context ends: a loss is reported at once;
// a release is reported by Release.
func (g *observedLease) ended() {
	cause := context.Cause(g.Lease.Context())
	if errors.Is(cause, ErrLeaseReleased) {
		return
	}
	g.end(g.ctx, LeaseEnd{Lost: true, Cause: cause})
}

// end reports e, completed, unless the lease's end was reported already.
func (g *observedLease) end(ctx context.Context, e LeaseEnd) {
	if !g.done.CompareAndSwap(false, true) {
		return
	}
	defer close(g.reported)
	now := time.Now()
	e.Key, e.Token, e.Held = g.key, g.Lease.Token(), now.Sub(g.granted)
	if x, ok := g.Lease.(ExpiringLease); ok && e.Lost && !now.Before(x.Expires()) {
		e.Expired = true
	}
	g.o.ObserveLeaseEnd(ctx, e)
}

// Release implements Lease. A lease already lost when it is called (its
// Context ended with another cause than ErrLeaseReleased), or whose
// Release reports the loss, is reported lost. Release returns once the
// lease's end has been reported, by whichever path saw it first.
func (g *observedLease) Release(ctx context.Context) error {
	if ctx == nil {
		return g.Lease.Release(ctx) // refused: the lease stays held
	}
	g.stop()
	var e LeaseEnd
	if lc := g.Lease.Context(); lc.Err() != nil {
		if cause := context.Cause(lc); !errors.Is(cause, ErrLeaseReleased) {
			e.Lost, e.Cause = true, cause
		}
	}
	err := g.Lease.Release(ctx)
	switch {
	case err == nil || e.Lost:
	case errors.Is(err, ErrLeaseLost):
		e.Lost, e.Cause = true, err
	default:
		e.Err = err
	}
	g.end(ctx, e)
	<-g.reported
	return err
}

// safetyMargin keeps the margin the wrapped lease would have had in
// Update.
func (g *observedLease) safetyMargin() time.Duration { return safetyMargin(g.Lease, g.granted) }

// observedExpiringLease is an observedLease over an ExpiringLease.
type observedExpiringLease struct{ *observedLease }

func (g observedExpiringLease) Expires() time.Time { return g.Lease.(ExpiringLease).Expires() }
