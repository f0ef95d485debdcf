package story

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-redsync/redsync/v4"
	redsyncredis "github.com/go-redsync/redsync/v4/redis"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"

	"github.com/occkit/occkit/adapters/rediscas"
	"github.com/occkit/occkit/hybrid"
)

// lockService is a mode's lock as a run sees it: it makes a lock client
// per client lane, and looks at the server directly (never through a
// fault) to tell whether a grant still holds.
type lockService interface {
	// newLocker returns a lock client that reaches the lock's servers at
	// ep (directly, or through proxies).
	newLocker(ctx context.Context, ep endpoints) (locker, error)
	// held reports whether the grant ref holds the lock on the server now.
	held(ctx context.Context, ref string) (bool, error)
	// expireEarly ends the grant ref on the server before its time, as a
	// forward clock jump would, and says what it did.
	expireEarly(ctx context.Context, ref string) (string, error)
	// expired says how the end of a grant shows on the server.
	expired() string
	// cleanup removes the run's lock state from the servers.
	cleanup(ctx context.Context) error
	close()
}

// locker is one client's lock.
type locker interface {
	// acquire waits until the client holds the lock, or ctx ends.
	acquire(ctx context.Context) (grant, error)
	close()
}

// grant is one acquisition of a lock.
type grant interface {
	// token is the grant's fencing token (0: none).
	token() uint64
	// ref names the grant on the server, for lockService.held.
	ref() string
	// expires returns when the grant ends unless renewed, as the client
	// last learned it (false: it does not know).
	expires() (time.Time, bool)
	// lost is closed when the client learns that the grant is lost; nil
	// when it never learns.
	lost() <-chan struct{}
	// lostCause says how the client learned it.
	lostCause() string
	// release gives the grant back (deleting only this grant's lock).
	release(ctx context.Context) error
}

// ---- redis and redis-watchdog: SET NX PX, optionally renewed ----

// redisCompareDelete deletes the lock only if it still holds the token.
var redisCompareDelete = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
`)

// redisCompareExpire sets the lock's TTL to ARGV[2] ms only if it still
// holds the token (the watchdog's renewal; PEXPIRE 1 for a clock jump).
var redisCompareExpire = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
`)

func openRedisLock(watchdog bool) func(context.Context, *run) (lockService, error) {
	return func(_ context.Context, r *run) (lockService, error) {
		return &redisLockService{rdb: r.rdb, key: r.redisKey("lock"), ttl: r.spec.TTL, watchdog: watchdog}, nil
	}
}

type redisLockService struct {
	rdb      *redis.Client
	key      string
	ttl      time.Duration
	watchdog bool
}

func (s *redisLockService) newLocker(_ context.Context, ep endpoints) (locker, error) {
	return &redisLocker{cli: ep.Redis.client(), key: s.key, ttl: s.ttl, watchdog: s.watchdog}, nil
}

func (s *redisLockService) held(ctx context.Context, ref string) (bool, error) {
	v, err := s.rdb.Get(ctx, s.key).Result()
	if errors.Is(err, redis.Nil) {
		return false, nil
	}
	return v == ref, err
}

func (s *redisLockService) expireEarly(ctx context.Context, ref string) (string, error) {
	n, err := redisCompareExpire.Run(ctx, s.rdb, []string{s.key}, ref, 1).Int()
	if err != nil {
		return "", err
	}
	if n == 0 {
		return "", errors.New("the holder's lock key was already gone")
	}
	return "the server's clock jumped forward: the runner expired the holder's lock key early (PEXPIRE 1 ms)", nil
}

func (s *redisLockService) expired() string {
	return "its lock key's TTL ran out in Redis"
}

func (s *redisLockService) cleanup(context.Context) error { return nil } // under the run's prefix
func (s *redisLockService) close()                        {}

type redisLocker struct {
	cli      *redis.Client
	key      string
	ttl      time.Duration
	watchdog bool
}

func (l *redisLocker) close() { l.cli.Close() }

func (l *redisLocker) acquire(ctx context.Context) (grant, error) {
	var b [16]byte
	_, _ = crand.Read(b[:])
	tok := hex.EncodeToString(b[:])
	wait := time.Millisecond
	for {
		sent := time.Now()
		err := l.cli.Do(ctx, "SET", l.key, tok, "NX", "PX", l.ttl.Milliseconds()).Err()
		if err == nil {
			g := &redisGrant{l: l, tok: tok, lostCh: make(chan struct{}), stop: make(chan struct{}), done: make(chan struct{})}
			g.exp.Store(sent.Add(l.ttl).UnixNano())
			if l.watchdog {
				go g.watch()
			} else {
				close(g.done)
			}
			return g, nil
		}
		if !errors.Is(err, redis.Nil) { // redis.Nil: not set, somebody holds it
			return nil, err
		}
		if !sleep(ctx, wait/2+rand.N(wait/2+1)) {
			return nil, ctx.Err()
		}
		wait = min(2*wait, 20*time.Millisecond)
	}
}

type redisGrant struct {
	l      *redisLocker
	tok    string
	exp    atomic.Int64
	lostCh chan struct{}
	cause  atomic.Value // string
	once   sync.Once
	stop   chan struct{}
	done   chan struct{}
}

func (g *redisGrant) token() uint64 { return 0 }
func (g *redisGrant) ref() string   { return g.tok }

func (g *redisGrant) expires() (time.Time, bool) {
	return time.Unix(0, g.exp.Load()), g.l.watchdog
}

func (g *redisGrant) lost() <-chan struct{} {
	if !g.l.watchdog {
		return nil
	}
	return g.lostCh
}

func (g *redisGrant) lostCause() string {
	s, _ := g.cause.Load().(string)
	return s
}

func (g *redisGrant) lose(cause string) {
	g.once.Do(func() {
		g.cause.Store(cause)
		close(g.lostCh)
	})
}

// watch is the watchdog: it renews the lock every TTL/3 while it still
// holds the token, and gives up (the grant is lost) when it finds the key
// gone or someone else's, or could not renew it before it expired.
func (g *redisGrant) watch() {
	defer close(g.done)
	every := g.l.ttl / 3
	t := time.NewTimer(every)
	defer t.Stop()
	for {
		select {
		case <-g.stop:
			return
		case <-t.C:
		}
		sent := time.Now()
		exp := time.Unix(0, g.exp.Load())
		if !sent.Before(exp) {
			// The timer fired late: the process was stopped past the
			// expiry.
			g.lose(fmt.Sprintf("its watchdog woke %v after the lock had expired (the process was stopped)", sent.Sub(exp).Round(time.Millisecond)))
			return
		}
		ctx, cancel := context.WithDeadline(context.Background(), exp)
		n, err := redisCompareExpire.Run(ctx, g.l.cli, []string{g.l.key}, g.tok, g.l.ttl.Milliseconds()).Int()
		cancel()
		switch {
		case err == nil && n == 1:
			g.exp.Store(sent.Add(g.l.ttl).UnixNano())
			t.Reset(every)
		case err == nil:
			g.lose("its watchdog found the lock key gone or someone else's")
			return
		case !time.Now().Before(exp):
			g.lose(fmt.Sprintf("its watchdog could not renew the lock before it expired: %v", err))
			return
		default:
			t.Reset(min(every/4, time.Until(exp)))
		}
	}
}

func (g *redisGrant) release(ctx context.Context) error {
	close(g.stop)
	<-g.done
	return redisCompareDelete.Run(ctx, g.l.cli, []string{g.l.key}, g.tok).Err()
}

// ---- fenced: rediscas.Locker (INCR tokens, a watchdog) ----

// fencedLockKey is the lock key rediscas.Locker locks the stock with.
const fencedLockKey = "stock"

func openFencedLock(_ context.Context, r *run) (lockService, error) {
	s := &fencedLockService{rdb: r.rdb, prefix: r.redisKey("flock:"), ttl: r.spec.TTL}
	if _, err := rediscas.NewLocker(r.rdb, rediscas.LockerConfig{Prefix: s.prefix, TTL: s.ttl}); err != nil {
		return nil, err
	}
	// The lock key's layout is documented (rediscas.Locker).
	s.key = s.prefix + "{" + fencedLockKey + "}"
	return s, nil
}

type fencedLockService struct {
	rdb    *redis.Client
	prefix string
	key    string
	ttl    time.Duration
}

func (s *fencedLockService) newLocker(_ context.Context, ep endpoints) (locker, error) {
	cli := ep.Redis.client()
	l, err := rediscas.NewLocker(cli, rediscas.LockerConfig{Prefix: s.prefix, TTL: s.ttl, PollInterval: 20 * time.Millisecond})
	if err != nil {
		cli.Close()
		return nil, err
	}
	return &hybridLocker{l: l, key: fencedLockKey, closeFn: func() { cli.Close() }}, nil
}

// held: the lock key holds "<token>:<holder>".
func (s *fencedLockService) held(ctx context.Context, ref string) (bool, error) {
	v, err := s.rdb.Get(ctx, s.key).Result()
	if errors.Is(err, redis.Nil) {
		return false, nil
	}
	return strings.HasPrefix(v, ref+":"), err
}

var fencedExpire = redis.NewScript(`
local v = redis.call('GET', KEYS[1])
if v and string.sub(v, 1, #ARGV[1] + 1) == ARGV[1] .. ':' then
  return redis.call('PEXPIRE', KEYS[1], 1)
end
return 0
`)

func (s *fencedLockService) expireEarly(ctx context.Context, ref string) (string, error) {
	n, err := fencedExpire.Run(ctx, s.rdb, []string{s.key}, ref).Int()
	if err != nil {
		return "", err
	}
	if n == 0 {
		return "", errors.New("the holder's lock key was already gone")
	}
	return "the server's clock jumped forward: the runner expired the holder's lock key early (PEXPIRE 1 ms)", nil
}

func (s *fencedLockService) expired() string               { return "its lock key's TTL ran out in Redis" }
func (s *fencedLockService) cleanup(context.Context) error { return nil } // under the run's prefix
func (s *fencedLockService) close()                        {}

// hybridLocker adapts a hybrid.Locker (rediscas, etcdcas) whose leases
// have a Context cancelled on loss and an Expires time.
type hybridLocker struct {
	l       hybrid.Locker
	key     string
	closeFn func()
}

func (l *hybridLocker) close() { l.closeFn() }

func (l *hybridLocker) acquire(ctx context.Context) (grant, error) {
	// rediscas's watchdog lives until the lease is released or ctx
	// ends: a story's clients acquire with the story's context.
	lease, err := l.l.Acquire(ctx, l.key)
	if err != nil {
		return nil, err
	}
	return &leaseGrant{lease: lease}, nil
}

type leaseGrant struct{ lease hybrid.Lease }

func (g *leaseGrant) token() uint64 { return g.lease.Token() }
func (g *leaseGrant) ref() string   { return strconv.FormatUint(g.lease.Token(), 10) }

func (g *leaseGrant) expires() (time.Time, bool) {
	e, ok := g.lease.(interface{ Expires() time.Time })
	if !ok {
		return time.Time{}, false
	}
	return e.Expires(), true
}

func (g *leaseGrant) lost() <-chan struct{} { return g.lease.Context().Done() }

func (g *leaseGrant) lostCause() string {
	if err := context.Cause(g.lease.Context()); err != nil {
		return err.Error()
	}
	return ""
}

func (g *leaseGrant) release(ctx context.Context) error { return g.lease.Release(ctx) }

// ---- redlock: redsync over 5 Redis servers ----

// redlockNode is the node whose clock jumps in clock-jump (node 3).
const redlockNode = 2

func openRedlock(_ context.Context, r *run) (lockService, error) {
	if n := len(r.spec.Endpoints.Redlock); n < 3 {
		return nil, fmt.Errorf("redlock needs at least 3 Redis servers, have %d", n)
	}
	s := &redlockService{key: r.redisKey("redlock"), ttl: r.spec.TTL}
	for _, a := range r.spec.Endpoints.Redlock {
		s.nodes = append(s.nodes, a.client())
	}
	return s, nil
}

type redlockService struct {
	nodes []*redis.Client
	key   string
	ttl   time.Duration
}

func (s *redlockService) quorum() int { return len(s.nodes)/2 + 1 }

func (s *redlockService) newLocker(_ context.Context, ep endpoints) (locker, error) {
	l := &redlockLocker{key: s.key, ttl: s.ttl}
	var pools []redsyncredis.Pool
	for _, a := range ep.Redlock {
		c := a.client()
		l.clients = append(l.clients, c)
		pools = append(pools, goredis.NewPool(c))
	}
	l.rs = redsync.New(pools...)
	return l, nil
}

// held: the grant's value is on a majority of the servers.
func (s *redlockService) held(ctx context.Context, ref string) (bool, error) {
	n := 0
	for _, c := range s.nodes {
		v, err := c.Get(ctx, s.key).Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			return false, err
		}
		if v == ref {
			n++
		}
	}
	return n >= s.quorum(), nil
}

func (s *redlockService) expireEarly(ctx context.Context, ref string) (string, error) {
	n, err := redisCompareExpire.Run(ctx, s.nodes[redlockNode], []string{s.key}, ref, 1).Int()
	if err != nil {
		return "", err
	}
	if n == 0 {
		return "", fmt.Errorf("the holder's key on node %d was already gone", redlockNode+1)
	}
	return fmt.Sprintf("node %d's clock jumped forward: the holder's key there expired early (the runner set PEXPIRE 1 ms on it)", redlockNode+1), nil
}

func (s *redlockService) expired() string {
	return fmt.Sprintf("its keys remain on fewer than %d of the %d Redis servers", s.quorum(), len(s.nodes))
}

func (s *redlockService) cleanup(ctx context.Context) error {
	var errs []error
	for _, c := range s.nodes {
		errs = append(errs, c.Del(ctx, s.key).Err())
	}
	return errors.Join(errs...)
}

func (s *redlockService) close() {
	for _, c := range s.nodes {
		c.Close()
	}
}

type redlockLocker struct {
	clients []*redis.Client
	rs      *redsync.Redsync
	key     string
	ttl     time.Duration
}

func (l *redlockLocker) close() {
	for _, c := range l.clients {
		c.Close()
	}
}

func (l *redlockLocker) acquire(ctx context.Context) (grant, error) {
	m := l.rs.NewMutex(l.key, redsync.WithExpiry(l.ttl), redsync.WithTries(1<<30),
		redsync.WithRetryDelay(20*time.Millisecond))
	if err := m.LockContext(ctx); err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, err
	}
	return &redlockGrant{m: m}, nil
}

type redlockGrant struct{ m *redsync.Mutex }

func (g *redlockGrant) token() uint64              { return 0 }
func (g *redlockGrant) ref() string                { return g.m.Value() }
func (g *redlockGrant) expires() (time.Time, bool) { return g.m.Until(), false }
func (g *redlockGrant) lost() <-chan struct{}      { return nil }
func (g *redlockGrant) lostCause() string          { return "" }

func (g *redlockGrant) release(ctx context.Context) error {
	// Unreachable servers fail their part; the others release.
	_, _ = g.m.UnlockContext(ctx)
	return nil
}

// sleep waits d or until ctx ends (false).
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
