package lab

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/occkit/occkit/adapters/pgcas"
	"github.com/occkit/occkit/benchmarks/internal/backends"
	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/hybrid"
)

// system is how the lab runs on one system of benchmarks/internal/backends.
type system struct {
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
	// wrap gives the backend the accessors of its system (a
	// postgresService, ...), for strategies that lock through it.
	wrap func(*dataService) service
	// keyGroup: see dataBackend.keyGroup.
	keyGroup int
}

// leaseTTL is the TTL of the lease locks of hybrid and adaptive.
const leaseTTL = 10 * time.Second

// pinnedConns sizes a pool whose locks pin a connection each, and so
// does a waiting Acquire: a worker may hold two leases (transfer) and
// borrow a third connection for the data.
func pinnedConns(workers int) int { return 3*max(workers, DefaultWorkers) + 4 }

var systems = map[string]system{
	backends.Memory: {
		about:  "memcas, the in-process store: the cost of coordination without a network",
		locker: "hybrid.NewLocalLocker (in process, 10 s TTL)",
		// An in-process attempt takes about a microsecond, so occ's
		// default first wait of 1 ms would idle the workers for a
		// thousand attempts' time (docs/benchmarks.md measured 11–13×
		// fewer operations). The lab follows the docs' advice and scales
		// the backoff down.
		tuning: retryTuning{BackOffInitial: 10 * time.Microsecond, BackOffMax: time.Millisecond},
	},
	backends.Etcd: {
		about:  "etcdcas on a one-member etcd started in process (UnsafeNoFsync)",
		locker: "etcdcas.Locker (etcd lease, 10 s TTL; token = the grant's creation revision)",
		wrap:   func(d *dataService) service { return &etcdBackend{d} },
	},
	backends.Postgres: {
		about:        "pgcas on PostgreSQL: OCCKIT_PG_URL, or a throwaway server started with scripts/servers/postgres.sh",
		locker:       "pgcas.Locker (session pg_advisory_lock on a pinned connection; tokens from a sequence)",
		conns:        pinnedConns,
		scopeEnv:     "OCCKIT_LAB_PG_SCHEMA",
		sharedLocker: true,
		wrap:         func(d *dataService) service { return &pgBackend{d} },
	},
	backends.Redis: {
		about:  "rediscas on Redis: OCCKIT_REDIS_URL, or a throwaway server started with scripts/servers/redis.sh",
		locker: "rediscas.Locker (SET PX with INCR fencing tokens, a watchdog per lease; waiters poll)",
		conns:  pinnedConns,
		wrap:   func(d *dataService) service { return &redisBackend{d} },
	},
	backends.DynamoDB: {
		about: "dynamocas on a DynamoDB-compatible server: minidyn's, in process (TransactWriteItems included), or dynalite at OCCKIT_DYNALITE_URL (no TransactWriteItems)",
		// Chosen at the first cell that needs it (dataService.NewLocker).
		locker: "not chosen yet: rediscas.Locker when the redis backend is open, else hybrid.NewLocalLocker (in process)",
	},
	backends.MySQL: {
		about:        "sqlcas (dialect MySQL) on MariaDB: OCCKIT_MYSQL_DSN, or a throwaway server started with scripts/servers/mariadb.sh",
		locker:       "sqlcas.Locker (GET_LOCK in a pinned connection's session; tokens from a counter row)",
		conns:        pinnedConns,
		scopeEnv:     "OCCKIT_LAB_MYSQL_DB",
		sharedLocker: true,
		wrap:         func(d *dataService) service { return &mysqlBackend{d} },
	},
	backends.SQLite: {
		about: "sqlcas (dialect SQLite, modernc.org/sqlite) on a file database in WAL mode in a temporary directory, several connections: always available",
		// SQLite has no lock service: the database is a file of this
		// process, and so is the lock.
		locker: "hybrid.NewLocalLocker (in process, 10 s TTL): SQLite has no lock service, and one process writes the database (hybrid and adaptive are not applicable with --procs)",
		// Several connections: readers in parallel, one writer at a time
		// (SQLite's lock), the others wait in the busy timeout.
		conns: func(workers int) int { return max(workers, DefaultWorkers) + 2 },
	},

	// The clusters, each run only when named.
	backends.RedisCluster: {
		about:    "rediscas on a Redis Cluster (3 masters + 3 replicas): OCCKIT_REDIS_CLUSTER_URL, or a throwaway cluster started with scripts/servers/redis-cluster.sh; a cell's keys spread over the slots, a transfer's two accounts share a hash tag (groups of " + fmt.Sprint(clusterKeyGroup) + " accounts)",
		locker:   "rediscas.Locker on the cluster (SET PX with INCR fencing tokens, the lock and its counter in one slot; a watchdog per lease; waiters poll)",
		conns:    pinnedConns,
		keyGroup: clusterKeyGroup,
		wrap:     func(d *dataService) service { return &redisClusterBackend{d} },
	},
	backends.Etcd3: {
		about:  "etcdcas on etcd with three members started in process (UnsafeNoFsync), clients spread over the members (round robin per request; a --procs child talks to one member, child i to member i mod 3); reads linearizable, occ-follower-reads serializable",
		locker: "etcdcas.Locker (etcd lease, 10 s TTL; token = the grant's creation revision)",
		wrap:   func(d *dataService) service { return &etcdBackend{d} },
	},
	backends.PostgresReplica: {
		about:        "pgcas on a PostgreSQL primary with a streaming hot standby: OCCKIT_PG_URL and OCCKIT_PG_REPLICA_URL, or both started with scripts/servers/postgres.sh --replica; writes and reads on the primary, occ-follower-reads reads on the replica (pgcas.Config.ReadPool)",
		locker:       "pgcas.Locker on the primary (session pg_advisory_lock on a pinned connection; tokens from a sequence)",
		conns:        pinnedConns,
		scopeEnv:     "OCCKIT_LAB_PG_REPLICA_SCHEMA",
		sharedLocker: true,
		wrap:         func(d *dataService) service { return &pgBackend{d} },
	},
}

// systemSpec returns the backendSpec of a system.
func systemSpec(name string) backendSpec {
	return backendSpec{Name: name, About: systems[name].about, Open: func(ctx context.Context, env *Env) (service, error) {
		return openData(ctx, env, name)
	}}
}

// dataService is a backend of the lab: a server of
// benchmarks/internal/backends and a client of it, through the lab's
// proxy when it has one.
type dataService struct {
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

	// lookup finds another open service (the dynamodb backend borrows
	// Redis's lock); lockFrom is the one chosen, at the first cell that
	// needs a lock.
	lookup   func(string) (service, bool)
	lockMu   sync.Mutex
	lockFrom *dataService
	lockDesc string
}

// openData reaches or starts the server of system and connects to it.
func openData(ctx context.Context, env *Env, name string) (_ service, err error) {
	sys := systems[name]
	d := &dataService{sys: sys, lookup: env.service}
	defer func() {
		if err != nil {
			_ = d.Close(context.WithoutCancel(ctx))
		}
	}()
	if d.srv, err = env.backendsEnv().Reach(ctx, name); err != nil {
		return nil, err
	}
	opts := backends.ClientOptions{}
	if sys.conns != nil {
		opts.Conns = sys.conns(env.MaxWorkers)
	}
	if sys.scopeEnv != "" {
		var rb [6]byte
		_, _ = rand.Read(rb[:])
		d.scope = "occbench_" + hex.EncodeToString(rb[:])
		if s := env.getenv(sys.scopeEnv); s != "" {
			d.scope, d.attached = s, true // a --procs child: the parent's
		}
		opts.Scope, opts.CreateScope = d.scope, !d.attached
	}
	if name == backends.Etcd3 && env.proc > 0 {
		// A --procs child talks to one member, as a service instance
		// configured with one endpoint would.
		opts.Pinned, opts.Member = true, env.proc-1
	}
	if env.Proxy && name != backends.Memory && name != backends.SQLite {
		addr, err := d.srv.Addr()
		if err != nil {
			return nil, fmt.Errorf("%w: %w", errUnavailable, err)
		}
		if opts.Via, err = env.dial(addr); err != nil {
			return nil, fmt.Errorf("%w: %w", errUnavailable, err)
		}
	}
	if d.cli, err = d.srv.Connect(ctx, opts); err != nil {
		return nil, fmt.Errorf("%w: %w", errUnavailable, err)
	}
	version, durable, err := d.cli.Describe(ctx)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", errUnavailable, d.srv.Where, err)
	}
	if sys.sharedLocker {
		if d.locker, d.closeLocker, err = d.cli.NewLocker(ctx, backends.LockerConfig{Name: "lab", TTL: leaseTTL}); err != nil {
			return nil, fmt.Errorf("%w: %w", errUnavailable, err)
		}
	}
	server := d.srv.Where
	if version != "" {
		server = version + " " + server
	}
	if d.scope != "" {
		server += ", in " + d.scope
	}
	if opts.Conns > 0 {
		server += fmt.Sprintf(", pool of %d connections", opts.Conns)
	}
	d.info = backendInfo{Name: name, Server: server + env.via(), Durability: durable, Locker: sys.locker, BackOff: describeBackOff(d.tuning())}
	env.logf("%s: %s; %s", name, d.info.Server, d.info.Durability)
	if sys.wrap != nil {
		return sys.wrap(d), nil
	}
	return d, nil
}

func (d *dataService) server() *backends.Server { return d.srv }

// client returns the backend's client, for strategies that work on tables
// of their own over its connections (strategies_tables.go).
func (d *dataService) client() *backends.Client { return d.cli }

func (d *dataService) Info() backendInfo {
	d.lockMu.Lock()
	defer d.lockMu.Unlock()
	info := d.info
	if d.lockDesc != "" {
		info.Locker = d.lockDesc
	}
	return info
}

// tuning returns the system's backoff and its adapter's Retryable.
func (d *dataService) tuning() retryTuning {
	t := d.sys.tuning
	t.Retryable = d.cli.Retryable()
	return t
}

func (d *dataService) multiKeyUnsupported() string { return d.srv.MultiKeyUnsupported }

// childEnv implements childEnver: the server's variables, and the lab's
// scope; nil for memory, which no other process can reach.
func (d *dataService) childEnv() []string {
	env := d.srv.Env()
	if env == nil {
		return nil
	}
	if d.sys.scopeEnv != "" {
		env = append(env, d.sys.scopeEnv+"="+d.scope)
	}
	return env
}

func (d *dataService) NewStore(ctx context.Context, ns string) (cas.Store, func(context.Context) error, error) {
	s, err := d.cli.CreateStore(ctx, ns)
	if err != nil {
		return nil, nil, err
	}
	return s, func(ctx context.Context) error { return d.cli.Drop(ctx, ns) }, nil
}

func (d *dataService) keyGroup() int { return d.sys.keyGroup }

// followerStore is backends.Client.FollowerStore.
func (d *dataService) followerStore(ns string) (cas.Store, error) { return d.cli.FollowerStore(ns) }

// catchUp is backends.Client.CatchUp: Run calls it after seeding, so
// that a cell does not start with reads of keys the replica has not seen
// yet.
func (d *dataService) catchUp(ctx context.Context) error { return d.cli.CatchUp(ctx) }

func (d *dataService) openStore(_ context.Context, ns string) (cas.Store, error) {
	if d.srv.EnvVar == "" {
		return nil, errors.New("memory: the in-process store cannot be shared with another process")
	}
	return d.cli.Store(ns)
}

// localLocks reports that the backend's lease lock serves this process
// only (hybrid.NewLocalLocker).
func (d *dataService) localLocks() bool {
	return !d.cli.HasLockService() && d.borrowedLocks() == nil
}

// NewLocker returns the lease lock of hybrid and adaptive for a cell: the
// lab's shared one, or one of the cell's own (its keys removed with the
// cell's store). DynamoDB has no lock of its own: it borrows the redis
// backend's when Redis is open in this run, else uses the in-process
// hybrid.NewLocalLocker; the choice is made at the first cell that needs
// it, and stated in Info.
func (d *dataService) NewLocker(ctx context.Context, ns string) (hybrid.Locker, func(context.Context) error, error) {
	if d.locker != nil {
		return d.locker, func(context.Context) error { return nil }, nil
	}
	if from := d.borrowedLocks(); from != nil {
		return from.NewLocker(ctx, ns)
	}
	l, closeFn, err := d.cli.NewLocker(ctx, backends.LockerConfig{Name: ns, TTL: leaseTTL})
	if err != nil {
		return nil, nil, err
	}
	return l, func(context.Context) error { return closeFn() }, nil
}

// borrowedLocks returns the backend that lends its locks to this one.
func (d *dataService) borrowedLocks() *dataService {
	if d.cli.System != backends.DynamoDB {
		return nil
	}
	d.lockMu.Lock()
	defer d.lockMu.Unlock()
	if d.lockDesc == "" {
		d.lockDesc = "hybrid.NewLocalLocker (in process, 10 s TTL): DynamoDB has no lock of its own and Redis was not open"
		if svc, ok := d.lookup(backends.Redis); ok {
			if rb, ok := svc.(*redisBackend); ok {
				d.lockFrom = rb.dataService
				d.lockDesc = "the redis backend's rediscas.Locker (SET PX with INCR fencing tokens; waiters poll): DynamoDB has no lock of its own"
			}
		}
	}
	return d.lockFrom
}

func (d *dataService) Close(ctx context.Context) error {
	var errs []error
	if d.closeLocker != nil {
		errs = append(errs, d.closeLocker())
	}
	if d.cli != nil {
		if d.scope != "" && !d.attached {
			errs = append(errs, d.cli.DropScope(ctx))
		}
		errs = append(errs, d.cli.Close())
	}
	if d.srv != nil {
		errs = append(errs, d.srv.Close(ctx))
	}
	return errors.Join(errs...)
}

// postgresService is implemented by the postgres backend, for strategies
// that lock through PostgreSQL.
type postgresService interface {
	// PGPool is the lab's pool; its connections work in the lab's schema.
	PGPool() *pgxpool.Pool
	// AdvisoryLocker hands out session advisory-lock leases.
	AdvisoryLocker() *pgcas.Locker
	// Table returns the quoted name of the pgcas table holding a cell's
	// data, for statements the adapter does not offer.
	Table(ns string) string
}

type pgBackend struct{ *dataService }

func (b *pgBackend) PGPool() *pgxpool.Pool         { return b.cli.Postgres() }
func (b *pgBackend) AdvisoryLocker() *pgcas.Locker { return b.locker.(*pgcas.Locker) }
func (b *pgBackend) Table(ns string) string        { return b.cli.Table(ns) }

// RedisService is implemented by the redis and redis-cluster backends,
// for strategies that lock through Redis.
type RedisService interface {
	RedisClient() redis.UniversalClient
}

type redisBackend struct{ *dataService }

func (b *redisBackend) RedisClient() redis.UniversalClient { return b.cli.Redis() }

// redisClusterBackend is the redis-cluster backend: its RedisClient is
// the cluster's client (lock-redis on it locks on the cluster).
type redisClusterBackend struct{ *dataService }

func (b *redisClusterBackend) RedisClient() redis.UniversalClient { return b.cli.RedisCluster() }

// openRedis opens the redis backend (for a lock through Redis when the
// backend was not selected).
func openRedis(ctx context.Context, env *Env) (service, error) {
	return openData(ctx, env, backends.Redis)
}

// EtcdService is implemented by the etcd backend, for strategies that
// lock through etcd whatever backend holds the data.
type EtcdService interface {
	EtcdClient() *clientv3.Client
}

type etcdBackend struct{ *dataService }

func (b *etcdBackend) EtcdClient() *clientv3.Client { return b.cli.Etcd() }

// MySQLService is implemented by the mysql backend, for strategies and
// the lock stories that lock through MySQL.
type MySQLService interface {
	// MySQLDB is the lab's pool; its connections work in the lab's
	// database.
	MySQLDB() *sql.DB
	// MySQLDSN is the server's DSN as the lab reached it (not through
	// the lab's proxy), for clients of their own.
	MySQLDSN() string
}

type mysqlBackend struct{ *dataService }

func (b *mysqlBackend) MySQLDB() *sql.DB       { return b.cli.SQL() }
func (b *mysqlBackend) MySQLDSN() string       { return b.srv.URL }
func (b *mysqlBackend) table(ns string) string { return b.cli.Table(ns) }

// ZooKeeperService is implemented by the zookeeper service, for the
// lock-zookeeper strategy.
type ZooKeeperService interface {
	ZooKeeperAddr() string
}

// EnvZooKeeperAddr names a ZooKeeper server (host:port) the lab uses;
// when it is unset, the lab starts one from Debian's zookeeper package if
// it is installed.
const EnvZooKeeperAddr = backends.EnvZooKeeperAddr

// zkService is ZooKeeper, which holds no data: it lends lock-zookeeper
// to the other backends.
type zkService struct {
	srv  *backends.Server
	addr string // where clients connect: a proxy with Env.Proxy
	info backendInfo
}

func openZooKeeper(ctx context.Context, env *Env) (service, error) {
	srv, err := env.backendsEnv().Reach(ctx, backends.ZooKeeper)
	if err != nil {
		return nil, err
	}
	s := &zkService{srv: srv, addr: srv.URL}
	if env.Proxy {
		if s.addr, err = env.dial(srv.URL); err != nil {
			_ = srv.Close(ctx)
			return nil, fmt.Errorf("%w: %w", errUnavailable, err)
		}
	}
	durable := "as configured on the server (not checked)"
	if srv.Started() {
		durable = "forceSync=no: the transaction log is not fsynced (throwaway data)"
	}
	s.info = backendInfo{Name: backends.ZooKeeper, Server: "ZooKeeper " + srv.Version + " " + srv.Where + env.via(), Durability: durable,
		Locker: "— (lends lock-zookeeper to other backends)", BackOff: "—"}
	env.logf("zookeeper: %s", s.info.Server)
	return s, nil
}

func (s *zkService) server() *backends.Server        { return s.srv }
func (s *zkService) ZooKeeperAddr() string           { return s.addr }
func (s *zkService) Info() backendInfo               { return s.info }
func (s *zkService) Close(ctx context.Context) error { return s.srv.Close(ctx) }
func (s *zkService) childEnv() []string              { return []string{s.srv.EnvVar + "=" + s.srv.URL} }
