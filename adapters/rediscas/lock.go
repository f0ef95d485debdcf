package rediscas

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/hybrid"
	"github.com/occkit/occkit/internal/ctxwait"
	"github.com/occkit/occkit/internal/leases"
	"github.com/occkit/occkit/internal/writeid"
	"github.com/redis/go-redis/v9"
)

// Defaults for LockerConfig's zero fields.
const (
	DefaultLockPrefix   = "occkit-lock:"
	DefaultLockTTL      = 10 * time.Second
	DefaultPollInterval = 50 * time.Millisecond
	// MinLockTTL is the shortest LockerConfig.TTL.
	MinLockTTL = 10 * time.Millisecond
)

// The lock scripts. A lock is a string key holding "<token>:<holder>",
// set with a TTL; its tokens come from a counter key beside it (the same
// hash tag, so one slot in a cluster), which is never deleted.

// acquireScript grants the lock if it is free.
//
//	KEYS[1] lock key, KEYS[2] token counter
//	ARGV[1] holder id, ARGV[2] TTL (ms)
//
// Replies: {"ok", token} | {"held", remaining TTL in ms}. The same holder
// asking again (a re-sent request) gets its own grant back. Tokens, like
// versions, are at least the server's clock in microseconds (findSrc's
// nextVersion), so that a failover, whose promoted replica may lack the
// last grants, does not give a token out twice.
var acquireScript = redis.NewScript(findSrc + `
local cur = redis.call('GET', KEYS[1])
if cur then
  local sep = string.find(cur, ':', 1, true)
  if sep and string.sub(cur, sep + 1) == ARGV[1] then
    return {'ok', string.sub(cur, 1, sep - 1)}
  end
  return {'held', tostring(redis.call('PTTL', KEYS[1]))}
end
local tok = nextVersion(KEYS[2])
redis.call('SET', KEYS[1], tok .. ':' .. ARGV[1], 'PX', ARGV[2])
return {'ok', tok}
`)

// extendScript renews the grant "<token>:<holder>" = ARGV[1] for ARGV[2] ms,
// only if the lock still holds it. Replies 1 (renewed) or 0 (lost).
var extendScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
`)

// releaseScript deletes the lock only if it holds holder ARGV[2] with token
// ARGV[1] ("" after a failed acquire, when the token is unknown: holder ids
// are unique per grant). Replies 1 (released) or 0.
var releaseScript = redis.NewScript(`
local cur = redis.call('GET', KEYS[1])
if not cur then return 0 end
local sep = string.find(cur, ':', 1, true)
if not sep or string.sub(cur, sep + 1) ~= ARGV[2] then return 0 end
if ARGV[1] ~= '' and string.sub(cur, 1, sep - 1) ~= ARGV[1] then return 0 end
return redis.call('DEL', KEYS[1])
`)

// LockerConfig configures a Locker. The zero value is usable.
type LockerConfig struct {
	// Prefix is prepended to lock keys (default "occkit-lock:"). Lockers
	// that must exclude each other use the same prefix. Fencing tokens
	// are counted per lock key, so a store key must always be protected
	// through lockers with one prefix.
	Prefix string
	// TTL is how long a grant lasts unless renewed (default 10 s, at least
	// MinLockTTL). The holder's watchdog renews it every TTL/3; a holder
	// that stops renewing (a crashed or paused process, a lost network)
	// loses the lock after at most TTL.
	TTL time.Duration
	// PollInterval is the longest wait between two tries of a waiting
	// Acquire (default 50 ms); the first tries come sooner.
	PollInterval time.Duration
}

// Locker is a lease lock on Redis, for hybrid.Update and the benchmarks.
//
// A grant is a key Prefix + "{" + key + "}" holding "<token>:<holder>",
// set with SET ... PX TTL by a script that takes the token from a
// counter key beside it (one more than the last, and at least the
// server's clock in microseconds) (Prefix + "{" + key + "}:token", never deleted), so
// every grant of a key gets a larger token than the grants before it. A
// waiting Acquire polls, at most the lock's remaining TTL and PollInterval
// apart. Every grant has a watchdog goroutine that renews it every TTL/3
// with a script that checks its token and holder; the lease's Context is
// cancelled (with a cause matching hybrid.ErrLeaseLost) when a renewal
// finds the lock gone or held by another grant, or when Redis could not be
// reached before the lease expired. The watchdog stops when the lease is
// released or lost, or when the context given to Acquire ends: the lease
// then runs out after TTL.
// Release deletes the lock only if it still holds this grant, so a late or
// repeated Release never removes a newer holder's lock.
//
// The lock alone is not safe (a process can pause past the TTL without
// knowing it): use it with a store that checks its tokens
// (cas.FencedStore), as hybrid.Update does.
//
// A Locker is safe for concurrent use. Release every lease it grants: its
// watchdog runs until then. Close ends the leases still held (the client
// stays the caller's).
type Locker struct {
	cli    redis.UniversalClient
	prefix string
	ttl    time.Duration
	ttlMs  string
	poll   time.Duration

	renewed atomic.Uint64 // renewals that extended a grant

	leases *leases.Set[*Lease] // whose watchdog runs
}

// errLockerClosed is the error of Acquire on a closed Locker, and the
// cause of the Context of the leases Close ended. It matches
// hybrid.ErrLockerClosed as well as hybrid.ErrLeaseLost, so that
// hybrid.Update and Txn end at once instead of retrying for a fresh lease
// a closed locker will never grant.
var errLockerClosed = fmt.Errorf("%w: rediscas: %w", hybrid.ErrLeaseLost, hybrid.ErrLockerClosed)

var (
	_ hybrid.Locker         = (*Locker)(nil)
	_ hybrid.RenewalCounter = (*Locker)(nil)
)

// NewLocker returns a Locker on the Redis server (or cluster) cli talks to.
func NewLocker(cli redis.UniversalClient, cfg LockerConfig) (*Locker, error) {
	if cli == nil {
		return nil, errors.New("rediscas: nil client")
	}
	if cfg.Prefix == "" {
		cfg.Prefix = DefaultLockPrefix
	}
	if cfg.TTL == 0 {
		cfg.TTL = DefaultLockTTL
	}
	if cfg.PollInterval == 0 {
		cfg.PollInterval = DefaultPollInterval
	}
	if cfg.TTL < MinLockTTL {
		return nil, fmt.Errorf("rediscas: lock TTL %v is below %v", cfg.TTL, MinLockTTL)
	}
	if cfg.PollInterval < 0 {
		return nil, fmt.Errorf("rediscas: negative PollInterval %v", cfg.PollInterval)
	}
	return &Locker{
		cli:    cli,
		prefix: cfg.Prefix,
		ttl:    cfg.TTL,
		ttlMs:  strconv.FormatInt(cfg.TTL.Milliseconds(), 10),
		poll:   cfg.PollInterval,
		leases: leases.NewSet[*Lease](),
	}, nil
}

// Close ends every lease the Locker granted and that was not released:
// their Contexts are cancelled (the cause matches hybrid.ErrLeaseLost),
// their watchdogs stopped and their locks deleted (by token and holder,
// as Release does; a lock Close cannot delete, Redis unreachable, runs
// out after the TTL, and Close returns the errors). Acquire fails from
// then on, also a call already waiting, with an error matching
// hybrid.ErrLeaseLost. The client stays open: it is the
// caller's. Close is safe for concurrent use with the other methods;
// closing again does nothing and returns nil.
func (l *Locker) Close() error {
	var errs []error
	for _, g := range l.leases.Close(errLockerClosed) {
		g.cancel(errLockerClosed)
		<-g.done
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if err := g.deleteLock(ctx); err != nil {
			errs = append(errs, err)
		}
		cancel()
	}
	return errors.Join(errs...)
}

// lockKey returns the Redis key of key's lock: Prefix + "{" + key + "}".
// The braces make it a hash tag, so the lock and its token counter share a
// slot in a cluster.
func (l *Locker) lockKey(key string) string { return l.prefix + "{" + key + "}" }

func (l *Locker) tokenKey(key string) string { return l.lockKey(key) + ":token" }

// Acquire implements hybrid.Locker: it waits until it holds key, or ctx
// ends. The lease, a *Lease, is renewed until it is released or lost, or
// ctx ends.
func (l *Locker) Acquire(ctx context.Context, key string) (hybrid.Lease, error) {
	if ctx == nil {
		return nil, fmt.Errorf("rediscas: acquiring lock %q: %w", key, cas.ErrNilContext)
	}
	if key == "" {
		return nil, errors.New("rediscas: empty lock key")
	}
	closing := l.leases.Closing()
	if closing.Err() != nil {
		return nil, fmt.Errorf("rediscas: acquiring lock %q: %w", key, errLockerClosed)
	}
	holderCtx := ctx
	// A Close ends the wait.
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stop := context.AfterFunc(closing, func() { cancel(errLockerClosed) })
	defer stop()
	keys := []string{l.lockKey(key), l.tokenKey(key)}
	holder := writeid.Random()
	wait := time.Millisecond
	for {
		if err := ctx.Err(); err != nil {
			return nil, acquireErr(ctx, key)
		}
		sent := time.Now()
		res, err := acquireScript.Run(ctx, l.cli, keys, holder, l.ttlMs).Result()
		if err != nil {
			if mayHaveApplied(err) {
				// The grant may have been made: give it back, by holder.
				rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
				_ = releaseScript.Run(rctx, l.cli, keys[:1], "", holder).Err()
				cancel()
			}
			if ctx.Err() != nil {
				return nil, acquireErr(ctx, key)
			}
			// Acquiring again is safe (the grant, if made, was given back):
			// Retryable treats this like a failed read.
			return nil, &readError{op: "acquiring lock", key: key, err: err}
		}
		r, err := parseReply(res)
		if err != nil {
			return nil, err
		}
		switch r.status {
		case "ok":
			token, err := strconv.ParseUint(r.field(0), 10, 64)
			if err != nil {
				return nil, fmt.Errorf("rediscas: bad lock token %q: %w", r.field(0), err)
			}
			return l.grant(holderCtx, key, keys[0], token, holder, sent)
		case "held":
			left, _ := strconv.ParseInt(r.field(0), 10, 64)
			d := wait/2 + rand.N(wait/2+1)
			if left >= 0 {
				d = min(d, time.Duration(left+1)*time.Millisecond)
			}
			if ctxwait.Sleep(ctx, d) != nil {
				return nil, acquireErr(ctx, key)
			}
			wait = min(2*wait, l.poll)
		default:
			return nil, fmt.Errorf("rediscas: unexpected lock reply %q", r.status)
		}
	}
}

// acquireErr is the error of an Acquire whose ctx ended: the caller's
// context error, or the locker's closing.
func acquireErr(ctx context.Context, key string) error {
	if cause := context.Cause(ctx); errors.Is(cause, errLockerClosed) {
		return fmt.Errorf("rediscas: acquiring lock %q: %w", key, cause)
	}
	return ctx.Err()
}

// Renewals implements hybrid.RenewalCounter: how many times the
// watchdogs of the Locker's leases have extended a grant (each lease
// held is renewed every TTL/3).
func (l *Locker) Renewals() uint64 { return l.renewed.Load() }

// grant makes the Lease of a grant the server made at or after sent, and
// starts its watchdog; if the Locker was closed meanwhile, it gives the
// grant back and fails.
func (l *Locker) grant(holderCtx context.Context, key, lockKey string, token uint64, holder string, sent time.Time) (*Lease, error) {
	g := &Lease{
		l:       l,
		key:     key,
		lockKey: lockKey,
		token:   token,
		holder:  holder,
		value:   strconv.FormatUint(token, 10) + ":" + holder,
		done:    make(chan struct{}),
	}
	g.expires.Store(sent.Add(l.ttl).UnixNano())
	g.ctx, g.cancel = context.WithCancelCause(context.Background())
	if !l.leases.Add(g) {
		g.cancel(errLockerClosed)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = g.deleteLock(ctx)
		return nil, fmt.Errorf("rediscas: acquiring lock %q: %w", key, errLockerClosed)
	}
	go g.watch(holderCtx)
	return g, nil
}

// Lease is one grant of a Locker, a hybrid.ExpiringLease. Its methods are
// safe for concurrent use.
type Lease struct {
	l       *Locker
	key     string
	lockKey string
	token   uint64
	holder  string
	value   string // "<token>:<holder>", the lock key's value while held
	expires atomic.Int64
	ctx     context.Context
	cancel  context.CancelCauseFunc
	done    chan struct{} // closed when the watchdog has returned
}

var _ hybrid.ExpiringLease = (*Lease)(nil)

// Token implements hybrid.Lease: the value the lock key's token counter
// took for this grant.
func (g *Lease) Token() uint64 { return g.token }

// Context implements hybrid.Lease: it is cancelled when the lease is found
// lost or expires unrenewed (with a cause matching hybrid.ErrLeaseLost),
// and when it is released (hybrid.ErrLeaseReleased).
func (g *Lease) Context() context.Context { return g.ctx }

// Expires implements hybrid.ExpiringLease: it returns when the lock
// expires in Redis unless renewed, as the holder last learned it: the time
// before its last successful renewal was sent, plus the TTL. A paused
// process learns late that it passed.
func (g *Lease) Expires() time.Time { return time.Unix(0, g.expires.Load()) }

// Release implements hybrid.Lease: it stops the watchdog and deletes the
// lock only if it still holds this grant (token and holder), so that a late
// or repeated Release never removes a newer holder's lock. Releasing a
// lost lease, or releasing again, does nothing and returns nil. If it
// fails (ctx ended, Redis unreachable), the lock stays until a later
// Release succeeds or the TTL runs out.
func (g *Lease) Release(ctx context.Context) error {
	if ctx == nil {
		return fmt.Errorf("rediscas: releasing %q: %w", g.key, cas.ErrNilContext)
	}
	g.cancel(hybrid.ErrLeaseReleased)
	<-g.done
	return g.deleteLock(ctx)
}

// deleteLock deletes the lock if it still holds this grant.
func (g *Lease) deleteLock(ctx context.Context) error {
	err := releaseScript.Run(ctx, g.l.cli, []string{g.lockKey}, strconv.FormatUint(g.token, 10), g.holder).Err()
	if err != nil {
		return fmt.Errorf("rediscas: releasing %q: %w", g.key, err)
	}
	return nil
}

// watch renews the grant every TTL/3 until it is released or lost, or the
// holder's context ends (then it lets the lease run out).
func (g *Lease) watch(holder context.Context) {
	defer close(g.done)
	defer g.l.leases.Remove(g)
	every := g.l.ttl / 3
	t := time.NewTimer(every)
	defer t.Stop()
	for {
		select {
		case <-g.ctx.Done():
			return
		case <-holder.Done():
			g.runOut()
			return
		case <-t.C:
		}
		sent := time.Now()
		exp := time.Unix(0, g.expires.Load())
		if !sent.Before(exp) {
			// The timer fired late: the process (or its runtime) was
			// stopped past the lease's expiry, and another holder may have
			// the lock by now.
			g.cancel(fmt.Errorf("%w: rediscas: %q expired %v before it could be renewed (the holder was paused or stalled)",
				hybrid.ErrLeaseLost, g.key, sent.Sub(exp).Round(time.Millisecond)))
			return
		}
		rctx, cancel := context.WithDeadline(g.ctx, exp)
		n, err := extendScript.Run(rctx, g.l.cli, []string{g.lockKey}, g.value, g.l.ttlMs).Int64()
		cancel()
		switch {
		case g.ctx.Err() != nil:
			return
		case err == nil && n == 1:
			g.l.renewed.Add(1)
			g.expires.Store(sent.Add(g.l.ttl).UnixNano())
			t.Reset(every)
		case err == nil:
			g.cancel(fmt.Errorf("%w: rediscas: %q is gone or held by another grant", hybrid.ErrLeaseLost, g.key))
			return
		case !time.Now().Before(exp):
			g.cancel(fmt.Errorf("%w: rediscas: %q could not be renewed before it expired: %w", hybrid.ErrLeaseLost, g.key, err))
			return
		default:
			// Try again soon, before the lease runs out.
			t.Reset(min(every/4+time.Millisecond, time.Until(exp)))
		}
	}
}

// runOut waits until the lease expires (or is released) and cancels its
// context.
func (g *Lease) runOut() {
	t := time.NewTimer(time.Until(g.Expires()))
	defer t.Stop()
	select {
	case <-g.ctx.Done():
	case <-t.C:
		g.cancel(fmt.Errorf("%w: rediscas: %q expired: the context given to Acquire ended and the lease was not renewed", hybrid.ErrLeaseLost, g.key))
	}
}
