// Package backends is the one place the benchmark programs (occbench's
// lab and stories, occfaults, the lease faults) open the systems they run
// on: memory, PostgreSQL, Redis, etcd, DynamoDB, MySQL/MariaDB, SQLite;
// ZooKeeper and Redlock's five Redis servers for their locks; and three
// clusters: a Redis Cluster, a three-member etcd, a PostgreSQL primary
// with a streaming replica.
//
// # Servers and clients
//
// [Env.Reach] finds a system's server, through the environment variable
// that names it ([EnvVar]) or by starting a throwaway one (a
// scripts/servers/<name>.sh script, or in process for etcd, its three
// members of etcd3, DynamoDB and SQLite; internal/servers does the
// starting). [Env.StartOwn] starts a server of the caller's own, which
// [Server.Restart] can restart, or a cluster to disrupt
// ([Server.EtcdCluster]). [Server.Proxy] puts a fault proxy
// (internal/faultproxy, which can also add a delay each way) in front of
// it (not of a cluster). [Server.Env] is what a child process needs to
// reach the same server.
//
// [Server.Connect] opens a [Client]: a pool of connections to the server
// (optionally through a proxy: ClientOptions.Via, or ClientOptions.Proxy
// for proxies of the client's own), which opens cas stores in namespaces
// ([Client.CreateStore], [Client.Store], [Client.Drop]), hands out the
// system's lease lock ([Client.NewLocker], or one shared lock:
// [Client.Locker]), says what the server is ([Client.Describe]), and
// gives its native client for checks and baselines ([Client.Postgres],
// [Client.Redis], [Client.Redlock], [Client.ZooKeeperAddr], ...). On
// etcd3 and postgres-replica, [Client.FollowerStore] reads from a
// follower or the replica. [Client.Env] is what a child process needs to
// reach the same server in the same scope.
//
// # Systems
//
// [Client.Spec] is what the programs know of a client's system beside
// its server (a [Spec] per system, listed in order by [Systems]): its
// lease lock, which errors are transient, its backoff and pool size,
// whether it is a cluster, or only lends its lock.
//
// Servers and clients are safe for concurrent use.
package backends
