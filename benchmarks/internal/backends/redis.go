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
// deadline: of one server, or of a Redis Cluster (where a namespace is a
// key prefix without a hash tag, so that a store's keys spread over the
// cluster's slots).
type redisDriver struct{ cli redis.UniversalClient }

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
// on every master, one key a command: the keys of one master are in many
// slots).
func DeleteRedisPrefix(ctx context.Context, cli redis.UniversalClient, prefix string) error {
	del := func(ctx context.Context, m *redis.Client) error {
		it := m.Scan(ctx, 0, prefix+"*", 1000).Iterator()
		pipe := m.Pipeline()
		for it.Next(ctx) {
			pipe.Unlink(ctx, it.Val())
			if pipe.Len() >= 500 {
				if _, err := pipe.Exec(ctx); err != nil {
					return err
				}
			}
		}
		if err := it.Err(); err != nil || pipe.Len() == 0 {
			return err
		}
		_, err := pipe.Exec(ctx)
		return err
	}
	switch c := cli.(type) {
	case *redis.ClusterClient:
		return c.ForEachMaster(ctx, del)
	case *redis.Client:
		return del(ctx, c)
	}
	return fmt.Errorf("backends: delete %s*: a %T", prefix, cli)
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
	if cc, ok := d.cli.(*redis.ClusterClient); ok {
		return describeCluster(ctx, cc)
	}
	info, err := d.cli.Info(ctx, "server", "persistence").Result()
	if err != nil {
		return "", "", err
	}
	save, _ := d.cli.ConfigGet(ctx, "save").Result()
	return "Redis " + InfoField(info, "redis_version"), persistence(info, save), nil
}

// persistence describes a Redis server's persistence settings from its
// INFO reply and its save setting.
func persistence(info string, save map[string]string) string {
	aof := InfoField(info, "aof_enabled")
	durable := fmt.Sprintf("appendonly=%s, save=%q", map[string]string{"0": "no", "1": "yes"}[aof], save["save"])
	if aof == "0" && save["save"] == "" {
		durable += " (no persistence: throwaway data)"
	}
	return durable
}

// InfoField returns a field of a Redis INFO reply, or "?".
func InfoField(info, name string) string {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+":"); ok {
			return v
		}
	}
	return "?"
}

func (d *redisDriver) dropScope(context.Context) error { return nil }
func (d *redisDriver) close() error                    { return d.cli.Close() }
func (d *redisDriver) native(c *Client) {
	if cc, ok := d.cli.(*redis.ClusterClient); ok {
		c.rcl = cc
	} else {
		c.rdb = d.cli.(*redis.Client)
	}
}
