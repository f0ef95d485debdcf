package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"os"
	"slices"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/occkit/occkit/benchmarks/internal/backends"
	"github.com/occkit/occkit/benchmarks/internal/leasefaults"
	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/internal/ctxwait"
	"github.com/occkit/occkit/internal/faultproxy"
	"github.com/occkit/occkit/internal/servers"
)

// target is one run's stores: ops is what the workloads use (through the
// proxy for network faults), direct reads the server itself at the end.
type target struct {
	ops, direct cas.Store
	proxy       *faultproxy.Proxy // nil: no network fault
	retryable   func(error) bool
	// disrupt injects the server fault (restart, leader loss, a cluster's
	// fault) and returns once the service is back; a fault that lasts (a
	// partition, a paused replay) holds for held. Nil when the target has
	// none.
	disrupt func(ctx context.Context, held time.Duration) error
	close   func()
	// staleReads: plain reads come from a follower or a replica
	// (workload.staleReads).
	staleReads bool
	// allowed and allowsLost are Run.Allowed and Run.AllowsLost for the
	// target's rows.
	allowed    string
	allowsLost bool
}

// subject is a backend under the faults: its system's faults, and a
// client of its server (reached or started for the whole command,
// direct.Server()) that never goes through a fault; nil for a cluster of
// each run's own (ownServers).
type subject struct {
	name   string
	faults []string
	direct *backends.Client
	env    *env
}

// systemFaults are the faults each system is run under, in order.
var systemFaults = map[string][]string{
	backends.Memory:   withLease(faultNone),
	backends.Postgres: withLease(append(slices.Clone(networkFaults), faultRestart)...),
	backends.MySQL:    {faultDrop, faultCut, faultRestart},
	backends.Redis:    withLease(append(slices.Clone(networkFaults), faultRestart)...),
	backends.Etcd:     withLease(append(slices.Clone(networkFaults), faultLeaderLoss)...),
	backends.DynamoDB: withLease(networkFaults...),

	// The clusters, run only when named (clusters.go).
	backends.Etcd3:           {faultPartition, faultLeaderLoss},
	backends.RedisCluster:    {faultFailover, faultAsync},
	backends.PostgresReplica: {faultReplayStop},
}

// clusterSystems are the clusters, in the order they run; ownServers
// those whose every run starts servers of its own (nothing is reached
// for the whole command).
var (
	clusterSystems = []string{backends.Etcd3, backends.RedisCluster, backends.PostgresReplica}
	ownServers     = []string{backends.Etcd3, backends.RedisCluster}
)

// isCluster reports whether backend is one of the clusters.
func isCluster(backend string) bool { return slices.Contains(clusterSystems, backend) }

// env is what opening backends needs: how to reach servers, where to log,
// and the cleanups of what it started (run in reverse order).
type env struct {
	servers  backends.Env
	workers  int // goroutines in all (both workloads)
	logf     func(format string, args ...any)
	cleanups cleanups
}

// cleanups are functions run in the reverse order of their adding.
type cleanups []func()

func (c *cleanups) add(f func()) { *c = append(*c, f) }

func (c *cleanups) run() {
	for i := len(*c) - 1; i >= 0; i-- {
		(*c)[i]()
	}
	*c = nil
}

func newEnv(workers int, logf func(string, ...any)) *env {
	// The DynamoDB runs use minidyn in process, which has
	// TransactWriteItems (the transfer workload), even when dynalite is
	// named for the adapter's tests.
	getenv := func(k string) string {
		if k == backends.EnvDynaliteURL {
			return ""
		}
		return os.Getenv(k)
	}
	return &env{servers: backends.Env{StartServers: true, Log: os.Stderr, Getenv: getenv}, workers: workers, logf: logf}
}

func (e *env) atExit(f func()) { e.cleanups.add(f) }

// close runs the cleanups.
func (e *env) close() { e.cleanups.run() }

// openSubjects reaches (or starts) the servers of the backends want
// selects, memory always. A backend that cannot be reached is returned as
// skipped.
func openSubjects(ctx context.Context, e *env, want func(backend string) bool) ([]subject, []Skipped) {
	var bs []subject
	var skipped []Skipped
	names := append([]string{backends.Memory, backends.Postgres, backends.MySQL, backends.Redis, backends.Etcd, backends.DynamoDB}, clusterSystems...)
	for _, name := range names {
		if name != backends.Memory && !want(name) {
			continue
		}
		if slices.Contains(ownServers, name) {
			e.logf("%s: a cluster of each run's own", name)
			bs = append(bs, subject{name: name, faults: systemFaults[name], env: e})
			continue
		}
		if name == backends.MySQL {
			// go-sql-driver logs every broken connection; the faults
			// break hundreds on purpose, and the rows count what they did.
			_ = mysql.SetLogger(log.New(io.Discard, "", 0))
		}
		srv, err := e.servers.Reach(ctx, name)
		if err != nil {
			skipped = append(skipped, Skipped{Backend: name, Reason: err.Error()})
			continue
		}
		e.atExit(func() { e.stop(srv) })
		direct, err := srv.Connect(ctx, backends.ClientOptions{})
		if err != nil {
			skipped = append(skipped, Skipped{Backend: name, Reason: err.Error()})
			continue
		}
		e.atExit(func() { _ = direct.Close() })
		e.logf("%s: %s", name, srv.Where)
		bs = append(bs, subject{name: name, faults: systemFaults[name], direct: direct, env: e})
	}
	return bs, skipped
}

func (e *env) stop(s *backends.Server) {
	if err := s.Close(context.Background()); err != nil {
		e.logf("%s: stopping the server: %v", s.System, err)
	}
}

// withLease returns faults followed by the lease faults.
func withLease(faults ...string) []string {
	return append(slices.Clone(faults), leaseFaults...)
}

// open makes a fresh target for one run of fault on b: a table or key
// prefix ns, a client of its own for the workloads (through a fresh proxy
// for the network faults), and for a restart a server of the run's own
// (the one the environment names may be shared, and is never restarted).
func (b subject) open(ctx context.Context, fault, ns string) (_ *target, err error) {
	e := b.env
	switch {
	case b.name == backends.Etcd3 || fault == faultLeaderLoss:
		return etcdClusterTarget(ctx, e, ns, fault, b.name == backends.Etcd3)
	case b.name == backends.RedisCluster:
		return redisFailoverTarget(ctx, e, ns, fault)
	case b.name == backends.PostgresReplica:
		return b.replicaTarget(ctx, ns)
	}
	var closers cleanups
	tg := &target{retryable: b.direct.Spec().Retryable, close: closers.run}
	defer func() {
		if err != nil {
			tg.close()
		}
	}()
	direct := b.direct
	srv := direct.Server()
	if fault == faultRestart {
		if srv, err = e.servers.StartOwn(ctx, b.name); err != nil {
			return nil, err
		}
		closers.add(func() { e.stop(srv) })
		if direct, err = srv.Connect(ctx, backends.ClientOptions{}); err != nil {
			return nil, err
		}
		closers.add(func() { _ = direct.Close() })
		tg.disrupt = func(ctx context.Context, _ time.Duration) error { return srv.Restart(ctx, restartDown) }
	}
	if tg.direct, err = direct.CreateStore(ctx, ns); err != nil {
		return nil, err
	}
	closers.add(func() { _ = direct.Drop(context.Background(), ns) })
	opts := backends.ClientOptions{Conns: 2 * e.workers, DialTimeout: callTimeout}
	if slices.Contains(networkFaults, fault) {
		if tg.proxy, err = srv.Proxy(0); err != nil {
			return nil, err
		}
		opts.Via = tg.proxy.Addr()
	}
	ops, err := srv.Connect(ctx, opts)
	if err == nil {
		closers.add(func() { _ = ops.Close() })
		tg.ops, err = ops.Store(ns)
	}
	if tg.proxy != nil {
		// Closed first: closing a pool waits for the connections in use.
		closers.add(func() { _ = tg.proxy.Close() })
	}
	if err == nil {
		err = awaitAnswer(ctx, tg.ops, readyWithin)
	}
	return tg, err
}

// readyWithin bounds the wait for a target's first answer.
const readyWithin = 60 * time.Second

// awaitAnswer returns once a read through s gets an answer (a value or
// ErrNotFound), so that a run starts from a server that serves: after a
// run of reconnects under faults, a CPU-starved PostgreSQL can take
// seconds to work off the connection attempts queued for it, and a run
// started meanwhile measures that backlog, not its own fault.
func awaitAnswer(ctx context.Context, s cas.Store, within time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	for {
		cctx, ccancel := context.WithTimeout(ctx, callTimeout)
		_, err := s.Get(cctx, "ready-probe")
		ccancel()
		if err == nil || errors.Is(err, cas.ErrNotFound) {
			return nil
		}
		if ctxwait.Sleep(ctx, 100*time.Millisecond) != nil {
			return fmt.Errorf("the target did not answer a read within %v: %w", within, err)
		}
	}
}

// lease opens the lease lock and fenced store of b for one lease-fault run
// of workers workers, on fresh keys (a table or key prefix ns), and
// returns a function that removes them: clients of their own, without a
// proxy (the lease faults need no network fault), one for the store and
// one for the locks (lock waiters pin connections on PostgreSQL).
func (b subject) lease(ctx context.Context, ns string, workers int) (_ leasefaults.Target, cleanup func(), err error) {
	var closers cleanups
	cleanup = closers.run
	defer func() {
		if err != nil {
			cleanup()
		}
	}()
	closers.add(func() { _ = b.direct.Drop(context.Background(), ns) })
	var clients [2]*backends.Client
	for i := range clients {
		if clients[i], err = b.direct.Server().Connect(ctx, backends.ClientOptions{Conns: workers + 2}); err != nil {
			return leasefaults.Target{}, nil, err
		}
		closers.add(func() { _ = clients[i].Close() })
	}
	lb, err := leasefaults.Open(ctx, clients[0], clients[1], ns, leaseTTL)
	return lb, cleanup, err
}

// isSkip reports a run that cannot be done here for want of something
// installed, rather than one that failed.
func isSkip(err error) bool { return errors.Is(err, servers.ErrNotInstalled) }
