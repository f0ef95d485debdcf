package lab

// The goals, as printed.
const (
	goalLowOCC      = "low contention: occ ≥ 2× the best cross-process lock"
	goalHighHybrid  = "high contention: hybrid or adaptive ≥ 0.9× the best cross-process lock"
	goalHighOCC     = "high contention: occ (with backoff) ≥ 0.5× the best cross-process lock, every worker commits"
	goalAdaptiveAll = "every point: adaptive ≥ 0.95× the best of occ, occ-combine and the best cross-process lock"

	// Hot keys: combining and the version cache, against the best lock
	// that works across processes (every lock-* but lock-local, the
	// single-process reference).
	goalCombineHot   = "1 key, 8 workers, no work: occ-combine ≥ 3× the best cross-process lock, p99.9 ≤ its p99.9, 8/8 workers commit"
	goalCombineWork  = "1–16 keys, 1 ms of work: occ-combine ≥ 1.0× the best cross-process lock"
	goalCombineCool  = "1000 keys: occ-combine ≥ 0.95× occ"
	goalCombineProcs = "--procs 4, 1 key: occ-combine ≥ 1.5× the best cross-process lock"
	goalReplicasHot  = "--procs 8, 1 key, no work: each of occ, occ-combine, adaptive and occ-table ≥ 1.5× the best cross-process lock, 0 failed, p99.9 ≤ 3× the best queueing lock's (8 replicas of a service on one hot row)"
	goalCachedRTT    = "--rtt 1ms, 1000 keys: occ-cached ≥ 2.5× the best cross-process lock"
	goalOCCTail      = "1 key, 8 workers, no work: occ (no combining) p99.9 ≤ 3× the best queueing lock's, 8/8 workers commit"

	// The repository paths' goals (Table[T].Modify, gormocc.Update): no
	// operation fails, and on the same backend the table's Modify keeps
	// up with occ.Update over the store, and combined beats the locks it
	// replaces. "One process": goroutines of one process, on direct
	// connections.
	goalNoFail          = "every occkit strategy (the A/B controls aside): 0 failed operations in its cell, warm-up included: a request that errors out is what a user remembers"
	goalRepoNoFail      = "repository path (occ-table, occ-table-combine, occ-table-txn, occ-tables-txn, delta-table, occ-gorm, occ-http, occ-http-modify): 0 failed operations in the cell, warm-up included"
	goalTableHot        = "1 row, 16 workers, no work, one process: occ-table ≥ 0.9× occ on the same backend"
	goalTableCombineHot = "1 row, 16 workers, no work, one process: occ-table-combine ≥ 3× the best cross-process lock"
	goalTableCool       = "1000 keys: occ-table ≥ 0.95× occ on the same backend"
	// Multi-row transactions' goals (transfers), against the best
	// cross-process lock.
	goalTxnCool   = "transfer, 1000 keys, 8 workers: occ-txn ≥ 1.5× the best cross-process lock (a transaction is a batched read and one commit)"
	goalTxnCached = "transfer, 1000 keys, 8 workers: occ-cached (occ-txn with the version cache) ≥ 2× the best cross-process lock"
	goalTxnHot    = "transfer, 2 hot keys, 8 workers: occ-txn ≥ 1.0× SELECT ... FOR UPDATE, every worker commits, 0 failed, p99.9 ≤ 3× the best queueing lock's"
	// Bounded deltas (occ.Add on a cas.Adder), against the best
	// cross-process lock and against blind-write, the server's own
	// unconditional increment (its physical limit, not a safe choice).
	goalDeltaHot   = "inventory, 1 key, no work: delta ≥ 5× the best cross-process lock, 0 failed, p99.9 ≤ the best queueing lock's (the server applies each sale: no read, no conflict)"
	goalDeltaBlind = "1 key and 1000 keys, no work: delta ≥ 0.8× blind-write on the same backend (what the bound, the version and exactly-once cost)"
	goalHTTP       = "behind an HTTP service: occ-http-modify (the handler runs Table.Modify) ≥ 1× lock-http (the handler takes FOR UPDATE)"

	// The clusters (docs/benchmarks.md, "Clusters"), at the low point (1000
	// keys or more, uniform, no work), one process's goroutines on direct
	// connections unless said: reads from a follower or replica against
	// reads from the leader or primary, side by side; and the version
	// cache against the cluster's own lock.
	goalFollowerEtcd       = "etcd3, 1000 keys, 8 workers: occ with follower reads (occ-follower-reads) ≥ 1.3× occ with linearizable reads"
	goalCachedEtcd3        = "etcd3, 1000 keys, 8 workers: occ-cached ≥ 3× lock-etcd-mutex"
	goalCachedRedisCluster = "redis-cluster, 1000 keys: occ-cached ≥ 3× lock-redis"
	goalReplicaPG          = "postgres-replica, 1000 keys, --procs 4: occ with replica reads (occ-follower-reads) ≥ 1.2× occ on the primary alone"

	// The lab's own resolution: two identical occ-combine cells (the A/A
	// control, run only when asked for) should read alike.
	goalControl = "A/A control: occ-combine-control within 5% of occ-combine (what the lab resolves at this point)"
)

// repositoryPaths are the strategies that run repository code (a table's
// Modify, gormocc.Update), judged by goalRepoNoFail at every point.
var repositoryPaths = []string{"occ-table", "occ-table-combine", "occ-table-txn", "occ-tables-txn", "delta-table", "occ-gorm", "occ-http", "occ-http-modify"}

// queueing names the locks whose waiters queue in order on the server
// (a row lock, an advisory lock, etcd's and ZooKeeper's sequential
// waiters, MySQL's GET_LOCK), against which goalOCCTail judges the tail.
// Redis SET NX and Redlock retry instead.
var queueing = map[string]bool{
	"lock-pg-for-update": true, "lock-pg-advisory": true, "lock-etcd-mutex": true, "lock-zookeeper": true,
	"lock-mysql-for-update": true, "lock-mysql-get-lock": true,
}
