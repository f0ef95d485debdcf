package backends

import (
	"context"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/occkit/occkit/adapters/rediscas"
	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/hybrid"
)

// redisDriver is a go-redis client whose calls honour their context's
// deadline.
type redisDriver struct{ cli *redis.Client }

func connectRedis(s *Server, opts ClientOptions) (*redisDriver, error) {
	o, err := redis.ParseURL(s.URL)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", s.EnvVar, err)
	}
	if opts.Via != "" {
		o.Addr = opts.Via
	}
	if opts.Conns > 0 {
		o.PoolSize = opts.Conns
	}
	if opts.DialTimeout > 0 {
		o.DialTimeout = opts.DialTimeout
	}
	o.ContextTimeoutEnabled = true
	return &redisDriver{cli: redis.NewClient(o)}, nil
}

func (d *redisDriver) store(ns string) (cas.Store, error) {
	return rediscas.New(d.cli, rediscas.Config{Prefix: ns + ":"})
}

func (d *redisDriver) create(context.Context, string) error { return nil }

func (d *redisDriver) drop(ctx context.Context, ns string) error {
	return DeleteRedisPrefix(ctx, d.cli, ns+":")
}

// DeleteRedisPrefix removes every key under prefix (on a Redis Cluster,
// on every master).
func DeleteRedisPrefix(ctx context.Context, cli redis.UniversalClient, prefix string) error {
	if cc, ok := cli.(*redis.ClusterClient); ok {
		return deleteClusterPrefix(ctx, cc, prefix)
	}
	it := cli.Scan(ctx, 0, prefix+"*", 1000).Iterator()
	var keys []string
	for it.Next(ctx) {
		keys = append(keys, it.Val())
	}
	if err := it.Err(); err != nil || len(keys) == 0 {
		return err
	}
	return cli.Del(ctx, keys...).Err()
}

// RedisLockPrefix is the key prefix of the Redis locker named name
// (LockerConfig.Name); rediscas.Locker's lock key of key is
// RedisLockPrefix(name) + "{" + key + "}".
func RedisLockPrefix(name string) string { return name + ":lock:" }

func (d *redisDriver) locker(_ context.Context, cfg LockerConfig) (hybrid.Locker, func() error, error) {
	l, err := rediscas.NewLocker(d.cli, rediscas.LockerConfig{Prefix: RedisLockPrefix(cfg.Name), TTL: cfg.TTL})
	if err != nil {
		return nil, nil, err
	}
	return l, func() error { return nil }, nil
}

func (d *redisDriver) describe(ctx context.Context) (string, string, error) {
	info, err := d.cli.Info(ctx, "server", "persistence").Result()
	if err != nil {
		return "", "", err
	}
	save, _ := d.cli.ConfigGet(ctx, "save").Result()
	aof := infoField(info, "aof_enabled")
	durable := fmt.Sprintf("appendonly=%s, save=%q", map[string]string{"0": "no", "1": "yes"}[aof], save["save"])
	if aof == "0" && save["save"] == "" {
		durable += " (no persistence: throwaway data)"
	}
	return "Redis " + infoField(info, "redis_version"), durable, nil
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

func (d *redisDriver) dropScope(context.Context) error { return nil }
func (d *redisDriver) close() error                    { return d.cli.Close() }
func (d *redisDriver) native(c *Client)                { c.rdb = d.cli }
