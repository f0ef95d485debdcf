package story

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/go-redsync/redsync/v4"
	"github.com/redis/go-redis/v9"

	"github.com/occkit/occkit/adapters/rediscas"
	"github.com/occkit/occkit/benchmarks/internal/locks"
)

// lockService is a mode's lock as a run sees it: it makes a lock client
// per client lane, and looks at the server directly (never through a
// fault) to tell whether a grant still holds. The locks themselves are
// the lab's (benchmarks/internal/locks).
type lockService interface {
	// newLocker returns a lock client that reaches the lock's servers at
	// ep (directly, or through proxies).
	newLocker(ctx context.Context, ep endpoints) (*locker, error)
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

// locker is one client's lock: a lock client, the name of the story's
// lock, and what closes the client.
type locker struct {
	l     locks.Locker
	name  string
	close func()
}

// acquire waits until the client holds the lock, or ctx ends.
func (l *locker) acquire(ctx context.Context) (*locks.Grant, error) { return l.l.Acquire(ctx, l.name) }

// ---- redis and redis-watchdog: locks.Redis, optionally renewed ----

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

func (s *redisLockService) newLocker(_ context.Context, ep endpoints) (*locker, error) {
	cli := ep.Redis.client()
	l := &locks.Redis{Client: cli, TTL: s.ttl, PollMax: 20 * time.Millisecond, Watchdog: s.watchdog}
	return &locker{l: l, name: s.key, close: func() { cli.Close() }}, nil
}

func (s *redisLockService) held(ctx context.Context, ref string) (bool, error) {
	v, err := s.rdb.Get(ctx, s.key).Result()
	if errors.Is(err, redis.Nil) {
		return false, nil
	}
	return v == ref, err
}

func (s *redisLockService) expireEarly(ctx context.Context, ref string) (string, error) {
	if err := expireKey(ctx, s.rdb, s.key, ref, "the holder's lock key was already gone"); err != nil {
		return "", err
	}
	return "the server's clock jumped forward: the runner expired the holder's lock key early (PEXPIRE 1 ms)", nil
}

// expireKey expires key in 1 ms if it holds ref, or returns gone.
func expireKey(ctx context.Context, cli *redis.Client, key, ref, gone string) error {
	n, err := locks.RedisCompareExpire.Run(ctx, cli, []string{key}, ref, 1).Int()
	if err == nil && n == 0 {
		err = errors.New(gone)
	}
	return err
}

func (s *redisLockService) expired() string {
	return "its lock key's TTL ran out in Redis"
}

func (s *redisLockService) cleanup(context.Context) error { return nil } // under the run's prefix
func (s *redisLockService) close()                        {}

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

func (s *fencedLockService) newLocker(_ context.Context, ep endpoints) (*locker, error) {
	cli := ep.Redis.client()
	l, err := rediscas.NewLocker(cli, rediscas.LockerConfig{Prefix: s.prefix, TTL: s.ttl, PollInterval: 20 * time.Millisecond})
	if err != nil {
		cli.Close()
		return nil, err
	}
	// rediscas's watchdog lives until the lease is released or the
	// acquiring context ends: a story's clients acquire with the story's
	// context.
	return &locker{l: locks.Lease(l), name: fencedLockKey, close: func() { cli.Close() }}, nil
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

// ---- redlock: locks.Redlock over 5 Redis servers ----

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

func (s *redlockService) newLocker(_ context.Context, ep endpoints) (*locker, error) {
	var clients []*redis.Client
	for _, a := range ep.Redlock {
		clients = append(clients, a.client())
	}
	l := locks.NewRedlock(clients, redsync.WithExpiry(s.ttl), redsync.WithTries(1<<30), redsync.WithRetryDelay(20*time.Millisecond))
	return &locker{l: l, name: s.key, close: func() { closeAll(clients) }}, nil
}

func closeAll(clients []*redis.Client) {
	for _, c := range clients {
		c.Close()
	}
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
	if err := expireKey(ctx, s.nodes[redlockNode], s.key, ref, fmt.Sprintf("the holder's key on node %d was already gone", redlockNode+1)); err != nil {
		return "", err
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

func (s *redlockService) close() { closeAll(s.nodes) }
