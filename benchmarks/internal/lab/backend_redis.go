package lab

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/occkit/occkit/adapters/rediscas"
	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/hybrid"
	"github.com/occkit/occkit/internal/servers"
)

// envRedisURL names the Redis server the lab uses; when it is unset, the
// lab starts one (scripts/servers/redis.sh) if redis-server is installed.
const envRedisURL = "OCCKIT_REDIS_URL"

var redisSpecs = []backendSpec{
	{
		Name:  "redis",
		About: "rediscas on Redis: OCCKIT_REDIS_URL, or a throwaway server started with scripts/servers/redis.sh",
		Open:  openRedis,
	},
}

// RedisService is implemented by the redis backend, for strategies that
// lock through Redis.
type RedisService interface {
	RedisClient() redis.UniversalClient
}

type redisBackend struct {
	cli        *redis.Client
	server     string
	durability string
	started    *servers.Script
	url        string // the server's own URL (not the proxy's)
}

// childEnv implements childEnver.
func (b *redisBackend) childEnv() []string { return []string{envRedisURL + "=" + b.url} }

func openRedis(ctx context.Context, env *Env) (_ service, err error) {
	b := &redisBackend{}
	defer func() {
		if err != nil {
			_ = b.Close(context.WithoutCancel(ctx))
		}
	}()
	u, started, err := env.reach(ctx, "redis", envRedisURL, servers.RedisBinary)
	if err != nil {
		return nil, err
	}
	b.started = started
	opts, err := redis.ParseURL(u)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", errUnavailable, envRedisURL, err)
	}
	b.url = u
	if opts.Addr, err = env.dial(opts.Addr); err != nil {
		return nil, fmt.Errorf("%w: %w", errUnavailable, err)
	}
	opts.PoolSize = 3*max(env.MaxWorkers, DefaultWorkers) + 4
	b.cli = redis.NewClient(opts)
	octx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	info, err := b.cli.Info(octx, "server", "persistence").Result()
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", errUnavailable, redactURL(u), err)
	}
	field := func(name string) string { return infoField(info, name) }
	save, _ := b.cli.ConfigGet(octx, "save").Result()
	where := "at " + redactURL(u) + " (" + envRedisURL + ")"
	if b.started != nil {
		where = "at " + redactURL(u) + ", started by the lab with scripts/servers/redis.sh"
	}
	b.server = fmt.Sprintf("Redis %s %s, pool of %d connections%s", field("redis_version"), where, opts.PoolSize, env.via())
	b.durability = fmt.Sprintf("appendonly=%s, save=%q", map[string]string{"0": "no", "1": "yes"}[field("aof_enabled")], save["save"])
	if field("aof_enabled") == "0" && save["save"] == "" {
		b.durability += " (no persistence: throwaway data)"
	}
	env.logf("redis: %s; %s", b.server, b.durability)
	return b, nil
}

func (b *redisBackend) RedisClient() redis.UniversalClient { return b.cli }

var redisTuning = retryTuning{Retryable: rediscas.Retryable}

func (b *redisBackend) Info() backendInfo {
	return backendInfo{
		Name:       "redis",
		Server:     b.server,
		Durability: b.durability,
		Locker:     "rediscas.Locker (SET PX with INCR fencing tokens, a watchdog per lease; waiters poll)",
		BackOff:    describeBackOff(redisTuning),
	}
}

func (b *redisBackend) tuning() retryTuning { return redisTuning }

func (b *redisBackend) NewStore(_ context.Context, ns string) (cas.Store, func(context.Context) error, error) {
	prefix := "lab:" + ns + ":"
	s, err := rediscas.New(b.cli, rediscas.Config{Prefix: prefix})
	if err != nil {
		return nil, nil, err
	}
	return s, func(ctx context.Context) error { return b.deletePrefix(ctx, prefix) }, nil
}

func (b *redisBackend) openStore(_ context.Context, ns string) (cas.Store, error) {
	return rediscas.New(b.cli, rediscas.Config{Prefix: "lab:" + ns + ":"})
}

func (b *redisBackend) NewLocker(_ context.Context, ns string) (hybrid.Locker, func(context.Context) error, error) {
	prefix := "lab-lease:" + ns + ":"
	l, err := rediscas.NewLocker(b.cli, rediscas.LockerConfig{Prefix: prefix, TTL: 10 * time.Second})
	if err != nil {
		return nil, nil, err
	}
	return l, func(ctx context.Context) error { return b.deletePrefix(ctx, prefix) }, nil
}

// infoField returns a field of a Redis INFO reply, or "?".
func infoField(info, name string) string {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+":"); ok {
			return v
		}
	}
	return "?"
}

// deletePrefix removes a cell's keys.
func (b *redisBackend) deletePrefix(ctx context.Context, prefix string) error {
	return deleteRedisPrefix(ctx, b.cli, prefix)
}

func (b *redisBackend) Close(ctx context.Context) error {
	var errs []error
	if b.cli != nil {
		errs = append(errs, b.cli.Close())
		b.cli = nil
	}
	if b.started != nil {
		errs = append(errs, b.started.Stop(ctx))
		b.started = nil
	}
	return errors.Join(errs...)
}
