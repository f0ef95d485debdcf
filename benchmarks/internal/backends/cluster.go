package backends

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/occkit/occkit/adapters/etcdcas"
	"github.com/occkit/occkit/adapters/pgcas"
	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/internal/servers"
)

// The clusters: Redis Cluster, etcd with three members, PostgreSQL with a
// streaming replica. Stores write where the system decides writes (the
// slot's master, the leader, the primary); Client.FollowerStore reads from
// a follower (etcd3: serializable reads on the member the client talks
// to) or the replica (postgres-replica).

// followerDriver is a driver whose system has followers or a replica to
// read from.
type followerDriver interface {
	// followerStore returns a store over namespace ns that reads from a
	// follower or the replica and writes to the leader or primary.
	followerStore(ns string) (cas.Store, error)
	// catchUp waits until the followers or the replica have applied what
	// was written before it was called.
	catchUp(ctx context.Context) error
}

// FollowerStore returns a store over namespace ns (made by CreateStore)
// whose Get and GetMany read from a follower or a replica, and which
// writes, commits and reads a conflict's current state on the leader or
// primary: on etcd3 etcdcas with Config.SerializableReads, on
// postgres-replica pgcas with Config.ReadPool on the replica. Other
// systems have none: an error matching errors.ErrUnsupported.
func (c *Client) FollowerStore(ns string) (cas.Store, error) {
	f, ok := c.d.(followerDriver)
	if !ok {
		return nil, fmt.Errorf("%s has no follower or replica to read from: %w", c.System, errors.ErrUnsupported)
	}
	return f.followerStore(ns)
}

// CatchUp waits until the followers or the replica have applied what was
// written before the call (postgres-replica: the replica has replayed the
// primary's WAL up to now), at most 30 s; it does nothing on the other
// systems. etcd3's followers apply a commit within milliseconds of the
// leader and are not waited for.
func (c *Client) CatchUp(ctx context.Context) error {
	f, ok := c.d.(followerDriver)
	if !ok {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	return f.catchUp(ctx)
}

// --- Redis Cluster ---

func connectRedisCluster(s *Server, opts ClientOptions) (*redisDriver, error) {
	o, err := redis.ParseClusterURL(s.URL)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", s.EnvVar, err)
	}
	if opts.Conns > 0 {
		o.PoolSize = opts.Conns // per node
	}
	if opts.DialTimeout > 0 {
		o.DialTimeout = opts.DialTimeout
	}
	o.ContextTimeoutEnabled = true
	return &redisDriver{cli: redis.NewClusterClient(o)}, nil
}

// describeCluster describes a Redis Cluster: its masters and replicas,
// and the first master's version and persistence.
func describeCluster(ctx context.Context, cc *redis.ClusterClient) (string, string, error) {
	var (
		mu                sync.Mutex // ForEachMaster calls fn on a goroutine per master
		masters, replicas int
		info              string
		save              map[string]string
	)
	err := cc.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
		i, err := m.Info(ctx, "server", "persistence", "replication").Result()
		if err != nil {
			return err
		}
		sv, _ := m.ConfigGet(ctx, "save").Result()
		var n int
		_, _ = fmt.Sscan(InfoField(i, "connected_slaves"), &n)
		mu.Lock()
		defer mu.Unlock()
		masters++
		replicas += n
		if info == "" {
			info, save = i, sv
		}
		return nil
	})
	if err != nil {
		return "", "", err
	}
	durable := persistence(info, save) + "; replication asynchronous, a write acknowledged by its slot's master alone (rediscas WaitReplicas 0)"
	return fmt.Sprintf("Redis %s, a Redis Cluster of %d masters with %d replicas", InfoField(info, "redis_version"), masters, replicas), durable, nil
}

// --- etcd with three members ---

// etcd3Members is the size of the etcd3 cluster.
const etcd3Members = 3

// reachEtcd3 finds the parent process's etcd3 (EnvEtcd3URLs) or starts
// three members in process.
func (e Env) reachEtcd3(ctx context.Context, s *Server) error {
	s.EnvVar = EnvEtcd3URLs
	if s.URL = e.getenv(EnvEtcd3URLs); s.URL != "" {
		s.Where = "etcd, three members at " + s.URL + ", the parent process's"
		return nil
	}
	// etcd's default raft timings (100 ms ticks, a 1 s election
	// timeout), as the one-member etcd of the lab: the faster timings of
	// the fault tests would risk elections on a loaded machine.
	return startEtcd3(ctx, s, servers.EtcdOptions{Members: etcd3Members, NoProxy: true, TickMs: 100, ElectionMs: 1000})
}

// startEtcd3 starts the members of s in process.
func startEtcd3(ctx context.Context, s *Server, opts servers.EtcdOptions) error {
	c, err := servers.StartEtcdCluster(ctx, opts)
	if err != nil {
		return err
	}
	s.URL, s.Version, s.stop, s.etcd = strings.Join(c.AllEndpoints(), ","), servers.EtcdVersion(), c.Close, c
	s.Where = fmt.Sprintf("etcd %s, three members in process (go.etcd.io/etcd/server/v3/embed) at %s, leader m%d at start", s.Version, s.URL, c.Leader())
	return nil
}

// EtcdCluster returns the members of an etcd3 of StartOwn's, for faults
// (leader loss, a partition); nil for any other server.
func (s *Server) EtcdCluster() *servers.EtcdCluster { return s.etcd }

// etcd3Driver is a client of the three members: of every one (clientv3
// balances requests over them round robin), or of one
// (ClientOptions.Pinned).
type etcd3Driver struct {
	*etcdDriver
	endpoints []string
}

func connectEtcd3(s *Server, opts ClientOptions) (*etcd3Driver, error) {
	eps := strings.Split(s.URL, ",")
	if opts.Via != "" {
		return nil, errors.New("a proxy in front of three members is not supported")
	}
	if opts.Pinned {
		eps = []string{eps[opts.Member%len(eps)]}
	}
	cli, err := EtcdClient(opts.DialTimeout, eps...)
	if err != nil {
		return nil, err
	}
	return &etcd3Driver{etcdDriver: &etcdDriver{cli: cli}, endpoints: eps}, nil
}

func (d *etcd3Driver) followerStore(ns string) (cas.Store, error) {
	return etcdcas.New(d.cli, etcdcas.Config{Prefix: ns + "/", SerializableReads: true})
}

func (d *etcd3Driver) catchUp(context.Context) error { return nil }

func (d *etcd3Driver) describe(context.Context) (string, string, error) {
	who := "clients talk to every member (clientv3's round-robin balancing, request by request)"
	if len(d.endpoints) == 1 {
		who = "this process's client talks to member " + d.endpoints[0] + " only"
	}
	return "", "UnsafeNoFsync on every member: writes are not fsynced (throwaway data); " + who, nil
}

// --- PostgreSQL with a streaming replica ---

// reachReplica finds a primary and its replica (EnvPostgresReplicaURL
// with EnvPostgresPrimaryURL or EnvPostgresURL), or starts both with
// scripts/servers/postgres.sh --replica.
func (e Env) reachReplica(ctx context.Context) (*Server, error) {
	s := &Server{System: PostgresReplica, EnvVar: EnvPostgresReplicaURL}
	if s.ReplicaURL = e.getenv(EnvPostgresReplicaURL); s.ReplicaURL != "" {
		primaryVar := EnvPostgresPrimaryURL
		if s.URL = e.getenv(primaryVar); s.URL == "" {
			primaryVar = EnvPostgresURL
			s.URL = e.getenv(primaryVar)
		}
		if s.URL == "" {
			return nil, fmt.Errorf("%s is set, but %s, its primary, is not", EnvPostgresReplicaURL, EnvPostgresURL)
		}
		s.Where = fmt.Sprintf("primary at %s (%s), streaming replica at %s (%s)", redact(s.URL), primaryVar, redact(s.ReplicaURL), EnvPostgresReplicaURL)
		return s, nil
	}
	root, err := e.mayStart("postgres-replica", EnvPostgresReplicaURL, "a throwaway primary and replica with scripts/servers/postgres.sh --replica")
	if err != nil {
		return nil, err
	}
	script, err := servers.StartScriptArgs(ctx, root, "postgres", EnvPostgresURL, servers.PostgresBinary, e.Log, "--replica")
	if err != nil {
		return nil, fmt.Errorf("%s is not set, and %w", EnvPostgresReplicaURL, err)
	}
	s.URL, s.ReplicaURL, s.script = script.URL, script.Exports[EnvPostgresReplicaURL], script
	if s.ReplicaURL == "" {
		_ = script.Stop(ctx)
		return nil, fmt.Errorf("scripts/servers/postgres.sh --replica exported no %s", EnvPostgresReplicaURL)
	}
	s.Where = fmt.Sprintf("primary at %s, streaming replica at %s, started with scripts/servers/postgres.sh --replica", redact(s.URL), redact(s.ReplicaURL))
	return s, nil
}

// pgReplicaDriver is a pool on the primary and one on its replica, both
// working in the client's schema.
type pgReplicaDriver struct {
	*pgDriver
	replica *pgxpool.Pool
}

func connectPostgresReplica(ctx context.Context, s *Server, opts ClientOptions) (_ *pgReplicaDriver, err error) {
	if opts.Via != "" {
		return nil, errors.New("a proxy in front of a primary and its replica is not supported")
	}
	primary, err := connectPostgres(ctx, s, opts)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			primary.pool.Close()
		}
	}()
	cfg, err := pgConfig(s.ReplicaURL, EnvPostgresReplicaURL, opts)
	if err != nil {
		return nil, err
	}
	replica, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	return &pgReplicaDriver{pgDriver: primary, replica: replica}, nil
}

func (d *pgReplicaDriver) followerStore(ns string) (cas.Store, error) {
	return pgcas.New(d.pool, pgcas.Config{Table: ns, Schema: d.scope, ReadPool: d.replica})
}

// create makes the table on the primary and waits until the replica has
// it: a read of a table the replica has not replayed yet fails.
func (d *pgReplicaDriver) create(ctx context.Context, ns string) error {
	if err := d.pgDriver.create(ctx, ns); err != nil {
		return err
	}
	return d.catchUp(ctx)
}

func (d *pgReplicaDriver) catchUp(ctx context.Context) error {
	return servers.WaitReplayed(ctx, d.pool, d.replica)
}

func (d *pgReplicaDriver) describe(ctx context.Context) (string, string, error) {
	version, durable, err := d.pgDriver.describe(ctx)
	if err != nil {
		return "", "", err
	}
	var standby bool
	if err := d.replica.QueryRow(ctx, `SELECT pg_is_in_recovery()`).Scan(&standby); err != nil {
		return "", "", fmt.Errorf("the replica: %w", err)
	}
	if !standby {
		return "", "", fmt.Errorf("%s names a server that is not a standby (pg_is_in_recovery() is false)", EnvPostgresReplicaURL)
	}
	var walWriterDelay string
	_ = d.pool.QueryRow(ctx, `SELECT current_setting('wal_writer_delay')`).Scan(&walWriterDelay)
	durable += fmt.Sprintf(" on the primary; the replica streams asynchronously (wal_writer_delay=%s on the primary: with synchronous_commit=off a commit reaches the replica after up to that)", walWriterDelay)
	return version + " with a streaming hot standby", durable, nil
}

func (d *pgReplicaDriver) native(c *Client) { c.pg, c.pgReplica = d.pool, d.replica }

func (d *pgReplicaDriver) close() error {
	d.replica.Close()
	return d.pgDriver.close()
}
