// Package lab is occkit's contention lab, behind cmd/occbench and the lock
// stories: it opens real backends, runs workloads on them with occkit's
// strategies and with the locks people use instead, checks each
// workload's invariant after every cell, and reports throughput, latency,
// attempts and the goal checks.
//
// # Pieces
//
//   - Backends (open.go): a backend is a *backends.Client, the lab's
//     client of a server of benchmarks/internal/backends that the lab
//     reached or started (OpenLab skips, with the reason, one that cannot
//     run here); what the lab knows of its system is the system's
//     backends.Spec (backends.Systems lists them). Most hold data (the
//     client's stores, its lease lock, the spec's backoff); ZooKeeper and
//     Redlock's servers lend their locks to the others. The clusters
//     (redis-cluster, etcd3, postgres-replica) run only when named
//     (Spec.Cluster); a Redis Cluster commits the keys of one hash slot
//     only, so multi-key workloads there name their keys with a hash tag
//     per group of accounts and pick an operation's keys in one group
//     (Spec.KeyGroup, keyspace.go).
//   - Strategies (strategies*.go, listed in strategySpecs, each described
//     in docs/benchmarks.md): how one operation is performed, by occkit
//     (occ and its variants, transactions, tables, deltas, hybrid,
//     adaptive) or by a lock-* baseline, each given a harness per cell.
//   - Workloads (workload.go): counter, inventory and transfer, each with
//     its invariant.
//   - Grid, Lab.Run and Lab.RunGrid run cells; NewReport, checkGoals and
//     the writers turn outcomes into tables, charts and results.json.
//
// The lists are written out (no registration from init functions), so the
// lab's whole menu is visible in three places. It is internal: its API
// serves occbench and the stories, not users.
package lab
