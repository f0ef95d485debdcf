package backends

import (
	"fmt"
	"slices"
	"time"

	"github.com/occkit/occkit/adapters/dynamocas"
	"github.com/occkit/occkit/adapters/etcdcas"
	"github.com/occkit/occkit/adapters/pgcas"
	"github.com/occkit/occkit/adapters/rediscas"
	"github.com/occkit/occkit/adapters/sqlcas"
)

// Spec is what the programs know of a system beside its server and
// client: how to describe it, its lease lock, how to retry and pool on
// it, and how it takes part in a run. Client.Spec returns its system's.
type Spec struct {
	// Name is the system's name (Postgres, ...), in flags, results and
	// charts.
	Name string
	// About says in one line what the system is and how its server is
	// reached or started.
	About string
	// Locker describes Client.NewLocker's lease lock, for reports.
	Locker string
	// LockService: NewLocker's lock is a server's, which other processes
	// share; false: hybrid.NewLocalLocker, which serves this process only.
	LockService bool
	// Retryable reports the transient errors of the system's adapter that
	// are safe to retry (its own classifier), or is nil (memory).
	Retryable func(error) bool
	// BackOffInitial and BackOffMax bound the exponential backoff of
	// optimistic retries on the system; zero: occ's default, sized for
	// networked stores.
	BackOffInitial, BackOffMax time.Duration
	// Conns is the pool size (ClientOptions.Conns) of a client serving
	// workers workers; nil: the driver's default.
	Conns func(workers int) int
	// ScopeEnv is the environment variable through which Client.Env
	// passes a client's ClientOptions.Scope to a child process; "": the
	// system has no scope.
	ScopeEnv string
	// SharedLocker: one lease lock per client (ClientOptions.Locker), its
	// lock names carrying the caller's namespace, rather than one per
	// caller (a lease pins a connection, tokens come from the database).
	SharedLocker bool
	// KeyGroup is, on a system that commits several keys atomically only
	// within a group (Redis Cluster: one hash slot), how many keys make a
	// group; 0: any keys commit together.
	KeyGroup int
	// LendsLock: the system holds no data; it lends its lock to the
	// others (ZooKeeper, Redlock).
	LendsLock bool
	// Cluster: several servers measured beside each other, run only when
	// named (docs/benchmarks.md, "Clusters").
	Cluster bool
	// OnDemand: never named, but opened by the first caller that needs it
	// (Redlock's five servers).
	OnDemand bool
}

// redisClusterKeyGroup is how many keys share a hash tag on
// redis-cluster: a transfer moves money between two accounts of one group
// (a customer's accounts), and the groups spread over the slots.
const redisClusterKeyGroup = 10

// pinnedConns sizes a pool whose locks pin a connection each, and so does
// a waiting Acquire: a worker may hold two leases (transfer) and borrow a
// third connection for the data.
func pinnedConns(workers int) int { return 3*workers + 4 }

// systems are the specs of the systems, in their order: one list,
// written out, instead of registrations.
var systems = []Spec{
	{
		Name:   Memory,
		About:  "memcas, the in-process store: the cost of coordination without a network",
		Locker: "hybrid.NewLocalLocker (in process, 10 s TTL)",
		// An in-process attempt takes about a microsecond, so occ's
		// default first wait of 1 ms would idle the workers for a
		// thousand attempts' time (docs/benchmarks.md, "Strategies",
		// has what it cost): the backoff is scaled down, as the docs
		// advise.
		BackOffInitial: 10 * time.Microsecond, BackOffMax: time.Millisecond,
	},
	{
		Name:        Etcd,
		About:       "etcdcas on a one-member etcd started in process (UnsafeNoFsync)",
		Locker:      "etcdcas.Locker (etcd lease, 10 s TTL; token = the grant's creation revision)",
		LockService: true, Retryable: etcdcas.Retryable,
	},
	{
		Name:        Postgres,
		About:       "pgcas on PostgreSQL: OCCKIT_PG_URL, or a throwaway server started with scripts/servers/postgres.sh",
		Locker:      "pgcas.Locker (session pg_advisory_lock on a pinned connection; tokens from a sequence)",
		LockService: true, Retryable: pgcas.Retryable,
		Conns: pinnedConns, ScopeEnv: "OCCKIT_LAB_PG_SCHEMA", SharedLocker: true,
	},
	{
		Name:        Redis,
		About:       "rediscas on Redis: OCCKIT_REDIS_URL, or a throwaway server started with scripts/servers/redis.sh",
		Locker:      "rediscas.Locker (SET PX with INCR fencing tokens, a watchdog per lease; waiters poll)",
		LockService: true, Retryable: rediscas.Retryable,
		Conns: pinnedConns,
	},
	{
		Name:  DynamoDB,
		About: "dynamocas on a DynamoDB-compatible server: minidyn's, in process (TransactWriteItems included), or dynalite at OCCKIT_DYNALITE_URL (no TransactWriteItems)",
		// The lab chooses at the first cell that needs a lock.
		Locker:    "not chosen yet: rediscas.Locker when the redis backend is open, else hybrid.NewLocalLocker (in process)",
		Retryable: dynamocas.Retryable,
	},
	{
		Name:      ZooKeeper,
		About:     "ZooKeeper, lock service only (lock-zookeeper): OCCKIT_ZK_ADDR, or a standalone server started from Debian's zookeeper package",
		Locker:    "— (lends lock-zookeeper to other backends)",
		LendsLock: true,
	},
	{
		Name:        MySQL,
		About:       "sqlcas (dialect MySQL) on MariaDB: OCCKIT_MYSQL_DSN, or a throwaway server started with scripts/servers/mariadb.sh",
		Locker:      "sqlcas.Locker (GET_LOCK in a pinned connection's session; tokens from a counter row)",
		LockService: true, Retryable: sqlcas.Retryable,
		Conns: pinnedConns, ScopeEnv: "OCCKIT_LAB_MYSQL_DB", SharedLocker: true,
	},
	{
		Name:  SQLite,
		About: "sqlcas (dialect SQLite, modernc.org/sqlite) on a file database in WAL mode in a temporary directory, several connections: always available",
		// SQLite has no lock service: the database is a file of this
		// process, and so is the lock.
		Locker:    "hybrid.NewLocalLocker (in process, 10 s TTL): SQLite has no lock service, and one process writes the database (hybrid and adaptive are not applicable with --procs)",
		Retryable: sqlcas.Retryable,
		// Several connections: readers in parallel, one writer at a time
		// (SQLite's lock), the others wait in the busy timeout.
		Conns: func(workers int) int { return workers + 2 },
	},

	// The clusters, each run only when named.
	{
		Name:        RedisCluster,
		About:       "rediscas on a Redis Cluster (3 masters + 3 replicas): OCCKIT_REDIS_CLUSTER_URL, or a throwaway cluster started with scripts/servers/redis-cluster.sh; a cell's keys spread over the slots, a transfer's two accounts share a hash tag (groups of " + fmt.Sprint(redisClusterKeyGroup) + " accounts)",
		Locker:      "rediscas.Locker on the cluster (SET PX with INCR fencing tokens, the lock and its counter in one slot; a watchdog per lease; waiters poll)",
		LockService: true, Retryable: rediscas.Retryable,
		Conns: pinnedConns, KeyGroup: redisClusterKeyGroup, Cluster: true,
	},
	{
		Name:        Etcd3,
		About:       "etcdcas on etcd with three members started in process (UnsafeNoFsync), clients spread over the members (round robin per request; a --procs child talks to one member, child i to member i mod 3); reads linearizable, occ-follower-reads serializable",
		Locker:      "etcdcas.Locker (etcd lease, 10 s TTL; token = the grant's creation revision)",
		LockService: true, Retryable: etcdcas.Retryable,
		Cluster: true,
	},
	{
		Name:        PostgresReplica,
		About:       "pgcas on a PostgreSQL primary with a streaming hot standby: OCCKIT_PG_URL and OCCKIT_PG_REPLICA_URL, or both started with scripts/servers/postgres.sh --replica; writes and reads on the primary, occ-follower-reads reads on the replica (pgcas.Config.ReadPool)",
		Locker:      "pgcas.Locker on the primary (session pg_advisory_lock on a pinned connection; tokens from a sequence)",
		LockService: true, Retryable: pgcas.Retryable,
		Conns: pinnedConns, ScopeEnv: "OCCKIT_LAB_PG_REPLICA_SCHEMA", SharedLocker: true, Cluster: true,
	},

	// Opened by the first lock-redlock cell.
	{
		Name:      Redlock,
		About:     "Redlock's independent Redis servers, lock service only (lock-redlock): OCCKIT_REDLOCK_URLS, or five throwaway servers started with scripts/servers/redis.sh",
		Locker:    "— (lends lock-redlock to the data backends)",
		Conns:     pinnedConns,
		LendsLock: true, OnDemand: true,
	},
}

// Systems returns the specs of every system, in their order: the data
// systems, the clusters, then Redlock.
func Systems() []Spec { return slices.Clone(systems) }

// SpecOf returns the spec of the system called name.
func SpecOf(name string) (Spec, bool) {
	i := slices.IndexFunc(systems, func(s Spec) bool { return s.Name == name })
	if i < 0 {
		return Spec{}, false
	}
	return systems[i], true
}
