package backends

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/hybrid"
	"github.com/occkit/occkit/internal/servers"
)

// The systems that hold no data and lend their lock to the others:
// ZooKeeper (Client.ZooKeeperAddr) and Redlock's independent Redis
// servers (Client.Redlock).

// lockOnly is the driver of a system that holds no data; describe
// returns version and durable.
type lockOnly struct{ system, version, durable string }

func (d lockOnly) store(string) (cas.Store, error) {
	return nil, fmt.Errorf("%s holds no data: %w", d.system, errors.ErrUnsupported)
}

func (d lockOnly) create(context.Context, string) error {
	return fmt.Errorf("%s holds no data: %w", d.system, errors.ErrUnsupported)
}

func (d lockOnly) locker(context.Context, LockerConfig) (hybrid.Locker, func() error, error) {
	return nil, nil, fmt.Errorf("%s lends no hybrid.Locker: %w", d.system, errors.ErrUnsupported)
}

func (lockOnly) drop(context.Context, string) error { return nil }
func (lockOnly) dropScope(context.Context) error    { return nil }
func (lockOnly) close() error                       { return nil }
func (lockOnly) native(*Client)                     {}

func (d lockOnly) describe(context.Context) (string, string, error) { return d.version, d.durable, nil }

// connectZooKeeper returns ZooKeeper's driver; c.zkAddr is where its
// clients connect.
func connectZooKeeper(c *Client, s *Server, opts ClientOptions) lockOnly {
	durable := "as configured on the server (not checked)"
	if s.Started() {
		durable = "forceSync=no: the transaction log is not fsynced (throwaway data)"
	}
	c.zkAddr = cmp.Or(opts.Via, s.URL)
	return lockOnly{system: ZooKeeper, version: "ZooKeeper " + s.Version, durable: durable}
}

// reachRedlock finds Redlock's servers (EnvRedlockURLs), or starts
// RedlockServers throwaway ones with scripts/servers/redis.sh.
func (e Env) reachRedlock(ctx context.Context) (_ *Server, err error) {
	s := &Server{System: Redlock, EnvVar: EnvRedlockURLs}
	if s.URL = e.getenv(EnvRedlockURLs); s.URL != "" {
		s.Where = "named by " + EnvRedlockURLs
		return s, nil
	}
	root, err := e.mayStart("redlock", EnvRedlockURLs, fmt.Sprintf("%d throwaway Redis servers with scripts/servers/redis.sh", RedlockServers))
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			_ = s.Close(context.WithoutCancel(ctx))
		}
	}()
	// One after the other: each script picks a free port and checks that
	// its own server answers there.
	var urls []string
	for range RedlockServers {
		p, err := servers.StartScript(ctx, root, "redis", EnvRedisURL, servers.RedisBinary, e.Log)
		if err != nil {
			return nil, fmt.Errorf("%s is not set, and %w", EnvRedlockURLs, err)
		}
		s.scripts = append(s.scripts, p)
		urls = append(urls, p.URL)
	}
	s.URL, s.Where = strings.Join(urls, ","), "started with scripts/servers/redis.sh"
	return s, nil
}

// redlockDriver is a go-redis client of each of Redlock's servers.
type redlockDriver struct {
	lockOnly
	clis []*redis.Client
}

func connectRedlock(c *Client, s *Server, opts ClientOptions) (*redlockDriver, error) {
	d := &redlockDriver{lockOnly: lockOnly{system: Redlock}}
	for u := range strings.SplitSeq(s.URL, ",") {
		o, err := redis.ParseURL(strings.TrimSpace(u))
		if err != nil {
			_ = d.close()
			return nil, fmt.Errorf("%s: %w", EnvRedlockURLs, err)
		}
		if opts.Conns > 0 {
			o.PoolSize = opts.Conns
		}
		if opts.Proxy {
			if o.Addr, err = c.proxy(o.Addr, opts.Delay); err != nil {
				_ = d.close()
				return nil, err
			}
		}
		d.clis = append(d.clis, redis.NewClient(o))
	}
	return d, nil
}

// describe: every server's version and persistence.
func (d *redlockDriver) describe(ctx context.Context) (string, string, error) {
	var addrs, persists []string
	version := "?"
	for _, c := range d.clis {
		info, err := c.Info(ctx, "server", "persistence").Result()
		if err != nil {
			return "", "", fmt.Errorf("%s: %w", c.Options().Addr, err)
		}
		version = InfoField(info, "redis_version")
		save, _ := c.ConfigGet(ctx, "save").Result()
		if p := fmt.Sprintf("appendonly=%s save=%q", map[string]string{"0": "no", "1": "yes"}[InfoField(info, "aof_enabled")], save["save"]); !slices.Contains(persists, p) {
			persists = append(persists, p)
		}
		addrs = append(addrs, c.Options().Addr)
	}
	durable := strings.Join(persists, "; ")
	if len(persists) == 1 && persists[0] == `appendonly=no save=""` {
		durable += " on every server (no persistence: throwaway data)"
	}
	return fmt.Sprintf("%d Redis %s servers at %s,", len(addrs), version, strings.Join(addrs, ", ")), durable, nil
}

func (d *redlockDriver) native(c *Client) { c.redlock = d.clis }

func (d *redlockDriver) close() error {
	var errs []error
	for _, c := range d.clis {
		errs = append(errs, c.Close())
	}
	return errors.Join(errs...)
}
