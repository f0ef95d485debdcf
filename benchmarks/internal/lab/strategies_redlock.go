package lab

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/occkit/occkit/benchmarks/internal/backends"
	"github.com/occkit/occkit/benchmarks/internal/locks"
	"github.com/occkit/occkit/internal/servers"
)

// EnvRedlockURLs names the Redis servers lock-redlock uses (Redis URLs,
// comma-separated; Redlock wants an odd number of independent servers).
// When it is unset, the lab starts RedlockServers throwaway servers with
// scripts/servers/redis.sh, when the first lock-redlock cell runs, and
// stops them at exit.
const EnvRedlockURLs = "OCCKIT_REDLOCK_URLS"

// RedlockServers is how many Redis servers the lab starts for
// lock-redlock: Redlock's usual five (a lock needs three of them).
const RedlockServers = 5

var redlockStrategies = []strategySpec{
	{
		Name: "lock-redlock",
		Kind: kindLock,
		About: fmt.Sprintf("Redlock over %d independent Redis servers (github.com/go-redsync/redsync/v4 with its go-redis v9 pool, "+
			"its defaults: 8 s expiry, up to 32 tries 50–250 ms apart, a quorum of 3) around read, work and write; no fencing; "+
			"the data may live on any backend", RedlockServers),
		SingleKey: true, MultiKey: true,
		DefaultOn: defaultOnRedisLocks,
		New:       newRedlock,
	},
}

// redlockService is the set of Redis servers lock-redlock locks on: a
// service that only lends that lock, opened by the first cell that needs
// it (Lab.OpenService).
type redlockService struct {
	urls       []string // the servers' own URLs (not the proxies')
	clients    []*redis.Client
	started    []*servers.Script
	server     string
	durability string
}

// RedlockAddrs returns the servers' addresses (host:port), for tests.
func (s *redlockService) RedlockAddrs() []string {
	out := make([]string, len(s.clients))
	for i, c := range s.clients {
		out[i] = c.Options().Addr
	}
	return out
}

// redlockServers is the set of independent Redis servers lock-redlock
// locks on, for code outside the lab that runs its own Redlock (the lock
// stories, benchmarks/story).
type redlockServers interface {
	service
	// RedlockClients returns a client of each server, in a fixed order.
	RedlockClients() []*redis.Client
}

// RedlockClients implements redlockServers.
func (s *redlockService) RedlockClients() []*redis.Client {
	return append([]*redis.Client(nil), s.clients...)
}

// OpenRedlock returns the lab's Redlock servers, opening them as the first
// lock-redlock cell does when none has yet (OCCKIT_REDLOCK_URLS, or
// RedlockServers throwaway servers started with scripts/servers/redis.sh);
// the lab stops the servers it started at Close.
func (l *Lab) OpenRedlock(ctx context.Context) (redlockServers, error) {
	svc, err := l.OpenService(ctx, "redlock", openRedlock)
	if err != nil {
		return nil, err
	}
	rs, ok := svc.(redlockServers)
	if !ok {
		return nil, fmt.Errorf("benchmarks: the redlock service is %T, not the lab's", svc)
	}
	return rs, nil
}

func openRedlock(ctx context.Context, env *Env) (_ service, err error) {
	s := &redlockService{}
	defer func() {
		if err != nil {
			_ = s.Close(context.WithoutCancel(ctx))
		}
	}()
	urls := splitList(env.getenv(EnvRedlockURLs))
	if len(urls) == 0 {
		if !env.StartServers {
			return nil, fmt.Errorf("%w: %s is not set, and starting servers is off", errUnavailable, EnvRedlockURLs)
		}
		root, err := env.repoRoot()
		if err != nil {
			return nil, fmt.Errorf("%w: %s is not set, and scripts/servers/redis.sh cannot be found: %w", errUnavailable, EnvRedlockURLs, err)
		}
		env.logf("redlock: %s is not set: starting %d throwaway Redis servers with scripts/servers/redis.sh", EnvRedlockURLs, RedlockServers)
		// One after the other: each script picks a free port and checks
		// that its own server answers there.
		for range RedlockServers {
			p, err := servers.StartScript(ctx, root, "redis", envRedisURL, servers.RedisBinary, env.Log)
			if err != nil {
				return nil, fmt.Errorf("%w: %s is not set, and %w", errUnavailable, EnvRedlockURLs, err)
			}
			s.started = append(s.started, p)
			urls = append(urls, p.URL)
		}
	}
	octx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var (
		addrs    []string
		version  string
		persists []string
	)
	for _, u := range urls {
		opts, err := redis.ParseURL(u)
		if err != nil {
			return nil, fmt.Errorf("%w: %s: %w", errUnavailable, EnvRedlockURLs, err)
		}
		opts.PoolSize = 3*max(env.MaxWorkers, DefaultWorkers) + 4
		s.urls = append(s.urls, u)
		if opts.Addr, err = env.dial(opts.Addr); err != nil {
			return nil, fmt.Errorf("%w: %w", errUnavailable, err)
		}
		c := redis.NewClient(opts)
		s.clients = append(s.clients, c)
		info, err := c.Info(octx, "server", "persistence").Result()
		if err != nil {
			return nil, fmt.Errorf("%w: %s: %w", errUnavailable, redactURL(u), err)
		}
		version = infoField(info, "redis_version")
		save, _ := c.ConfigGet(octx, "save").Result()
		persists = append(persists, fmt.Sprintf("appendonly=%s save=%q", map[string]string{"0": "no", "1": "yes"}[infoField(info, "aof_enabled")], save["save"]))
		addrs = append(addrs, opts.Addr)
	}
	where := "(" + EnvRedlockURLs + ")"
	if len(s.started) > 0 {
		where = "started by the lab with scripts/servers/redis.sh"
	}
	s.server = fmt.Sprintf("%d Redis %s servers at %s, %s; redsync %s, go-redis v9 pools", len(addrs), version, strings.Join(addrs, ", "), where, moduleVersion("github.com/go-redsync/redsync/v4"))
	s.durability = strings.Join(uniq(persists), "; ")
	if len(uniq(persists)) == 1 && persists[0] == `appendonly=no save=""` {
		s.durability += " on every server (no persistence: throwaway data)"
	}
	env.logf("redlock: %s; %s", s.server, s.durability)
	return s, nil
}

// childEnv implements childEnver.
func (s *redlockService) childEnv() []string {
	return []string{EnvRedlockURLs + "=" + strings.Join(s.urls, ",")}
}

func (s *redlockService) Info() backendInfo {
	return backendInfo{Name: "redlock", Server: s.server, Durability: s.durability, Locker: "— (lends lock-redlock to the data backends)", BackOff: "—"}
}

func (s *redlockService) Close(ctx context.Context) error {
	var errs []error
	for _, c := range s.clients {
		errs = append(errs, c.Close())
	}
	s.clients = nil
	// Side by side: each stop waits for its server to be gone (about 2 s
	// here, until the orphaned process is reaped).
	stopErrs := make([]error, len(s.started))
	var wg sync.WaitGroup
	for i, p := range s.started {
		wg.Add(1)
		go func() {
			defer wg.Done()
			stopErrs[i] = p.Stop(ctx)
		}()
	}
	wg.Wait()
	s.started = nil
	return errors.Join(append(errs, stopErrs...)...)
}

func newRedlock(ctx context.Context, h *harness) (cellStrategy, error) {
	svc, err := h.OpenService(ctx, "redlock", openRedlock)
	if err != nil {
		return nil, fmt.Errorf("no Redis servers for Redlock (%v): %w", err, errNotApplicable)
	}
	rl, ok := svc.(*redlockService)
	if !ok {
		return nil, fmt.Errorf("the redlock service is not the lab's: %w", errNotApplicable)
	}
	h.OnClose(func(ctx context.Context) error {
		var errs []error
		for _, c := range rl.clients {
			errs = append(errs, backends.DeleteRedisPrefix(ctx, c, "lab-redlock:"+h.NS+"/"))
		}
		return errors.Join(errs...)
	})
	return lockedDo(h, "lab-redlock:"+h.NS+"/", locks.NewRedlock(rl.clients)), nil
}

// moduleVersion returns the version of a module the binary was built
// with, or "v?" when the binary does not record it (test binaries).
func moduleVersion(path string) string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == path {
				if d.Replace != nil {
					d = d.Replace
				}
				return d.Version
			}
		}
	}
	return "v?"
}

// uniq returns ss without repetitions, in first-seen order.
func uniq(ss []string) []string {
	var out []string
	for _, s := range ss {
		if !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out
}

// splitList splits a comma-separated list, dropping empty items.
func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}
