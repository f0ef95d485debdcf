package lab

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/occkit/occkit/benchmarks/internal/backends"
	"github.com/occkit/occkit/hybrid"
)

// backend is a server of benchmarks/internal/backends the lab reached or
// started, with the lab's client of it (through the lab's proxy when it
// has one): a backend that holds the cells' data, or one that only lends
// its lock to cells on the others (ZooKeeper, Redlock's servers).
// Strategies use its client (cli) for what they need beyond the cell's
// store: a pool, a Redis client, a lock. Safe for concurrent use.
type backend struct {
	sys  system
	srv  *backends.Server
	cli  *backends.Client
	info backendInfo
	// scope is the lab's schema or database; attached is set in a
	// --procs child, which works in its parent's and leaves it.
	scope    string
	attached bool
	// locker is the lab's locker when the system shares one.
	locker      hybrid.Locker
	closeLocker func() error

	// lab finds the backend whose lock a dynamodb backend borrows;
	// lockFrom is the one chosen, at the first cell that needs a lock.
	lab      *Lab
	lockMu   sync.Mutex
	lockFrom *backend
	lockDesc string
}

// system is how the lab runs on one system of benchmarks/internal/backends.
type system struct {
	// name is the backend's name in flags, results and charts.
	name  string
	about string
	// locker describes the backend's lease lock for the report.
	locker string
	tuning retryTuning
	// conns is the pool size for workers workers (nil: the driver's).
	conns func(workers int) int
	// scopeEnv passes the lab's schema or database (created for the lab,
	// dropped when it closes) to its --procs children; "": no scope.
	scopeEnv string
	// sharedLocker: one locker for the whole lab (lock names carry the
	// cell's namespace), rather than one per cell.
	sharedLocker bool
	// keyGroup is, on a backend that commits several keys atomically
	// only within a group (Redis Cluster: one hash slot), how many keys
	// make a group; 0: any keys commit together. Multi-key workloads on
	// it name their keys with a hash tag per group and pick an
	// operation's keys within one group (keyspace.go).
	keyGroup int
	// lendsLock: the backend holds no data; it lends its lock to the
	// others.
	lendsLock bool
	// optIn: the backend runs only when named (OpenLab's names,
	// --backends), not in the default run: the clusters, each several
	// servers, whose cells are measured beside each other
	// (docs/benchmarks.md, "Clusters"). onDemand: it is never named, but
	// opened by the first cell that needs it (Redlock's five servers).
	optIn, onDemand bool
}

// leaseTTL is the TTL of the lease locks of hybrid and adaptive.
const leaseTTL = 10 * time.Second

// pinnedConns sizes a pool whose locks pin a connection each, and so
// does a waiting Acquire: a worker may hold two leases (transfer) and
// borrow a third connection for the data.
func pinnedConns(workers int) int { return 3*max(workers, DefaultWorkers) + 4 }

// systems are the lab's backends, in their order: one list, written out,
// instead of registrations.
var systems = []system{
	{
		name:   backends.Memory,
		about:  "memcas, the in-process store: the cost of coordination without a network",
		locker: "hybrid.NewLocalLocker (in process, 10 s TTL)",
		// An in-process attempt takes about a microsecond, so occ's
		// default first wait of 1 ms would idle the workers for a
		// thousand attempts' time (docs/benchmarks.md measured 11–13×
		// fewer operations). The lab follows the docs' advice and scales
		// the backoff down.
		tuning: retryTuning{BackOffInitial: 10 * time.Microsecond, BackOffMax: time.Millisecond},
	},
	{
		name:   backends.Etcd,
		about:  "etcdcas on a one-member etcd started in process (UnsafeNoFsync)",
		locker: "etcdcas.Locker (etcd lease, 10 s TTL; token = the grant's creation revision)",
	},
	{
		name:         backends.Postgres,
		about:        "pgcas on PostgreSQL: OCCKIT_PG_URL, or a throwaway server started with scripts/servers/postgres.sh",
		locker:       "pgcas.Locker (session pg_advisory_lock on a pinned connection; tokens from a sequence)",
		conns:        pinnedConns,
		scopeEnv:     "OCCKIT_LAB_PG_SCHEMA",
		sharedLocker: true,
	},
	{
		name:   backends.Redis,
		about:  "rediscas on Redis: OCCKIT_REDIS_URL, or a throwaway server started with scripts/servers/redis.sh",
		locker: "rediscas.Locker (SET PX with INCR fencing tokens, a watchdog per lease; waiters poll)",
		conns:  pinnedConns,
	},
	{
		name:  backends.DynamoDB,
		about: "dynamocas on a DynamoDB-compatible server: minidyn's, in process (TransactWriteItems included), or dynalite at OCCKIT_DYNALITE_URL (no TransactWriteItems)",
		// Chosen at the first cell that needs it (backend.newLocker).
		locker: "not chosen yet: rediscas.Locker when the redis backend is open, else hybrid.NewLocalLocker (in process)",
	},
	{
		name:      backends.ZooKeeper,
		about:     "ZooKeeper, lock service only (lock-zookeeper): OCCKIT_ZK_ADDR, or a standalone server started from Debian's zookeeper package",
		locker:    "— (lends lock-zookeeper to other backends)",
		lendsLock: true,
	},
	{
		name:         backends.MySQL,
		about:        "sqlcas (dialect MySQL) on MariaDB: OCCKIT_MYSQL_DSN, or a throwaway server started with scripts/servers/mariadb.sh",
		locker:       "sqlcas.Locker (GET_LOCK in a pinned connection's session; tokens from a counter row)",
		conns:        pinnedConns,
		scopeEnv:     "OCCKIT_LAB_MYSQL_DB",
		sharedLocker: true,
	},
	{
		name:  backends.SQLite,
		about: "sqlcas (dialect SQLite, modernc.org/sqlite) on a file database in WAL mode in a temporary directory, several connections: always available",
		// SQLite has no lock service: the database is a file of this
		// process, and so is the lock.
		locker: "hybrid.NewLocalLocker (in process, 10 s TTL): SQLite has no lock service, and one process writes the database (hybrid and adaptive are not applicable with --procs)",
		// Several connections: readers in parallel, one writer at a time
		// (SQLite's lock), the others wait in the busy timeout.
		conns: func(workers int) int { return max(workers, DefaultWorkers) + 2 },
	},

	// The clusters, each run only when named.
	{
		name:     backends.RedisCluster,
		about:    "rediscas on a Redis Cluster (3 masters + 3 replicas): OCCKIT_REDIS_CLUSTER_URL, or a throwaway cluster started with scripts/servers/redis-cluster.sh; a cell's keys spread over the slots, a transfer's two accounts share a hash tag (groups of " + fmt.Sprint(clusterKeyGroup) + " accounts)",
		locker:   "rediscas.Locker on the cluster (SET PX with INCR fencing tokens, the lock and its counter in one slot; a watchdog per lease; waiters poll)",
		conns:    pinnedConns,
		keyGroup: clusterKeyGroup,
		optIn:    true,
	},
	{
		name:   backends.Etcd3,
		about:  "etcdcas on etcd with three members started in process (UnsafeNoFsync), clients spread over the members (round robin per request; a --procs child talks to one member, child i to member i mod 3); reads linearizable, occ-follower-reads serializable",
		locker: "etcdcas.Locker (etcd lease, 10 s TTL; token = the grant's creation revision)",
		optIn:  true,
	},
	{
		name:         backends.PostgresReplica,
		about:        "pgcas on a PostgreSQL primary with a streaming hot standby: OCCKIT_PG_URL and OCCKIT_PG_REPLICA_URL, or both started with scripts/servers/postgres.sh --replica; writes and reads on the primary, occ-follower-reads reads on the replica (pgcas.Config.ReadPool)",
		locker:       "pgcas.Locker on the primary (session pg_advisory_lock on a pinned connection; tokens from a sequence)",
		conns:        pinnedConns,
		scopeEnv:     "OCCKIT_LAB_PG_REPLICA_SCHEMA",
		sharedLocker: true,
		optIn:        true,
	},

	// Opened by the first lock-redlock cell.
	{
		name:      backends.Redlock,
		about:     "Redlock's independent Redis servers, lock service only (lock-redlock): OCCKIT_REDLOCK_URLS, or five throwaway servers started with scripts/servers/redis.sh",
		locker:    "— (lends lock-redlock to the data backends)",
		conns:     pinnedConns,
		lendsLock: true,
		onDemand:  true,
	},
}

func lookupSystem(name string) (system, bool) {
	for _, s := range systems {
		if s.name == name {
			return s, true
		}
	}
	return system{}, false
}

// DefaultBackends returns the names of the backends of the default run:
// all but the opt-in ones.
func DefaultBackends() []string { return backendNames(false) }

// Backends returns the names of the lab's backends in their order, the
// opt-in ones (run only when named) included.
func Backends() []string { return backendNames(true) }

func backendNames(optIn bool) []string {
	var names []string
	for _, s := range systems {
		if !s.onDemand && (optIn || !s.optIn) {
			names = append(names, s.name)
		}
	}
	return names
}

// backendInfo describes a backend in the report.
type backendInfo struct {
	Name string `json:"name"`
	// Server says what serves the data and where: "in-process", a
	// version and address, and whether the lab started it.
	Server string `json:"server"`
	// Durability states the server's durability settings as run.
	Durability string `json:"durability"`
	// Locker names the lease lock hybrid and adaptive use on it.
	Locker string `json:"locker"`
	// BackOff describes the optimistic strategies' backoff on it.
	BackOff string `json:"backoff"`
}

// retryTuning is how optimistic strategies retry on a backend.
type retryTuning struct {
	// BackOffInitial and BackOffMax bound the exponential backoff
	// (doubling, ±50% jitter). Zero: occ's default, 1 ms to 100 ms,
	// sized for networked stores. A cell with work time uses at least the
	// work time as the first wait: a conflict means somebody was in the
	// critical section, which lasts about that long.
	BackOffInitial, BackOffMax time.Duration
	// Retryable reports transient errors that are safe to retry (the
	// adapter's own classifier), or is nil.
	Retryable func(error) bool
}

// Env is what backends may use to reach or start their servers.
type Env struct {
	// RepoRoot is the occkit checkout, for scripts/servers/*.sh. Empty:
	// found from the working directory.
	RepoRoot string
	// StartServers allows starting throwaway servers from installed
	// binaries (never installing anything).
	StartServers bool
	// MaxWorkers is the most workers any cell will run, for sizing
	// connection pools.
	MaxWorkers int
	// Log receives progress messages about servers (os.Stderr if nil).
	Log io.Writer
	// Getenv reads the environment (os.Getenv if nil).
	Getenv func(string) string
	// Proxy puts a TCP proxy (internal/faultproxy) in front of every
	// server the lab connects to, data stores and lock services alike,
	// which holds every byte for Delay in each direction (SetPathDelay): a
	// round trip then costs at least 2×Delay more, as over a longer
	// network path. With Delay 0 the proxy only adds its own hop.
	Proxy bool
	Delay time.Duration

	// proc is set in a --procs child: its index + 1 (a backend of several
	// servers may give each process a different one: etcd3 pins a
	// child's client to member proc-1 modulo three).
	proc int
}

func (e *Env) logf(format string, args ...any) {
	fmt.Fprintf(e.log(), format+"\n", args...)
}

func (e *Env) log() io.Writer {
	if e.Log == nil {
		return os.Stderr
	}
	return e.Log
}

// openBackend reaches or starts the server of system sys and connects to
// it. An error wrapping backends.ErrUnavailable means it cannot run here
// (the reason is reported, the run goes on).
func openBackend(ctx context.Context, l *Lab, sys system) (_ *backend, err error) {
	env := &l.env
	b := &backend{sys: sys, lab: l}
	defer func() {
		if err != nil {
			_ = b.close(context.WithoutCancel(ctx))
		}
	}()
	benv := backends.Env{RepoRoot: env.RepoRoot, StartServers: env.StartServers, Log: env.log(), Getenv: env.Getenv}
	if b.srv, err = benv.Reach(ctx, sys.name); err != nil {
		return nil, err
	}
	opts := backends.ClientOptions{Proxy: env.Proxy, Delay: env.Delay}
	if sys.conns != nil {
		opts.Conns = sys.conns(env.MaxWorkers)
	}
	if sys.scopeEnv != "" {
		var rb [6]byte
		_, _ = rand.Read(rb[:])
		b.scope = "occbench_" + hex.EncodeToString(rb[:])
		if s := getenv(env, sys.scopeEnv); s != "" {
			b.scope, b.attached = s, true // a --procs child: the parent's
		}
		opts.Scope, opts.CreateScope = b.scope, !b.attached
	}
	if sys.name == backends.Etcd3 && env.proc > 0 {
		// A --procs child talks to one member, as a service instance
		// configured with one endpoint would.
		opts.Pinned, opts.Member = true, env.proc-1
	}
	if b.cli, err = b.srv.Connect(ctx, opts); err != nil {
		return nil, fmt.Errorf("%w: %w", backends.ErrUnavailable, err)
	}
	version, durable, err := b.cli.Describe(ctx)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", backends.ErrUnavailable, b.srv.Where, err)
	}
	if sys.sharedLocker {
		if b.locker, b.closeLocker, err = b.cli.NewLocker(ctx, backends.LockerConfig{Name: "lab", TTL: leaseTTL}); err != nil {
			return nil, fmt.Errorf("%w: %w", backends.ErrUnavailable, err)
		}
	}
	server := b.srv.Where
	if version != "" {
		server = version + " " + server
	}
	if b.scope != "" {
		server += ", in " + b.scope
	}
	if opts.Conns > 0 {
		server += fmt.Sprintf(", pool of %d connections", opts.Conns)
	}
	if env.Proxy {
		server += fmt.Sprintf("; every connection through a proxy adding %v each way", env.Delay)
	}
	b.info = backendInfo{Name: sys.name, Server: server, Durability: durable, Locker: sys.locker, BackOff: "—"}
	if !sys.lendsLock {
		b.info.BackOff = describeBackOff(b.tuning())
	}
	env.logf("%s: %s; %s", sys.name, b.info.Server, b.info.Durability)
	return b, nil
}

func getenv(e *Env, k string) string {
	if e.Getenv != nil {
		return e.Getenv(k)
	}
	return os.Getenv(k)
}

func (b *backend) Info() backendInfo {
	b.lockMu.Lock()
	defer b.lockMu.Unlock()
	info := b.info
	if b.lockDesc != "" {
		info.Locker = b.lockDesc
	}
	return info
}

// tuning returns the system's backoff and its adapter's Retryable.
func (b *backend) tuning() retryTuning {
	t := b.sys.tuning
	t.Retryable = b.cli.Retryable()
	return t
}

// childEnv returns the environment (NAME=value) that makes a --procs
// child's lab open the same server, on its own connections: the
// server's variables, and the lab's scope; nil for memory, which no
// other process can reach.
func (b *backend) childEnv() []string {
	env := b.srv.Env()
	if env != nil && b.sys.scopeEnv != "" {
		env = append(env, b.sys.scopeEnv+"="+b.scope)
	}
	return env
}

// localLocks reports that the backend's lease lock serves this process
// only (hybrid.NewLocalLocker): hybrid and adaptive do not apply to the
// backend with --procs.
func (b *backend) localLocks() bool {
	return !b.cli.HasLockService() && b.borrowedLocks() == nil
}

// newLocker returns the lease lock of hybrid and adaptive for a cell: the
// lab's shared one, or one of the cell's own (its keys removed with the
// cell's store). DynamoDB has no lock of its own: it borrows the redis
// backend's when Redis is open in this run, else uses the in-process
// hybrid.NewLocalLocker; the choice is made at the first cell that needs
// it, and stated in Info.
func (b *backend) newLocker(ctx context.Context, ns string) (hybrid.Locker, func(context.Context) error, error) {
	if b.locker != nil {
		return b.locker, func(context.Context) error { return nil }, nil
	}
	if from := b.borrowedLocks(); from != nil {
		return from.newLocker(ctx, ns)
	}
	l, closeFn, err := b.cli.NewLocker(ctx, backends.LockerConfig{Name: ns, TTL: leaseTTL})
	if err != nil {
		return nil, nil, err
	}
	return l, func(context.Context) error { return closeFn() }, nil
}

// borrowedLocks returns the backend that lends its locks to this one.
func (b *backend) borrowedLocks() *backend {
	if b.sys.name != backends.DynamoDB {
		return nil
	}
	b.lockMu.Lock()
	defer b.lockMu.Unlock()
	if b.lockDesc == "" {
		b.lockDesc = "hybrid.NewLocalLocker (in process, 10 s TTL): DynamoDB has no lock of its own and Redis was not open"
		if r, ok := b.lab.backend(backends.Redis); ok {
			b.lockFrom = r
			b.lockDesc = "the redis backend's rediscas.Locker (SET PX with INCR fencing tokens; waiters poll): DynamoDB has no lock of its own"
		}
	}
	return b.lockFrom
}

func (b *backend) close(ctx context.Context) error {
	var errs []error
	if b.closeLocker != nil {
		errs = append(errs, b.closeLocker())
	}
	if b.cli != nil {
		if b.scope != "" && !b.attached {
			errs = append(errs, b.cli.DropScope(ctx))
		}
		errs = append(errs, b.cli.Close())
	}
	if b.srv != nil {
		errs = append(errs, b.srv.Close(ctx))
	}
	return errors.Join(errs...)
}

// skip records a backend or cell the lab did not run, and why.
type skip struct {
	Name   string `json:"name"`
	Reason string `json:"reason"`
}

// Lab holds the open backends of one run. Its methods are safe for
// concurrent use, but cells are meant to run one at a time: they share
// the machine, and a ratio is only meaningful between cells that did not
// disturb each other.
type Lab struct {
	env     Env
	id      string
	seq     atomic.Int64
	mu      sync.Mutex
	open    map[string]*backend
	order   []string
	skipped []skip

	// onDemand serialises openOnDemand; failed remembers the backends it
	// could not open, so that a run tries each once.
	onDemand sync.Mutex
	failed   map[string]error
}

// OpenLab opens the named backends (if names is empty, every one but the
// opt-in clusters, which run only when named). A backend that cannot run
// here is skipped with its reason (Skipped); OpenLab fails only on an
// unknown name or a cancelled ctx.
func OpenLab(ctx context.Context, names []string, env Env) (*Lab, error) {
	if len(names) == 0 {
		names = DefaultBackends()
	}
	var id [4]byte
	_, _ = rand.Read(id[:])
	l := &Lab{env: env, id: hex.EncodeToString(id[:]), open: map[string]*backend{}, failed: map[string]error{}}
	for _, n := range names {
		if _, ok := lookupSystem(n); !ok {
			return nil, fmt.Errorf("benchmarks: unknown backend %q (have %v)", n, Backends())
		}
	}
	for _, n := range names {
		if err := ctx.Err(); err != nil {
			_ = l.Close(context.Background())
			return nil, err
		}
		sys, _ := lookupSystem(n)
		b, err := openBackend(ctx, l, sys)
		if err != nil {
			l.skipped = append(l.skipped, skip{Name: n, Reason: err.Error()})
			continue
		}
		l.open[n] = b
		l.order = append(l.order, n)
	}
	return l, nil
}

// backend returns the open backend with that name.
func (l *Lab) backend(name string) (*backend, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	b, ok := l.open[name]
	return b, ok
}

// openOnDemand returns the open backend called name, or opens it now and
// keeps it with the others until Close: a backend that only some
// strategies need (the five Redis servers of lock-redlock; Redis for
// lock-redis when the redis backend was not selected) is started only
// when a cell needs it. A backend that failed to open is not tried again
// in the same run: the error is returned again.
func (l *Lab) openOnDemand(ctx context.Context, name string) (*backend, error) {
	l.onDemand.Lock()
	defer l.onDemand.Unlock()
	if b, ok := l.backend(name); ok {
		return b, nil
	}
	if err := l.failed[name]; err != nil {
		return nil, err
	}
	sys, ok := lookupSystem(name)
	if !ok {
		return nil, fmt.Errorf("benchmarks: unknown backend %q", name)
	}
	b, err := openBackend(ctx, l, sys)
	if err != nil {
		if ctx.Err() == nil {
			l.failed[name] = err
		}
		return nil, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.open == nil { // closed meanwhile
		return nil, errors.Join(errors.New("benchmarks: the lab is closed"), b.close(context.WithoutCancel(ctx)))
	}
	l.open[name] = b
	l.order = append(l.order, name)
	return b, nil
}

// Open returns the names of the open backends, in the order opened.
func (l *Lab) Open() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.order...)
}

// DataBackends returns the names of the open backends that hold data.
func (l *Lab) DataBackends() []string {
	var out []string
	for _, n := range l.Open() {
		if b, _ := l.backend(n); !b.sys.lendsLock {
			out = append(out, n)
		}
	}
	return out
}

// Infos describes the open backends.
func (l *Lab) Infos() []backendInfo {
	var out []backendInfo
	for _, n := range l.Open() {
		b, _ := l.backend(n)
		out = append(out, b.Info())
	}
	return out
}

// Skipped returns the backends that could not be opened, with the reason.
func (l *Lab) Skipped() []skip {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]skip(nil), l.skipped...)
}

// Close closes every open backend, stopping the servers the lab started.
func (l *Lab) Close(ctx context.Context) error {
	l.mu.Lock()
	order, open := l.order, l.open
	l.order, l.open = nil, nil
	l.mu.Unlock()
	var errs []error
	for i := len(order) - 1; i >= 0; i-- {
		if err := open[order[i]].close(ctx); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", order[i], err))
		}
	}
	return errors.Join(errs...)
}

// namespace returns a fresh namespace for a cell.
func (l *Lab) namespace() string {
	return fmt.Sprintf("lab_%s_%d", l.id, l.seq.Add(1))
}
