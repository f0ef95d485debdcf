package lockertest_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/hybrid"
	"github.com/occkit/occkit/hybrid/lockertest"
	"github.com/occkit/occkit/internal/mutanttest"
)

// The suite is only worth something if it fails for broken lockers. Each
// mutant below is a small in-process locker with one deliberate bug; the
// test runs the suite against it in a child process and expects the named
// subtest to fail. The control (no bug) must pass the same subtests.

type bug string

const (
	bugNone         bug = ""
	bugReuseTokens  bug = "reuse-tokens"   // every grant gets token 1
	bugReleaseByKey bug = "release-by-key" // Release frees the key whoever holds it
	bugNilPanic     bug = "nil-panic"      // a nil context panics
	bugIgnoreCtx    bug = "ignore-ctx"     // a waiting Acquire ignores its context
	bugNoExclusion  bug = "no-exclusion"   // a held key is granted again
	bugLostCause    bug = "lost-cause"     // an expired lease's cause is not hybrid.ErrLeaseLost
	bugNoWake       bug = "no-wake"        // a release does not wake the waiters
)

var mutants = []mutanttest.Case{
	{Mutant: string(bugReuseTokens), Subtests: []string{"Basic/TokensGrow"}},
	{Mutant: string(bugReleaseByKey), Subtests: []string{"Basic/StaleReleaseKeepsNewerHolder"}},
	{Mutant: string(bugNilPanic), Subtests: []string{"Contexts/NilContext"}},
	{Mutant: string(bugIgnoreCtx), Subtests: []string{"Contexts/CancelledContext"}},
	{Mutant: string(bugNoExclusion), Subtests: []string{"Concurrency/MutualExclusion"}},
	{Mutant: string(bugLostCause), Subtests: []string{"Expiry/LostLease"}},
	{Mutant: string(bugNoWake), Subtests: []string{"Concurrency/WaitersWoken"}},
}

const mutantEnv = "LOCKERTEST_MUTANT"

func TestSuiteCatchesMutants(t *testing.T) {
	mutanttest.Run(t, mutantEnv, "TestMutant", mutants)
}

// TestMutant runs the suite against the locker named by LOCKERTEST_MUTANT;
// it only runs as a child of TestSuiteCatchesMutants.
func TestMutant(t *testing.T) {
	v, ok := mutanttest.Child(mutantEnv)
	if !ok {
		t.Skip("runs only as a child process of TestSuiteCatchesMutants")
	}
	b := bug(v)
	const ttl = time.Second
	lockertest.Run(t, lockertest.Harness{
		NewLockers: func(t *testing.T, n int) []hybrid.Locker {
			l := &mutantLocker{bug: b, ttl: ttl, keys: map[string]*mutantKey{}}
			ls := make([]hybrid.Locker, n)
			for i := range ls {
				ls[i] = l
			}
			return ls
		},
		TTL: ttl,
	})
}

// mutantLocker is an in-process lease lock (one key's leases expire after
// ttl, tokens from one counter) with the bug it is given.
type mutantLocker struct {
	bug    bug
	ttl    time.Duration
	mu     sync.Mutex
	tokens uint64
	keys   map[string]*mutantKey
}

type mutantKey struct {
	holder *mutantLease
	freed  chan struct{} // closed when holder ends
}

type mutantLease struct {
	l       *mutantLocker
	key     string
	token   uint64
	expires time.Time
	ctx     context.Context
	cancel  context.CancelCauseFunc
}

func (l *mutantLocker) Acquire(ctx context.Context, key string) (hybrid.Lease, error) {
	if ctx == nil && l.bug != bugNilPanic {
		return nil, cas.ErrNilContext
	}
	for {
		if err := ctx.Err(); err != nil && l.bug != bugIgnoreCtx {
			return nil, err
		}
		l.mu.Lock()
		k := l.keys[key]
		if k == nil {
			k = &mutantKey{}
			l.keys[key] = k
		}
		now := time.Now()
		if k.holder == nil || !now.Before(k.holder.expires) || l.bug == bugNoExclusion {
			g := l.grant(k, key, now)
			l.mu.Unlock()
			return g, nil
		}
		freed, wait := k.freed, k.holder.expires.Sub(now)
		l.mu.Unlock()
		if l.bug == bugNoWake {
			freed = nil
		}
		done := ctx.Done()
		if l.bug == bugIgnoreCtx {
			done = nil
		}
		t := time.NewTimer(wait)
		select {
		case <-freed:
		case <-t.C:
		case <-done:
		}
		t.Stop()
	}
}

// grant makes a new lease on k; l.mu is held.
func (l *mutantLocker) grant(k *mutantKey, key string, now time.Time) *mutantLease {
	if k.holder != nil && !now.Before(k.holder.expires) {
		k.holder.cancel(l.lostCause())
		close(k.freed)
	}
	l.tokens++
	g := &mutantLease{l: l, key: key, token: l.tokens, expires: now.Add(l.ttl)}
	if l.bug == bugReuseTokens {
		g.token = 1
	}
	dctx, dcancel := context.WithDeadlineCause(context.Background(), g.expires, l.lostCause())
	cctx, ccancel := context.WithCancelCause(dctx)
	g.ctx, g.cancel = cctx, func(cause error) { ccancel(cause); dcancel() }
	if k.holder == nil || !now.Before(k.holder.expires) {
		k.freed = make(chan struct{})
	}
	k.holder = g
	return g
}

func (l *mutantLocker) lostCause() error {
	if l.bug == bugLostCause {
		return errors.New("mutant: lease expired")
	}
	return fmt.Errorf("%w: mutant lease expired", hybrid.ErrLeaseLost)
}

func (g *mutantLease) Token() uint64            { return g.token }
func (g *mutantLease) Context() context.Context { return g.ctx }
func (g *mutantLease) Expires() time.Time       { return g.expires }

func (g *mutantLease) Release(ctx context.Context) error {
	if ctx == nil && g.l.bug != bugNilPanic {
		return cas.ErrNilContext
	}
	_ = ctx.Err() // a nil ctx panics here
	l := g.l
	l.mu.Lock()
	defer l.mu.Unlock()
	g.cancel(hybrid.ErrLeaseReleased)
	k := l.keys[g.key]
	if k == nil || k.holder == nil || k.holder != g && l.bug != bugReleaseByKey {
		return nil
	}
	k.holder = nil
	close(k.freed)
	return nil
}
