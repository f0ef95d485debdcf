package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/occkit/occkit/adapters/etcdcas"
	"github.com/occkit/occkit/adapters/rediscas"
	"github.com/occkit/occkit/benchmarks/internal/backends"
	"github.com/occkit/occkit/internal/ctxwait"
	"github.com/occkit/occkit/internal/servers"
)

// The clusters' targets: etcd with three members (leader loss, and for
// etcd3 a partition), a Redis Cluster of the run's own (a failover), a
// PostgreSQL primary with a streaming replica (a paused replay). Each
// fault is a one-shot disruption (target.disrupt) that returns once the
// service is whole again.

// etcdClusterTarget starts a 3-member cluster of the run's own
// (backends.Env.StartOwn: fast raft timings, a lost leader replaced
// within about a second; each member's client port behind a proxy, so
// that a hard-stopped member is gone for its clients at once). The
// workloads' client talks to every member (clientv3 balances requests
// over them); with serializable (etcd3), its reads are answered by the
// member it talks to (backends.Client.FollowerStore: etcdcas with
// SerializableReads), possibly stale.
//
// Under leader-loss the disruption stops the leader abruptly and waits
// for the next one; under partition it cuts the leader off from the other
// two members for the time the fault holds (heldFor) (servers.EtcdCluster.Isolate: its client
// port still serves, its serializable reads are stale, its writes fail
// once it has stepped down), heals the partition and waits until the
// three agree on a leader.
func etcdClusterTarget(ctx context.Context, e *env, ns, fault string, serializable bool) (_ *target, err error) {
	var closers cleanups
	tg := &target{retryable: etcdcas.Retryable, close: closers.run, staleReads: serializable}
	defer func() {
		if err != nil {
			tg.close()
		}
	}()
	srv, err := e.servers.StartOwn(ctx, backends.Etcd3)
	if err != nil {
		return nil, err
	}
	closers.add(func() { e.stop(srv) })
	var clis [2]*backends.Client
	for i := range clis {
		if clis[i], err = srv.Connect(ctx, backends.ClientOptions{DialTimeout: callTimeout}); err != nil {
			return nil, err
		}
		closers.add(func() { _ = clis[i].Close() })
	}
	if serializable {
		tg.ops, err = clis[0].FollowerStore(ns)
	} else {
		tg.ops, err = clis[0].Store(ns)
	}
	if err != nil {
		return nil, err
	}
	// The final reads are linearizable.
	if tg.direct, err = clis[1].Store(ns); err != nil {
		return nil, err
	}
	c := srv.EtcdCluster()
	tg.disrupt = func(ctx context.Context, held time.Duration) error {
		lead := c.Leader()
		if lead < 0 {
			return servers.ErrNoLeader
		}
		if fault == faultLeaderLoss {
			c.HardStop(lead)
		} else { // faultPartition
			c.Isolate(lead)
			_ = ctxwait.Sleep(ctx, held)
			c.Heal(lead)
		}
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		_, err := c.AwaitLeader(wctx)
		return err
	}
	return tg, nil
}

// What the failover rows may show (Run.Allowed): with WaitReplicas 1 an
// acknowledged write is on the replica, but a write still waiting for it
// (ambiguous) is visible on the master, and the failover undoes it after
// a read saw it; without WAIT acknowledged writes are lost too.
const (
	undoneAllowed = "reads saw ambiguous writes the failover undid"
	asyncAllowed  = "lost: async replication without WAIT"
)

// redisFailoverTarget starts a Redis Cluster of the run's own
// (scripts/servers/redis-cluster.sh: 3 masters, 3 replicas, a node
// timeout of 1 s), never the environment's, and opens its stores under
// the prefix "{ns}:": a hash tag, so that every key of the run is in one
// slot, on one master (the victim), and the transfers commit in one slot.
// Under failover the workloads' store waits for one replica
// (rediscas.Config.WaitReplicas 1); under failover-async it does not, and
// the rows may lose acknowledged writes (asyncAllowed). Either row may show
// a read of a write the failover undid (undoneAllowed).
//
// The disruption is adapters/rediscas's failover test's: the victim's
// replica is stopped (SIGSTOP) and the victim closes its replication
// link, so the replica falls behind; 300 ms later the victim is killed
// (SIGKILL) and its replica resumed; it returns once the replica, promoted
// by the cluster, answers reads of the slot.
func redisFailoverTarget(ctx context.Context, e *env, ns, fault string) (_ *target, err error) {
	var closers cleanups
	tg := &target{retryable: rediscas.Retryable, close: closers.run}
	defer func() {
		if err != nil {
			tg.close()
		}
	}()
	// go-redis logs every dial to the killed master; the rows count what
	// the failover did.
	redis.SetLogger(quietRedis{})
	srv, err := e.servers.StartOwn(ctx, backends.RedisCluster)
	if err != nil {
		return nil, err
	}
	closers.add(func() { e.stop(srv) })
	prefix := "{" + ns + "}:"
	var clis [2]*redis.ClusterClient
	for i := range clis {
		c, err := srv.Connect(ctx, backends.ClientOptions{Conns: 2 * e.workers, DialTimeout: callTimeout})
		if err != nil {
			return nil, err
		}
		closers.add(func() { _ = c.Close() })
		clis[i] = c.RedisCluster()
	}
	wait := 1
	tg.allowed = undoneAllowed
	if fault == faultAsync {
		wait, tg.allowed, tg.allowsLost = 0, asyncAllowed, true
	}
	if tg.ops, err = rediscas.New(clis[0], rediscas.Config{Prefix: prefix, WaitReplicas: wait, WaitTimeout: 200 * time.Millisecond}); err != nil {
		return nil, err
	}
	if tg.direct, err = rediscas.New(clis[1], rediscas.Config{Prefix: prefix}); err != nil {
		return nil, err
	}
	tg.disrupt = func(ctx context.Context, held time.Duration) error {
		return killMaster(ctx, clis[0], "{"+ns+"}", func(ctx context.Context) error { return awaitAnswer(ctx, tg.direct, 30*time.Second) })
	}
	return tg, awaitAnswer(ctx, tg.ops, readyWithin)
}

// quietRedis is a go-redis logger that discards what it is given.
type quietRedis struct{}

func (quietRedis) Printf(context.Context, string, ...any) {}

// killMaster kills the master of key's slot after making its replica lag
// (see redisFailoverTarget), and returns what back returns (back waits
// until the slot is served again).
func killMaster(ctx context.Context, cli *redis.ClusterClient, key string, back func(context.Context) error) error {
	victim, err := cli.MasterForKey(ctx, key)
	if err != nil {
		return err
	}
	addr := victim.Options().Addr
	pid, err := redisPID(ctx, addr)
	if err != nil {
		return err
	}
	id, err := victim.ClusterMyID(ctx).Result()
	if err != nil {
		return err
	}
	replicas, err := victim.Do(ctx, "cluster", "replicas", id).StringSlice()
	if err != nil || len(replicas) != 1 {
		return fmt.Errorf("replicas of %s: %q, %v", addr, replicas, err)
	}
	// "<id> <ip:port@bus> slave <master id> ..."
	fields := strings.Fields(replicas[0])
	if len(fields) < 2 {
		return fmt.Errorf("replicas of %s: %q", addr, replicas)
	}
	replicaPID, err := redisPID(ctx, strings.SplitN(fields[1], "@", 2)[0])
	if err != nil {
		return err
	}
	if err := syscall.Kill(replicaPID, syscall.SIGSTOP); err != nil {
		return err
	}
	defer func() { _ = syscall.Kill(replicaPID, syscall.SIGCONT) }()
	// What the master sent before sits in the stopped replica's socket
	// buffer and would still reach it: cut the link too.
	if err := victim.Do(ctx, "client", "kill", "type", "replica").Err(); err != nil {
		return err
	}
	time.Sleep(300 * time.Millisecond)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		return err
	}
	if err := syscall.Kill(replicaPID, syscall.SIGCONT); err != nil {
		return err
	}
	return back(ctx)
}

// redisPID returns the process id of the Redis server at addr.
func redisPID(ctx context.Context, addr string) (int, error) {
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	info, err := c.Info(ctx, "server").Result()
	if err != nil {
		return 0, err
	}
	pid, err := strconv.Atoi(backends.InfoField(info, "process_id"))
	if err != nil {
		return 0, fmt.Errorf("no process_id in INFO server of %s", addr)
	}
	return pid, nil
}

// replicaTarget opens b's primary and replica (the environment's, or
// started once for the command) for one run: the workloads' store reads
// from the replica (backends.Client.FollowerStore: pgcas with ReadPool)
// and writes to the primary; the final reads are the primary's. The
// disruption pauses the replica's replay (pg_wal_replay_pause) for the
// time the fault holds (heldFor), so that its reads fall behind, and resumes it; it returns
// once the replica has caught up.
func (b subject) replicaTarget(ctx context.Context, ns string) (_ *target, err error) {
	e := b.env
	var closers cleanups
	tg := &target{retryable: b.direct.Spec().Retryable, close: closers.run, staleReads: true}
	defer func() {
		if err != nil {
			tg.close()
		}
	}()
	if tg.direct, err = b.direct.CreateStore(ctx, ns); err != nil {
		return nil, err
	}
	closers.add(func() { _ = b.direct.Drop(context.Background(), ns) })
	ops, err := b.direct.Server().Connect(ctx, backends.ClientOptions{Conns: 2 * e.workers, DialTimeout: callTimeout})
	if err != nil {
		return nil, err
	}
	closers.add(func() { _ = ops.Close() })
	if tg.ops, err = ops.FollowerStore(ns); err != nil {
		return nil, err
	}
	replica := b.direct.PostgresReplica()
	tg.disrupt = func(ctx context.Context, held time.Duration) error {
		if _, err := replica.Exec(ctx, `SELECT pg_wal_replay_pause()`); err != nil {
			return fmt.Errorf("pausing the replica's replay: %w", err)
		}
		// Resumed whatever happens: the replica may be shared.
		resume := func() error {
			rctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			_, err := replica.Exec(rctx, `SELECT pg_wal_replay_resume()`)
			return err
		}
		_ = ctxwait.Sleep(ctx, held)
		if err := resume(); err != nil {
			return fmt.Errorf("resuming the replica's replay: %w", err)
		}
		return b.direct.CatchUp(ctx)
	}
	return tg, awaitAnswer(ctx, tg.ops, readyWithin)
}
