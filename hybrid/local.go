package hybrid

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/occkit/occkit/cas"
)

// NewLocalLocker returns an in-process lease lock: each grant lasts ttl
// unless released, and its token is the larger of the locker's last
// token plus one and the clock in microseconds since 1970, so it grows
// with every grant of a key, and a locker made after a restart of the
// process starts above the tokens the last one gave (a store that keeps
// its fence tokens, pgcas or rediscas, would otherwise refuse every write
// of the new process to a key the old one wrote, as stale), as long as
// the clock has not gone back and the old locker gave fewer than a
// million grants a second on average. Use it for a single
// process, for tests, and as the lab's cheapest lock. A waiting Acquire is
// woken as soon as the lease is released or expires. The leases are
// ExpiringLeases and are never renewed: a lease held past ttl is lost (its
// Context's cause matches ErrLeaseLost) and the key granted again.
//
// The returned Locker is safe for concurrent use and holds no resources
// besides its leases' timers (it has no Close).
func NewLocalLocker(ttl time.Duration) Locker {
	if ttl <= 0 {
		ttl = 10 * time.Second
	}
	return &localLocker{ttl: ttl, keys: map[string]*localKey{}, now: time.Now}
}

type localLocker struct {
	ttl    time.Duration
	tokens atomic.Uint64
	now    func() time.Time

	mu   sync.Mutex
	keys map[string]*localKey
}

type localKey struct {
	holder  *localLease
	freed   chan struct{} // closed when holder releases
	waiters int
}

type localLease struct {
	l       *localLocker
	key     string
	token   uint64
	expires time.Time
	ctx     context.Context
	cancel  context.CancelCauseFunc
}

// errExpired is the cause of a local lease's context when its TTL passed.
var errExpired = fmt.Errorf("%w: local lease expired", ErrLeaseLost)

func (l *localLocker) Acquire(ctx context.Context, key string) (Lease, error) {
	if ctx == nil {
		return nil, fmt.Errorf("hybrid: acquire %q: %w", key, cas.ErrNilContext)
	}
	for {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		l.mu.Lock()
		k := l.keys[key]
		if k == nil {
			k = &localKey{}
			l.keys[key] = k
		}
		now := l.now()
		if k.holder == nil || !now.Before(k.holder.expires) {
			g := l.grant(k, key, now)
			l.mu.Unlock()
			return g, nil
		}
		freed, wait := k.freed, k.holder.expires.Sub(now)
		k.waiters++
		l.mu.Unlock()

		t := time.NewTimer(wait)
		select {
		case <-freed:
		case <-t.C:
		case <-ctx.Done():
		}
		t.Stop()
		l.mu.Lock()
		k.waiters--
		l.mu.Unlock()
	}
}

// grant makes a new lease on k; l.mu is held.
func (l *localLocker) grant(k *localKey, key string, now time.Time) *localLease {
	if k.holder != nil { // expired: free its waiters
		k.holder.cancel(errExpired)
		close(k.freed)
	}
	g := &localLease{l: l, key: key, token: l.nextToken(now), expires: now.Add(l.ttl)}
	dctx, dcancel := context.WithDeadlineCause(context.Background(), g.expires, errExpired)
	cctx, ccancel := context.WithCancelCause(dctx)
	g.ctx = cctx
	g.cancel = func(cause error) { ccancel(cause); dcancel() }
	k.holder, k.freed = g, make(chan struct{})
	return g
}

// nextToken returns a token larger than every one l gave before, and
// not below now in microseconds; l.mu is held.
func (l *localLocker) nextToken(now time.Time) uint64 {
	t := max(l.tokens.Load()+1, uint64(max(now.UnixMicro(), 0)))
	l.tokens.Store(t)
	return t
}

func (g *localLease) Token() uint64            { return g.token }
func (g *localLease) Context() context.Context { return g.ctx }
func (g *localLease) Expires() time.Time       { return g.expires }

func (g *localLease) Release(ctx context.Context) error {
	if ctx == nil {
		return fmt.Errorf("hybrid: release %q: %w", g.key, cas.ErrNilContext)
	}
	l := g.l
	l.mu.Lock()
	defer l.mu.Unlock()
	g.cancel(ErrLeaseReleased)
	k := l.keys[g.key]
	if k == nil || k.holder != g {
		return nil // expired and granted again, or released already
	}
	k.holder = nil
	close(k.freed)
	if k.waiters == 0 {
		delete(l.keys, g.key)
	}
	return nil
}
