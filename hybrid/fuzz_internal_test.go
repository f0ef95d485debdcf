package hybrid

import (
	"context"
	"errors"
	"testing"
	"time"
)

type fuzzLease struct {
	ctx     context.Context
	expires time.Time
}

func (g fuzzLease) Token() uint64                   { return 1 }
func (g fuzzLease) Context() context.Context        { return g.ctx }
func (g fuzzLease) Release(_ context.Context) error { return nil }

type fuzzExpiringLease struct{ fuzzLease }

func (g fuzzExpiringLease) Expires() time.Time { return g.expires }

// fixedLocker grants the same lease every time.
type fixedLocker struct{ lease Lease }

func (f fixedLocker) Acquire(context.Context, string) (Lease, error) { return f.lease, nil }

// FuzzCheckMargin checks the guard Update runs before its fenced write, on
// leases with any expiry and any safety margin (WithSafetyMargin's wrapper
// included): a lost lease fails with ErrLeaseLost and its cause; the
// default margin is at most DefaultSafetyMargin and a fifth of the time
// left; a lease whose remaining time is under the margin fails with
// ErrLeaseExpiring; a lease that does not say when it expires is never
// refused for time; nothing panics on extreme durations. Run it with
//
//	go test -run '^$' -fuzz '^FuzzCheckMargin$' -fuzztime 20s ./hybrid/
func FuzzCheckMargin(f *testing.F) {
	s := int64(time.Second)
	f.Add(10*s, s, true, true, false)
	f.Add(s/2, s, true, true, false)
	f.Add(-s, int64(0), true, true, false)
	f.Add(10*s, s, true, false, false)
	f.Add(10*s, s, false, true, false)
	f.Add(10*s, s, true, true, true)
	f.Add(int64(1<<63-1), int64(1<<63-1), false, true, false)
	f.Add(int64(-1<<63), int64(-1<<63), true, true, false)
	f.Add(10*s, -s, true, true, false)
	cause := errors.New("revoked")
	f.Fuzz(func(t *testing.T, leftNs, marginNs int64, hasExpires, wrap, lost bool) {
		ctx, cancel := context.WithCancelCause(context.Background())
		defer cancel(nil)
		if lost {
			cancel(cause)
		}
		base := fuzzLease{ctx: ctx, expires: time.Now().Add(time.Duration(leftNs))}
		var lease Lease = base
		if hasExpires {
			lease = fuzzExpiringLease{base}
		}
		if wrap {
			var err error
			lease, err = WithSafetyMargin(fixedLocker{lease}, time.Duration(marginNs)).Acquire(ctx, "k")
			if err != nil {
				t.Fatal(err)
			}
			if _, ok := lease.(ExpiringLease); ok != hasExpires {
				t.Fatalf("WithSafetyMargin's lease is an ExpiringLease: %v, the wrapped one: %v", ok, hasExpires)
			}
		}
		margin := safetyMargin(lease, time.Now())
		switch {
		case wrap && margin != time.Duration(marginNs):
			t.Fatalf("margin of a WithSafetyMargin lease = %v, want %v", margin, time.Duration(marginNs))
		case !wrap && hasExpires && (margin < 0 || margin > DefaultSafetyMargin || leftNs > 0 && margin > time.Duration(leftNs)/5+time.Second):
			t.Fatalf("default margin of a lease with %v left = %v, want min(%v, a fifth of it)", time.Duration(leftNs), margin, DefaultSafetyMargin)
		}
		err := checkMargin(lease, margin)
		if lost {
			if !errors.Is(err, ErrLeaseLost) || !errors.Is(err, cause) {
				t.Fatalf("checkMargin of a lost lease = %v", err)
			}
			return
		}
		if err != nil && !errors.Is(err, ErrLeaseExpiring) {
			t.Fatalf("checkMargin = %v, not ErrLeaseExpiring", err)
		}
		if !hasExpires {
			if err != nil {
				t.Fatalf("checkMargin of a lease without an expiry (margin %v) = %v", margin, err)
			}
			return
		}
		// Away from the boundary (the clock moves while checking), the
		// answer is exact.
		left := time.Duration(leftNs)
		if d := left - margin; (left >= 0) == (margin >= 0) || (d > 0) == (left > margin) {
			switch {
			case d > time.Second && err != nil:
				t.Fatalf("checkMargin with %v left, margin %v = %v", left, margin, err)
			case d < -time.Second && err == nil:
				t.Fatalf("checkMargin with %v left, margin %v = nil", left, margin)
			}
		}
	})
}
