package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	grpcbackoff "google.golang.org/grpc/backoff"

	"github.com/occkit/occkit/adapters/dynamocas"
	"github.com/occkit/occkit/adapters/etcdcas"
	"github.com/occkit/occkit/adapters/memcas"
	"github.com/occkit/occkit/adapters/pgcas"
	"github.com/occkit/occkit/adapters/rediscas"
	"github.com/occkit/occkit/benchmarks/internal/leasefaults"
	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/internal/faultproxy"
	"github.com/occkit/occkit/internal/servers"
)

// target is one run's stores: ops is what the workloads use (through the
// proxy for network faults), direct reads the server itself at the end.
type target struct {
	ops, direct cas.Store
	proxy       *faultproxy.Proxy // nil: no network fault
	retryable   func(error) bool
	// disrupt injects the server fault (restart, leader loss) and returns
	// once the service is back; nil when the target has none.
	disrupt func(ctx context.Context) error
	close   func()
}

// backend opens a fresh target (fresh keys or table, fresh proxy, and for
// server faults a server of its own) for each run.
type backend struct {
	name   string
	faults []string
	open   func(ctx context.Context, fault, ns string) (*target, error)
	// lease opens the backend's lease lock and fenced store for the lease
	// faults (runLease), which open does not serve.
	lease leaseOpener
}

// env is what opening backends needs: the checkout's scripts, where to
// log, and the cleanups of what it started (run in reverse order).
type env struct {
	root     string
	rootErr  error
	workers  int // goroutines in all (both workloads)
	logf     func(format string, args ...any)
	cleanups []func()
}

func newEnv(workers int, logf func(string, ...any)) *env {
	e := &env{workers: workers, logf: logf}
	wd, err := os.Getwd()
	if err == nil {
		e.root, err = servers.RepoRoot(wd)
	}
	e.rootErr = err
	return e
}

func (e *env) atExit(f func()) { e.cleanups = append(e.cleanups, f) }

// close runs the cleanups.
func (e *env) close() {
	for i := len(e.cleanups) - 1; i >= 0; i-- {
		e.cleanups[i]()
	}
	e.cleanups = nil
}

// openBackends starts (or finds) the servers of the backends want
// selects. A backend that cannot be started is returned as skipped.
func openBackends(ctx context.Context, e *env, want func(backend string) bool) ([]backend, []Skipped) {
	bs := []backend{{
		name:   "memory",
		faults: withLease(faultNone),
		open: func(context.Context, string, string) (*target, error) {
			s := memcas.New()
			return &target{ops: s, direct: s, close: func() {}}, nil
		},
		lease: func(context.Context, string, int) (leasefaults.Backend, func(), error) {
			return leasefaults.Memory(leaseTTL), func() {}, nil
		},
	}}
	var skipped []Skipped
	add := func(name string, b backend, err error) {
		if err != nil {
			skipped = append(skipped, Skipped{Backend: name, Reason: err.Error()})
			return
		}
		bs = append(bs, b)
	}
	if want("postgres") {
		b, err := openPostgres(ctx, e)
		add("postgres", b, err)
	}
	if want("mysql") {
		b, err := openMySQL(ctx, e)
		add("mysql", b, err)
	}
	if want("redis") {
		b, err := openRedis(ctx, e)
		add("redis", b, err)
	}
	if want("etcd") {
		b, err := openEtcd(ctx, e)
		add("etcd", b, err)
	}
	if want("dynamodb") {
		bs = append(bs, openDynamo(e))
	}
	return bs, skipped
}

// withLease returns faults followed by the lease faults.
func withLease(faults ...string) []string {
	return append(slices.Clone(faults), leaseFaults...)
}

// startScript starts a throwaway server with scripts/servers/<name>.sh.
func (e *env) startScript(ctx context.Context, name, envVar, binary string) (*servers.Script, error) {
	if e.rootErr != nil {
		return nil, fmt.Errorf("the scripts cannot be found: %w", e.rootErr)
	}
	return servers.StartScript(ctx, e.root, name, envVar, binary, os.Stderr)
}

// serverURL returns $envVar, or starts scripts/servers/<name>.sh for the
// whole command.
func (e *env) serverURL(ctx context.Context, name, envVar, binary string) (string, error) {
	u, s, err := servers.Reach(ctx, os.Getenv, true, func() (string, error) { return e.root, e.rootErr }, name, envVar, binary, os.Stderr)
	if err != nil {
		return "", err
	}
	if s != nil {
		e.atExit(func() { e.stopScript(name, s) })
	}
	return u, nil
}

func (e *env) stopScript(name string, s *servers.Script) {
	if err := s.Stop(context.Background()); err != nil {
		e.logf("%s: stopping the server: %v", name, err)
	}
}

// ownServer starts a server of the run's own for a restart: the server
// named by the environment may be shared, and is never restarted.
func (e *env) ownServer(ctx context.Context, name, envVar, binary string) (*servers.Script, error) {
	s, err := e.startScript(ctx, name, envVar, binary)
	if err != nil {
		return nil, err
	}
	if !s.CanRestart() {
		e.stopScript(name, s)
		return nil, fmt.Errorf("%s: %w", name, servers.ErrNoRestart)
	}
	return s, nil
}

// restartTarget starts a server of the run's own (ownServer) and makes a
// target on it with build (given the server's URL; it returns the target
// and what closes its own clients), whose disruption restarts the server
// and whose close stops it.
func (e *env) restartTarget(ctx context.Context, name, envVar, binary string, build func(u string) (*target, func(), error)) (*target, error) {
	s, err := e.ownServer(ctx, name, envVar, binary)
	if err != nil {
		return nil, err
	}
	tg, closeOwn, err := build(s.URL)
	if err != nil {
		e.stopScript(name, s)
		return nil, err
	}
	tg.disrupt = func(ctx context.Context) error { return s.Restart(ctx, restartDown) }
	closeTarget := tg.close
	tg.close = func() {
		closeTarget()
		closeOwn()
		e.stopScript(name, s)
	}
	return tg, nil
}

func hostPort(u string) (string, error) {
	p, err := url.Parse(u)
	if err != nil {
		return "", err
	}
	if p.Port() == "" {
		return "", fmt.Errorf("no port in %s", p.Redacted())
	}
	return p.Host, nil
}

func openPostgres(ctx context.Context, e *env) (backend, error) {
	u, err := e.serverURL(ctx, "postgres", "OCCKIT_PG_URL", servers.PostgresBinary)
	if err != nil {
		return backend{}, err
	}
	direct, err := pgxpool.New(ctx, u)
	if err != nil {
		return backend{}, err
	}
	e.atExit(direct.Close)
	open := func(ctx context.Context, fault, ns string) (*target, error) {
		if fault != faultRestart {
			return postgresTarget(ctx, e, u, direct, ns, true)
		}
		return e.restartTarget(ctx, "postgres", "OCCKIT_PG_URL", servers.PostgresBinary, func(u string) (*target, func(), error) {
			own, err := pgxpool.New(ctx, u)
			if err != nil {
				return nil, nil, err
			}
			tg, err := postgresTarget(ctx, e, u, own, ns, false)
			if err != nil {
				own.Close()
				return nil, nil, err
			}
			return tg, own.Close, nil
		})
	}
	lease := func(ctx context.Context, ns string, workers int) (leasefaults.Backend, func(), error) {
		return postgresLease(ctx, u, direct, ns, workers)
	}
	faults := withLease(append(slices.Clone(networkFaults), faultRestart)...)
	return backend{name: "postgres", faults: faults, open: open, lease: lease}, nil
}

// postgresLease makes a table ns on the server at u, with a pool for the
// store and one for the advisory locks (a connection per worker, and two
// to spare), neither through a proxy.
func postgresLease(ctx context.Context, u string, direct *pgxpool.Pool, ns string, workers int) (leasefaults.Backend, func(), error) {
	var closers []func()
	cleanup := func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}
	closers = append(closers, func() {
		dctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, _ = direct.Exec(dctx, "DROP TABLE IF EXISTS "+pgx.Identifier{ns}.Sanitize())
	})
	var pools [2]*pgxpool.Pool
	for i := range pools {
		cfg, err := pgxpool.ParseConfig(u)
		if err != nil {
			cleanup()
			return leasefaults.Backend{}, nil, err
		}
		cfg.MaxConns = int32(workers + 2)
		if pools[i], err = pgxpool.NewWithConfig(ctx, cfg); err != nil {
			cleanup()
			return leasefaults.Backend{}, nil, err
		}
		closers = append(closers, pools[i].Close)
	}
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	b, err := leasefaults.Postgres(cctx, pools[0], pools[1], ns)
	if err != nil {
		cleanup()
		return leasefaults.Backend{}, nil, err
	}
	return b, cleanup, nil
}

// postgresTarget makes a table ns on the server at u, and a pool of its
// own for the workloads, through a fault proxy if proxied.
func postgresTarget(ctx context.Context, e *env, u string, direct *pgxpool.Pool, ns string, proxied bool) (*target, error) {
	ds, err := pgcas.New(direct, pgcas.Config{Table: ns})
	if err != nil {
		return nil, err
	}
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := ds.CreateTable(cctx); err != nil {
		return nil, err
	}
	var closers []func()
	fail := func(err error) (*target, error) {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
		return nil, err
	}
	closers = append(closers, func() {
		dctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, _ = direct.Exec(dctx, "DROP TABLE IF EXISTS "+pgx.Identifier{ns}.Sanitize())
	})
	cfg, err := pgxpool.ParseConfig(u)
	if err != nil {
		return fail(err)
	}
	var p *faultproxy.Proxy
	if proxied {
		hp, err := hostPort(u)
		if err != nil {
			return fail(err)
		}
		if p, err = faultproxy.New(hp); err != nil {
			return fail(err)
		}
		closers = append(closers, func() { p.Close() })
		host, port, _ := net.SplitHostPort(p.Addr())
		pn, _ := strconv.Atoi(port)
		cfg.ConnConfig.Host, cfg.ConnConfig.Port = host, uint16(pn)
		cfg.ConnConfig.Fallbacks = nil
	}
	cfg.ConnConfig.ConnectTimeout = callTimeout
	cfg.MaxConns = int32(2 * e.workers)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return fail(err)
	}
	closers = append(closers, pool.Close)
	ops, err := pgcas.New(pool, pgcas.Config{Table: ns})
	if err != nil {
		return fail(err)
	}
	return &target{ops: ops, direct: ds, proxy: p, retryable: pgcas.Retryable, close: func() {
		if p != nil {
			p.Close() // first: closing a pool waits for connections in use
		}
		pool.Close()
		closers[0]() // drop the table
	}}, nil
}

func openRedis(ctx context.Context, e *env) (backend, error) {
	u, err := e.serverURL(ctx, "redis", "OCCKIT_REDIS_URL", servers.RedisBinary)
	if err != nil {
		return backend{}, err
	}
	opts, err := redis.ParseURL(u)
	if err != nil {
		return backend{}, err
	}
	direct := redis.NewClient(opts)
	e.atExit(func() { direct.Close() })
	open := func(ctx context.Context, fault, ns string) (*target, error) {
		if fault != faultRestart {
			return redisTarget(e, opts, direct, ns, true)
		}
		return e.restartTarget(ctx, "redis", "OCCKIT_REDIS_URL", servers.RedisBinary, func(u string) (*target, func(), error) {
			oopts, err := redis.ParseURL(u)
			if err != nil {
				return nil, nil, err
			}
			own := redis.NewClient(oopts)
			tg, err := redisTarget(e, oopts, own, ns, false)
			if err != nil {
				own.Close()
				return nil, nil, err
			}
			return tg, func() { own.Close() }, nil
		})
	}
	lease := func(_ context.Context, ns string, _ int) (leasefaults.Backend, func(), error) {
		prefix := ns + ":"
		lo := *opts
		lo.ContextTimeoutEnabled = true
		cli := redis.NewClient(&lo)
		cleanup := func() {
			cli.Close()
			deletePrefix(direct, prefix)
		}
		b, err := leasefaults.Redis(cli, prefix, leaseTTL)
		if err != nil {
			cleanup()
			return leasefaults.Backend{}, nil, err
		}
		return b, cleanup, nil
	}
	faults := withLease(append(slices.Clone(networkFaults), faultRestart)...)
	return backend{name: "redis", faults: faults, open: open, lease: lease}, nil
}

// deletePrefix deletes the keys of the Redis server of direct that begin
// with prefix.
func deletePrefix(direct *redis.Client, prefix string) {
	dctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	iter := direct.Scan(dctx, 0, prefix+"*", 1000).Iterator()
	for iter.Next(dctx) {
		direct.Del(dctx, iter.Val())
	}
}

// redisTarget uses the key prefix ns: on the server of opts, with a client
// of its own for the workloads, through a fault proxy if proxied.
func redisTarget(e *env, opts *redis.Options, direct *redis.Client, ns string, proxied bool) (*target, error) {
	prefix := ns + ":"
	ds, err := rediscas.New(direct, rediscas.Config{Prefix: prefix})
	if err != nil {
		return nil, err
	}
	po := *opts
	var p *faultproxy.Proxy
	if proxied {
		if p, err = faultproxy.New(opts.Addr); err != nil {
			return nil, err
		}
		po.Addr = p.Addr()
	}
	po.ContextTimeoutEnabled = true
	po.PoolSize = 2 * e.workers
	cli := redis.NewClient(&po)
	ops, err := rediscas.New(cli, rediscas.Config{Prefix: prefix})
	if err != nil {
		cli.Close()
		if p != nil {
			p.Close()
		}
		return nil, err
	}
	return &target{ops: ops, direct: ds, proxy: p, retryable: rediscas.Retryable, close: func() {
		if p != nil {
			p.Close()
		}
		cli.Close()
		deletePrefix(direct, prefix)
	}}, nil
}

// etcdClient is a client of endpoints that reconnects soon after a drop
// (gRPC's default first wait is 1 s).
func etcdClient(endpoints ...string) (*clientv3.Client, error) {
	return clientv3.New(clientv3.Config{
		Endpoints:   endpoints,
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
		DialOptions: []grpc.DialOption{grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           grpcbackoff.Config{BaseDelay: 20 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 500 * time.Millisecond},
			MinConnectTimeout: callTimeout,
		})},
	})
}

func openEtcd(ctx context.Context, e *env) (backend, error) {
	srv, err := servers.StartEtcd(ctx)
	if err != nil {
		return backend{}, err
	}
	e.logf("etcd: in-process member %s at %s", srv.Version, srv.Endpoint)
	e.atExit(srv.Close)
	direct, err := etcdClient(srv.Endpoint)
	if err != nil {
		return backend{}, err
	}
	e.atExit(func() { direct.Close() })
	hp, err := hostPort(srv.Endpoint)
	if err != nil {
		return backend{}, err
	}
	open := func(ctx context.Context, fault, ns string) (*target, error) {
		prefix := ns + "/"
		if fault == faultLeaderLoss {
			return etcdClusterTarget(ctx, prefix)
		}
		ds, err := etcdcas.New(direct, etcdcas.Config{Prefix: prefix})
		if err != nil {
			return nil, err
		}
		p, err := faultproxy.New(hp)
		if err != nil {
			return nil, err
		}
		cli, err := etcdClient("http://" + p.Addr())
		if err != nil {
			p.Close()
			return nil, err
		}
		ops, err := etcdcas.New(cli, etcdcas.Config{Prefix: prefix})
		if err != nil {
			cli.Close()
			p.Close()
			return nil, err
		}
		return &target{ops: ops, direct: ds, proxy: p, retryable: etcdcas.Retryable, close: func() {
			cli.Close()
			p.Close()
			dctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			_, _ = direct.Delete(dctx, prefix, clientv3.WithPrefix())
		}}, nil
	}
	lease := func(_ context.Context, ns string, _ int) (leasefaults.Backend, func(), error) {
		prefix := ns + "/"
		cli, err := etcdClient(srv.Endpoint)
		if err != nil {
			return leasefaults.Backend{}, nil, err
		}
		cleanup := func() {
			cli.Close()
			dctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			_, _ = direct.Delete(dctx, prefix, clientv3.WithPrefix())
		}
		b, err := leasefaults.Etcd(cli, prefix)
		if err != nil {
			cleanup()
			return leasefaults.Backend{}, nil, err
		}
		return b, cleanup, nil
	}
	faults := withLease(append(slices.Clone(networkFaults), faultLeaderLoss)...)
	return backend{name: "etcd", faults: faults, open: open, lease: lease}, nil
}

// etcdClusterTarget starts a 3-member cluster of the run's own, with fast
// raft timings (ticks of 50 ms, elections after 500 ms: a lost leader is
// replaced within about a second) and each member's client port behind a
// proxy, so that a hard-stopped member is gone for its clients at once;
// its disruption stops the leader abruptly and waits for the next one.
func etcdClusterTarget(ctx context.Context, prefix string) (*target, error) {
	c, err := servers.StartEtcdCluster(ctx, servers.EtcdOptions{Members: 3, TickMs: 50, ElectionMs: 500})
	if err != nil {
		return nil, err
	}
	var clients []*clientv3.Client
	closeAll := func() {
		for _, cli := range clients {
			cli.Close()
		}
		c.Close()
	}
	var stores []*etcdcas.Store
	for range 2 {
		cli, err := etcdClient(c.AllEndpoints()...)
		if err != nil {
			closeAll()
			return nil, err
		}
		clients = append(clients, cli)
		s, err := etcdcas.New(cli, etcdcas.Config{Prefix: prefix})
		if err != nil {
			closeAll()
			return nil, err
		}
		stores = append(stores, s)
	}
	disrupt := func(ctx context.Context) error {
		lead := c.Leader()
		if lead < 0 {
			return servers.ErrNoLeader
		}
		c.HardStop(lead)
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		_, err := c.AwaitLeader(wctx)
		return err
	}
	return &target{ops: stores[0], direct: stores[1], retryable: etcdcas.Retryable, disrupt: disrupt, close: closeAll}, nil
}

func openDynamo(e *env) backend {
	srv := servers.StartMinidyn()
	e.logf("dynamodb: minidyn's server in process at %s", srv.URL)
	e.atExit(srv.Close)
	direct, closeIdle := servers.NewDynamoClient(srv.URL)
	e.atExit(closeIdle)
	open := func(ctx context.Context, _, ns string) (*target, error) {
		table, ds, dropTable, err := dynamoTable(ctx, direct, ns)
		if err != nil {
			return nil, err
		}
		hp, err := hostPort(srv.URL)
		if err != nil {
			dropTable()
			return nil, err
		}
		p, err := faultproxy.New(hp)
		if err != nil {
			dropTable()
			return nil, err
		}
		cli, closeCli := servers.NewDynamoClient("http://" + p.Addr())
		ops, err := dynamocas.New(cli, dynamocas.Config{Table: table})
		if err != nil {
			closeCli()
			p.Close()
			dropTable()
			return nil, err
		}
		return &target{ops: ops, direct: ds, proxy: p, retryable: dynamocas.Retryable, close: func() {
			p.Close()
			closeCli()
			dropTable()
		}}, nil
	}
	// DynamoDB has no lock service: the in-process locker grants the
	// leases, and the table checks their tokens.
	lease := func(ctx context.Context, ns string, _ int) (leasefaults.Backend, func(), error) {
		_, ds, dropTable, err := dynamoTable(ctx, direct, ns)
		if err != nil {
			return leasefaults.Backend{}, nil, err
		}
		b := leasefaults.Memory(leaseTTL)
		b.Name, b.Store, b.Retryable = "dynamodb", ds, dynamocas.Retryable
		return b, dropTable, nil
	}
	return backend{name: "dynamodb", faults: withLease(networkFaults...), open: open, lease: lease}
}

// dynamoTable creates a table named after ns through direct, and returns
// its name, a store on it and a function that drops it.
func dynamoTable(ctx context.Context, direct *dynamodb.Client, ns string) (string, *dynamocas.Store, func(), error) {
	table := strings.ReplaceAll(ns, "_", "-")
	ds, err := dynamocas.New(direct, dynamocas.Config{Table: table})
	if err != nil {
		return "", nil, nil, err
	}
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := ds.CreateTable(cctx); err != nil {
		return "", nil, nil, err
	}
	drop := func() {
		dctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, _ = direct.DeleteTable(dctx, &dynamodb.DeleteTableInput{TableName: aws.String(table)})
	}
	return table, ds, drop, nil
}

// isSkip reports a run that cannot be done here for want of something
// installed, rather than one that failed.
func isSkip(err error) bool { return errors.Is(err, servers.ErrNotInstalled) }
