package lab

import (
	"fmt"
	"time"

	"github.com/occkit/occkit/benchmarks/internal/backends"
)

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
