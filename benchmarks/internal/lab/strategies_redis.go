package lab

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/occkit/occkit/benchmarks/internal/backends"
	"github.com/occkit/occkit/benchmarks/internal/locks"
)

// lock-redis is locks.Redis without a watchdog: a holder that outlives
// the TTL (a pause, a slow write) is not told, which is why the lab's lock
// baselines write with the version they read (a lock that failed to
// exclude shows as a conflict).

// Settings of lock-redis, as a hand-written lock would have them.
const (
	// redisLockTTL is the lock's expiry (PX): far above any critical
	// section of the lab, so that it never expires under a live holder.
	redisLockTTL = 10 * time.Second
	// redisLockPollMin and redisLockPollMax bound the wait between two
	// tries of a waiter: doubling from the first to the second, ±50%
	// jitter, from the first again for every acquisition.
	redisLockPollMin = time.Millisecond
	redisLockPollMax = 50 * time.Millisecond
)

var redisStrategies = []strategySpec{
	{
		Name: "lock-redis",
		Kind: kindLock,
		About: fmt.Sprintf("a hand-written Redis lock around read, work and write: SET key token NX PX %v with a random token, "+
			"polled every %v doubling to %v (±50%% jitter) while held, released by a Lua script that checks the token; no fencing; "+
			"the data may live on any backend (Redis: the redis backend's server, or OCCKIT_REDIS_URL, or one the lab starts)",
			redisLockTTL, redisLockPollMin, redisLockPollMax),
		SingleKey: true, MultiKey: true,
		DefaultOn: defaultOnRedisLocks,
		New:       newRedisLock,
	},
}

// defaultOnRedisLocks: the default grid runs lock-redis and lock-redlock
// where users combine them with the data: beside the in-process store,
// PostgreSQL, Redis itself (a server or a cluster) and DynamoDB (which
// has no lock of its own).
func defaultOnRedisLocks(b string, _ bool) bool {
	return slices.Contains([]string{"memory", "postgres", "redis", "redis-cluster", "dynamodb"}, b)
}

// redisForLocks returns the Redis client a lock strategy uses: the data's
// own Redis (the redis backend's server, the redis-cluster backend's
// cluster), else the redis backend's when it is open, else a Redis the
// lab reaches (OCCKIT_REDIS_URL) or starts now, kept for the rest of the
// run.
func redisForLocks(ctx context.Context, h *harness) (redis.UniversalClient, error) {
	if cli := h.Backend.RedisUniversal(); cli != nil {
		return cli, nil
	}
	b, err := h.lab.openOnDemand(ctx, backends.Redis)
	if err != nil {
		return nil, fmt.Errorf("no Redis for the lock (%v): %w", err, errNotApplicable)
	}
	return b.RedisUniversal(), nil
}

func newRedisLock(ctx context.Context, h *harness) (cellStrategy, error) {
	cli, err := redisForLocks(ctx, h)
	if err != nil {
		return nil, err
	}
	h.OnClose(func(ctx context.Context) error { return backends.DeleteRedisPrefix(ctx, cli, "lab-lock:"+h.NS+"/") })
	return lockedDo(h, "lab-lock:"+h.NS+"/", &locks.Redis{Client: cli, TTL: redisLockTTL, PollMin: redisLockPollMin, PollMax: redisLockPollMax}), nil
}
