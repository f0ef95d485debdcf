package lab

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"
)

// lock-redis is the Redis lock people write by hand: SET NX PX with a
// random token, polled while somebody else holds it, released by a script
// that deletes the key only if it still holds the token. No fencing token,
// no watchdog: a holder that outlives the TTL (a pause, a slow write) is
// not told, which is why the lab's lock baselines write with the version
// they read (a lock that failed to exclude shows as a conflict).

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

// redisUnlockScript deletes the lock only if it still holds the caller's
// token: a holder whose lock expired and went to someone else must not
// delete the new holder's lock.
var redisUnlockScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
`)

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
// PostgreSQL, Redis itself and DynamoDB (which has no lock of its own).
func defaultOnRedisLocks(b string, _ bool) bool {
	return slices.Contains([]string{"memory", "postgres", "redis", "dynamodb"}, b)
}

// redisForLocks returns the Redis client a lock strategy uses: the redis
// backend's when it is open, else a Redis the lab reaches
// (OCCKIT_REDIS_URL) or starts now, kept for the rest of the run.
func redisForLocks(ctx context.Context, h *harness) (RedisService, error) {
	svc, err := h.OpenService(ctx, "redis", openRedis)
	if err != nil {
		return nil, fmt.Errorf("no Redis for the lock (%v): %w", err, errNotApplicable)
	}
	rs, ok := svc.(RedisService)
	if !ok {
		return nil, fmt.Errorf("the redis service is not a Redis: %w", errNotApplicable)
	}
	return rs, nil
}

func newRedisLock(ctx context.Context, h *harness) (cellStrategy, error) {
	rs, err := redisForLocks(ctx, h)
	if err != nil {
		return nil, err
	}
	cli := rs.RedisClient()
	prefix := "lab-lock:" + h.NS + ":"
	h.OnClose(func(ctx context.Context) error { return deleteRedisPrefix(ctx, cli, prefix) })
	rngs := make([]*rand.Rand, h.Cell.Workers)
	for w := range rngs {
		rngs[w] = rand.New(rand.NewPCG(h.Cell.Seed, uint64(w)+1000))
	}
	return lockedDo(h, func(ctx context.Context, w int, name string) (func(), error) {
		key := prefix + name
		token, err := redisLock(ctx, cli, key, rngs[w])
		if err != nil {
			return nil, err
		}
		return func() {
			uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			// A release that fails leaves the lock to expire.
			_ = redisUnlock(uctx, cli, key, token)
		}, nil
	}), nil
}

// redisLock takes the lock at key: SET key token NX PX ttl until it is
// set, waiting between tries. It returns the token to release it with.
func redisLock(ctx context.Context, cli redis.UniversalClient, key string, rng *rand.Rand) (string, error) {
	var b [16]byte
	_, _ = crand.Read(b[:])
	token := hex.EncodeToString(b[:])
	wait := redisLockPollMin
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		err := cli.Do(ctx, "SET", key, token, "NX", "PX", redisLockTTL.Milliseconds()).Err()
		if err == nil {
			return token, nil
		}
		if !errors.Is(err, redis.Nil) { // redis.Nil: not set, somebody holds it
			return "", err
		}
		d := time.Duration(float64(wait) * (0.5 + rng.Float64()))
		if timer == nil {
			timer = time.NewTimer(d)
		} else {
			timer.Reset(d)
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-timer.C:
		}
		wait = min(2*wait, redisLockPollMax)
	}
}

// redisUnlock releases the lock at key if it still holds token, and
// reports whether it did.
func redisUnlock(ctx context.Context, cli redis.UniversalClient, key, token string) error {
	n, err := redisUnlockScript.Run(ctx, cli, []string{key}, token).Int()
	if err != nil {
		return err
	}
	if n == 0 {
		return errRedisLockLost
	}
	return nil
}

// errRedisLockLost: the lock no longer held the releaser's token (it
// expired, and maybe went to someone else); nothing was deleted.
var errRedisLockLost = errors.New("lock-redis: the lock was no longer ours")

// deleteRedisPrefix removes every key under prefix.
func deleteRedisPrefix(ctx context.Context, cli redis.UniversalClient, prefix string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	it := cli.Scan(ctx, 0, prefix+"*", 1000).Iterator()
	var keys []string
	for it.Next(ctx) {
		keys = append(keys, it.Val())
	}
	if err := it.Err(); err != nil {
		return err
	}
	for len(keys) > 0 {
		n := min(len(keys), 500)
		if err := cli.Del(ctx, keys[:n]...).Err(); err != nil {
			return err
		}
		keys = keys[n:]
	}
	return nil
}
