package hybrid

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/occ"
)

// DefaultSafetyMargin is the largest default safety margin: the least
// lease time that must remain for Update to send its write, for
// ExpiringLeases of lockers not wrapped by WithSafetyMargin. A short lease
// gets a smaller one: a fifth of the time it had left when Update acquired
// it, so that a lease whose TTL is at most DefaultSafetyMargin (100 ms) can
// still be used.
const DefaultSafetyMargin = 100 * time.Millisecond

// Update is a read-modify-write of one key under a lease: acquire a lease
// on key, read, mutate, then write with a fenced compare-and-swap that
// checks both the version read and the lease's token, and release.
//
// The lock makes conflicts rare on a hot key, so few attempts are wasted;
// the fenced write makes the lock's failure harmless: if the lease was lost
// (the holder paused past its TTL and another holder wrote since), the
// write is refused with cas.ErrFenced instead of overwriting newer work.
//
// The read and mutate run with a context cancelled when the lease is lost.
// Before the write, Update refuses to send it when the lease is lost
// (ErrLeaseLost) or, for an ExpiringLease, when less than its safety margin
// remains (ErrLeaseExpiring): min(DefaultSafetyMargin, a fifth of the time
// the lease had left when acquired), or the margin given to
// WithSafetyMargin. A lease that does not report its expiry has no margin
// check. The write itself runs on ctx: once sent, its fencing token
// decides. An ambiguous write (matching cas.ErrAmbiguous: it may have
// applied) is returned, never retried. A conflicted, fenced-off, lost or
// expiring attempt is retried through occ with a fresh lease, unless its
// error matches ErrLockerClosed (a closed locker grants no fresh lease);
// other errors (mutate's, the store's, the locker's) end the call as in
// occ.Update. The typed store's
// underlying Store must be a cas.FencedStore (ErrNotFenced otherwise).
//
//	locker := hybrid.NewLocalLocker(2 * time.Second)
//	stock := cas.NewTyped(store, cas.JSON[int]())
//	left, _, err := hybrid.Update(ctx, locker, stock, "sku-42", func(n int, _ bool) (int, error) {
//		if n == 0 {
//			return 0, ErrSoldOut
//		}
//		return n - 1, nil
//	})
func Update[T any](ctx context.Context, l Locker, s *cas.Typed[T], key string, mutate func(cur T, exists bool) (T, error), opts ...occ.Option) (T, cas.Version, error) {
	var zero T
	fs, ok := s.Store().(cas.FencedStore)
	if !ok {
		return zero, 0, fmt.Errorf("hybrid: %T: %w", s.Store(), ErrNotFenced)
	}
	var (
		written T
		version cas.Version
	)
	opts = append(opts[:len(opts):len(opts)], occ.WithRetryable(retryWithNewLease), occ.WithOp(OpUpdate, key))
	err := occ.Retry(ctx, func(ctx context.Context) error {
		lease, err := l.Acquire(ctx, key)
		if err != nil {
			return err
		}
		margin := safetyMargin(lease, time.Now())
		defer func() {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			// A release that fails leaves the lease to expire; the update
			// itself is decided by the fenced write.
			_ = lease.Release(rctx)
		}()
		wctx, cancel := context.WithCancelCause(ctx)
		defer cancel(nil)
		stop := context.AfterFunc(lease.Context(), func() { cancel(ErrLeaseLost) })
		defer stop()

		cur, ver, err := s.Get(wctx, key)
		if err != nil && !errors.Is(err, cas.ErrNotFound) {
			return leaseErr(wctx, err)
		}
		next, err := mutate(cur, ver != 0)
		if err != nil {
			return err
		}
		if err := checkMargin(lease, margin); err != nil {
			return err
		}
		b, err := s.Encode(key, next)
		if err != nil {
			return err
		}
		// The write runs on the caller's context, not on the lease's: once
		// sent, the fencing token decides whether it applies. Cancelling it
		// when the lease is lost would only make its outcome unknown, and
		// an outcome that may have applied must not be retried (it would
		// apply the mutation twice). A fenced refusal is retried with a
		// new lease; an ambiguous error is returned as is.
		nv, err := fs.CompareAndSwapFenced(ctx, key, ver, lease.Token(), b)
		if err != nil {
			return err
		}
		written, version = next, nv
		return nil
	}, opts...)
	if err != nil {
		return zero, 0, err
	}
	return written, version, nil
}

// The ops Update and Txn report to occ's observers (occ.Attempt.Op,
// occ.Call.Op): their attempts are the calls of occ.Retry's function, one
// lease (or set of leases) each, and Update's carry its key.
const (
	OpUpdate = "hybrid.update"
	OpTxn    = "hybrid.txn"
)

// retryWithNewLease classifies the failures a fresh lease can cure. A
// closed locker's errors match ErrLeaseLost as well, but no fresh lease
// can come from it: they end the call.
func retryWithNewLease(err error) bool {
	if errors.Is(err, ErrLockerClosed) {
		return false
	}
	return errors.Is(err, cas.ErrFenced) || errors.Is(err, ErrLeaseLost) || errors.Is(err, ErrLeaseExpiring)
}

// leaseErr reports err as ErrLeaseLost when the lease's loss is what ended
// the work.
func leaseErr(wctx context.Context, err error) error {
	if errors.Is(context.Cause(wctx), ErrLeaseLost) {
		return fmt.Errorf("%w: %w", ErrLeaseLost, err)
	}
	return err
}

// safetyMargin returns the safety margin of lease, acquired at acquired:
// WithSafetyMargin's, or min(DefaultSafetyMargin, a fifth of the time an
// ExpiringLease had left). Leases that do not report their expiry are not
// checked for time, whatever their margin.
func safetyMargin(lease Lease, acquired time.Time) time.Duration {
	if m, ok := lease.(interface{ safetyMargin() time.Duration }); ok {
		return m.safetyMargin()
	}
	if e, ok := lease.(ExpiringLease); ok {
		return min(DefaultSafetyMargin, max(e.Expires().Sub(acquired)/5, 0))
	}
	return DefaultSafetyMargin
}

// checkMargin refuses a write when the lease is lost, or when it is an
// ExpiringLease with less than margin left.
func checkMargin(lease Lease, margin time.Duration) error {
	if err := lease.Context().Err(); err != nil {
		cause := context.Cause(lease.Context())
		if errors.Is(cause, ErrLeaseLost) {
			return cause
		}
		return fmt.Errorf("%w: %w", ErrLeaseLost, cause)
	}
	exp, ok := lease.(ExpiringLease)
	if !ok {
		return nil
	}
	if left := time.Until(exp.Expires()); left < margin {
		return fmt.Errorf("%w: %v left, margin %v", ErrLeaseExpiring, left.Round(time.Millisecond), margin)
	}
	return nil
}

// WithSafetyMargin returns a Locker whose leases make Update refuse to
// write when less than margin of the lease remains, instead of the default
// (see DefaultSafetyMargin). It only affects ExpiringLeases; the leases it
// returns are ExpiringLeases exactly when l's are.
func WithSafetyMargin(l Locker, margin time.Duration) Locker {
	return marginLocker{l: l, margin: margin}
}

type marginLocker struct {
	l      Locker
	margin time.Duration
}

func (m marginLocker) Acquire(ctx context.Context, key string) (Lease, error) {
	g, err := m.l.Acquire(ctx, key)
	if err != nil {
		return nil, err
	}
	if _, ok := g.(ExpiringLease); ok {
		return marginExpiringLease{marginLease{Lease: g, margin: m.margin}}, nil
	}
	return marginLease{Lease: g, margin: m.margin}, nil
}

// marginLease is a lease of a WithSafetyMargin locker.
type marginLease struct {
	Lease
	margin time.Duration
}

func (m marginLease) safetyMargin() time.Duration { return m.margin }

// marginExpiringLease is a marginLease over an ExpiringLease.
type marginExpiringLease struct{ marginLease }

func (m marginExpiringLease) Expires() time.Time { return m.Lease.(ExpiringLease).Expires() }
