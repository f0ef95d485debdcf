package leasefaults

import (
	"context"
	"sync"
	"time"

	"github.com/occkit/occkit/benchmarks/internal/linearcheck"
	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/hybrid"
)

// holder is one worker's Locker: it remembers the lease of its current
// grant, so that the worker's mutate function can disturb it, and gives
// each Acquire a context of its own, whose end stops the grant's renewals
// (as a stopped process's renewals stop). With a skew, it is a holder
// whose clock is behind: its leases report an expiry later than the truth
// by skew, and a Context that only their release ends. A holder is used by
// one goroutine at a time.
type holder struct {
	inner hybrid.Locker
	skew  time.Duration
	cur   *heldLease
}

func (h *holder) Acquire(ctx context.Context, key string) (hybrid.Lease, error) {
	actx, stop := context.WithCancel(ctx)
	g, err := h.inner.Acquire(actx, key)
	if err != nil {
		stop()
		return nil, err
	}
	l := &heldLease{inner: g, stopRenewals: stop, skew: h.skew, ctx: g.Context()}
	if h.skew > 0 {
		l.ctx, l.cancel = context.WithCancel(context.Background())
	}
	h.cur = l
	if _, ok := g.(hybrid.ExpiringLease); ok {
		return expiringHeldLease{l}, nil
	}
	return l, nil
}

// heldLease is a lease of a holder. It is a hybrid.ExpiringLease
// (expiringHeldLease) exactly when the inner lease is: a lease that does
// not say when it expires (a PostgreSQL session lock) gets no expiry, and
// hybrid.Update checks no time left on it, as on the inner lease.
type heldLease struct {
	inner        hybrid.Lease
	stopRenewals context.CancelFunc // ends the context given to Acquire
	skew         time.Duration
	ctx          context.Context
	cancel       context.CancelFunc // skewed leases: ends ctx
}

// expiringHeldLease is a heldLease over a hybrid.ExpiringLease.
type expiringHeldLease struct{ *heldLease }

// Expires is the inner lease's expiry plus the skew.
func (l expiringHeldLease) Expires() time.Time {
	return l.inner.(hybrid.ExpiringLease).Expires().Add(l.skew)
}

func (l *heldLease) Token() uint64 { return l.inner.Token() }

// Context is the inner lease's, or for a skewed lease one that only
// Release ends: the holder's wrong clock says the lease still runs.
func (l *heldLease) Context() context.Context { return l.ctx }

func (l *heldLease) Release(ctx context.Context) error {
	err := l.inner.Release(ctx)
	l.stopRenewals()
	if l.cancel != nil {
		l.cancel()
	}
	return err
}

// looksValid is the check hybrid.Update makes before its write: the lease
// is not known lost and, if it is a hybrid.ExpiringLease, at least margin
// of it remains.
func looksValid(g hybrid.Lease, margin time.Duration) bool {
	if g.Context().Err() != nil {
		return false
	}
	e, ok := g.(hybrid.ExpiringLease)
	return !ok || time.Until(e.Expires()) >= margin
}

// watchStore is the fenced store of a run, watching every write: it knows,
// per key, the largest token of an acknowledged fenced write, counts the
// outcomes of stale writes (sent with a smaller token), and records every
// call as the run's history (history.go).
type watchStore struct {
	cas.FencedStore
	t0 time.Time // the start of the run: the history's time 0

	mu      sync.Mutex
	highest map[string]uint64
	stale   staleCounts
	ops     []linearcheck.Op
	// states maps the versions of each key that calls returned to their
	// states; unknown counts the writes left out of the history because
	// the version they expected is not among them.
	states  map[string]map[cas.Version]string
	unknown int64
}

type staleCounts struct{ accepted, rejected, other int64 }

func newWatchStore(s cas.FencedStore) *watchStore {
	return &watchStore{FencedStore: s, t0: time.Now(), highest: map[string]uint64{}, states: map[string]map[cas.Version]string{}}
}

// written returns the largest token that has written key in this run.
func (w *watchStore) written(key string) uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.highest[key]
}

// CompareAndSwapFenced is the fenced write, watched and recorded.
func (w *watchStore) CompareAndSwapFenced(ctx context.Context, key string, expected cas.Version, token uint64, value []byte) (cas.Version, error) {
	stale := token < w.written(key)
	call := w.now()
	v, err := w.FencedStore.CompareAndSwapFenced(ctx, key, expected, token, value)
	w.observe(key, token, stale, err, true)
	w.addWrite(ctx, key, expected, string(value), true, token, call, v, err)
	return v, err
}

// unfencedWrite is the mutant's write: a plain CompareAndSwap by a holder
// of token, classified as a fenced write would be (and recorded as the
// plain write it is).
func (w *watchStore) unfencedWrite(ctx context.Context, key string, expected cas.Version, token uint64, value []byte) (cas.Version, error) {
	stale := token < w.written(key)
	v, err := w.CompareAndSwap(ctx, key, expected, value)
	w.observe(key, token, stale, err, false)
	return v, err
}

func (w *watchStore) observe(key string, token uint64, stale bool, err error, fenced bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if err == nil && fenced && token > w.highest[key] {
		w.highest[key] = token
	}
	if !stale {
		return
	}
	switch {
	case err == nil:
		w.stale.accepted++
	case isFenced(err):
		w.stale.rejected++
	default:
		w.stale.other++
	}
}

func (w *watchStore) counts() staleCounts {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.stale
}
