package backends

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/hybrid"
	"github.com/occkit/occkit/internal/faultproxy"
)

// ClientOptions configure a client. The zero value connects to the server
// itself with the driver's default pool.
type ClientOptions struct {
	// Via is the host:port to dial instead of the server's own (a proxy
	// in front of it, Server.Proxy); empty: the server itself.
	Via string
	// Proxy puts a fault proxy (Server.Proxy) holding every byte for
	// Delay in each direction in front of each server the client talks
	// to (one per server, shared by the client's connections; closed with
	// the client): a round trip costs at least 2×Delay more, as over a
	// longer network path. Systems that run in process (memory, SQLite)
	// ignore it; it fails on a cluster.
	Proxy bool
	Delay time.Duration
	// Conns is the most connections the client keeps open (0: the
	// driver's default).
	Conns int
	// DialTimeout bounds dialing (0: the driver's default).
	DialTimeout time.Duration
	// Scope is the PostgreSQL schema or MySQL database the client works
	// in (empty: the server's default); other systems ignore it.
	Scope string
	// CreateScope creates Scope first; Close drops it, and everything in
	// it.
	CreateScope bool
	// Pinned makes an etcd3 client talk to member Member (modulo the
	// members) only, as a service configured with one endpoint would;
	// otherwise it talks to every member, clientv3 balancing its
	// requests over them round robin. Other systems ignore it.
	Pinned bool
	Member int
	// Locker, when set, makes the client's shared lease lock (NewLocker
	// with this configuration) as Connect opens the client: Client.Locker
	// returns it, Close closes it.
	Locker *LockerConfig
}

// Client is a connection pool to one server. Its stores, lockers and
// native client stay valid until Close.
type Client struct {
	// System is the server's system.
	System string
	d      driver
	spec   Spec
	server *Server
	// scope is ClientOptions.Scope; ownScope: the client created it.
	scope    string
	ownScope bool
	// locker is the shared lease lock of ClientOptions.Locker.
	locker      hybrid.Locker
	closeLocker func() error
	// The native client, for checks (one of them is set; pgReplica
	// beside pg on postgres-replica).
	pg        *pgxpool.Pool
	pgReplica *pgxpool.Pool
	rdb       *redis.Client
	rcl       *redis.ClusterClient
	etcd      *clientv3.Client
	dyn       *dynamodb.Client
	db        *sql.DB
	redlock   []*redis.Client
	zkAddr    string
	// proxies are the proxies of ClientOptions.Proxy.
	proxies []*faultproxy.Proxy
}

// driver is a system's part of a Client.
type driver interface {
	// store returns a store over namespace ns.
	store(ns string) (cas.Store, error)
	// create makes what a store over ns needs (a table).
	create(ctx context.Context, ns string) error
	// drop removes ns's data and its locker's state (table, keys,
	// token sequence).
	drop(ctx context.Context, ns string) error
	// locker returns the system's lease lock, named cfg.Name, and what
	// closes it.
	locker(ctx context.Context, cfg LockerConfig) (hybrid.Locker, func() error, error)
	// describe returns the server's version and durability settings.
	describe(ctx context.Context) (version, durability string, err error)
	dropScope(ctx context.Context) error
	close() error
	// native sets the client's native client (Client.Postgres, ...).
	native(c *Client)
}

// Connect opens a client of the server. It connects when first used
// (except to create ClientOptions.Scope and ClientOptions.Locker):
// Describe checks that the server answers.
func (s *Server) Connect(ctx context.Context, opts ClientOptions) (_ *Client, err error) {
	spec, _ := SpecOf(s.System)
	c := &Client{System: s.System, spec: spec, server: s, scope: opts.Scope, ownScope: opts.CreateScope && opts.Scope != ""}
	defer func() {
		if err != nil {
			c.closeProxies()
		}
	}()
	if opts.Proxy && s.System != Memory && s.System != SQLite && s.System != Redlock {
		addr, err := s.Addr()
		if err != nil {
			return nil, err
		}
		if opts.Via, err = c.proxy(addr, opts.Delay); err != nil {
			return nil, err
		}
	}
	var d driver
	switch s.System {
	case Memory:
		d = memoryDriver{s.memory}
	case Postgres:
		d, err = connectPostgres(ctx, s, opts)
	case Redis:
		d, err = connectRedis(s, opts)
	case Etcd:
		d, err = connectEtcd(s, opts)
	case DynamoDB:
		d, err = connectDynamo(s, opts)
	case MySQL:
		d, err = connectMySQL(ctx, s, opts)
	case SQLite:
		d, err = connectSQLite(s, opts)
	case RedisCluster:
		d, err = connectRedisCluster(s, opts)
	case Etcd3:
		d, err = connectEtcd3(s, opts)
	case PostgresReplica:
		d, err = connectPostgresReplica(ctx, s, opts)
	case ZooKeeper:
		d = connectZooKeeper(c, s, opts)
	case Redlock:
		d, err = connectRedlock(c, s, opts)
	default:
		err = fmt.Errorf("%s has no cas store", s.System)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", s.System, err)
	}
	c.d = d
	d.native(c)
	if opts.Locker != nil {
		if c.locker, c.closeLocker, err = c.NewLocker(ctx, *opts.Locker); err != nil {
			_ = c.Close()
			return nil, fmt.Errorf("%s: %w", s.System, err)
		}
	}
	return c, nil
}

// Server returns the server the client connects to.
func (c *Client) Server() *Server { return c.server }

// Spec returns the spec of the client's system.
func (c *Client) Spec() Spec { return c.spec }

// Env returns the environment (NAME=value) that makes another process (a
// --procs child) reach the same server and work in the same scope: the
// server's Env, and the scope in Spec.ScopeEnv; nil for memory.
func (c *Client) Env() []string {
	env := c.server.Env()
	if env != nil && c.spec.ScopeEnv != "" && c.scope != "" {
		env = append(env, c.spec.ScopeEnv+"="+c.scope)
	}
	return env
}

// Locker returns the client's shared lease lock (ClientOptions.Locker),
// or nil.
func (c *Client) Locker() hybrid.Locker { return c.locker }

// proxy returns the address of a new proxy in front of hostport, closed
// with the client.
func (c *Client) proxy(hostport string, delay time.Duration) (string, error) {
	p, err := newProxy(hostport, delay)
	if err != nil {
		return "", err
	}
	c.proxies = append(c.proxies, p)
	return p.Addr(), nil
}

func (c *Client) closeProxies() {
	for _, p := range c.proxies {
		_ = p.Close()
	}
	c.proxies = nil
}

// Store returns a store over namespace ns (a table, or a key prefix),
// which CreateStore made (here or in another process).
func (c *Client) Store(ns string) (cas.Store, error) { return c.d.store(ns) }

// CreateStore makes a fresh store over namespace ns (lower-case letters,
// digits and '_'), creating its table where the system has tables. Drop
// removes it.
func (c *Client) CreateStore(ctx context.Context, ns string) (cas.Store, error) {
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := c.d.create(cctx, ns); err != nil {
		return nil, err
	}
	return c.d.store(ns)
}

// Drop removes the data of namespace ns, and the state of the locker
// named ns (30 s at most).
func (c *Client) Drop(ctx context.Context, ns string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	return c.d.drop(ctx, ns)
}

// LockerConfig configures a locker.
type LockerConfig struct {
	// Name is the locker's namespace (lower-case letters, digits and
	// '_'): its lock keys, token sequence or token table. Drop(Name)
	// removes them.
	Name string
	// TTL is how long a grant lasts unless renewed, where the system's
	// lock has one (memory, Redis, etcd; etcd's least is 1 s).
	TTL time.Duration
	// CheckInterval is how often a PostgreSQL lease checks its session
	// (0: pgcas's default).
	CheckInterval time.Duration
}

// NewLocker returns the system's lease lock (hybrid.Locker) and the
// function that closes it: pgcas's advisory locks, rediscas's and
// etcdcas's leases, sqlcas's GET_LOCK on MySQL; on the systems without a
// lock service (memory, DynamoDB, SQLite) hybrid.NewLocalLocker, which
// serves this process only. It creates the token sequence or table it
// needs.
func (c *Client) NewLocker(ctx context.Context, cfg LockerConfig) (hybrid.Locker, func() error, error) {
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	return c.d.locker(cctx, cfg)
}

// Describe asks the server its version and durability settings, for
// reports.
func (c *Client) Describe(ctx context.Context) (version, durability string, err error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	return c.d.describe(ctx)
}

// Close closes the client's shared lease lock, drops the scope it created
// (ClientOptions.CreateScope: 30 s at most), closes its connections, and
// then its proxies.
func (c *Client) Close() error {
	defer c.closeProxies()
	var errs []error
	if c.closeLocker != nil {
		errs = append(errs, c.closeLocker())
	}
	if c.ownScope {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		errs = append(errs, c.d.dropScope(ctx))
	}
	return errors.Join(append(errs, c.d.close())...)
}

// Postgres returns the client's pool (postgres-replica: on the primary),
// or nil on another system.
func (c *Client) Postgres() *pgxpool.Pool { return c.pg }

// PostgresReplica returns postgres-replica's pool on the replica, or nil
// on another system.
func (c *Client) PostgresReplica() *pgxpool.Pool { return c.pgReplica }

// Redis returns the client's Redis client, or nil on another system.
func (c *Client) Redis() *redis.Client { return c.rdb }

// RedisCluster returns the client of a Redis Cluster, or nil on another
// system.
func (c *Client) RedisCluster() *redis.ClusterClient { return c.rcl }

// Etcd returns the client's etcd client, or nil on another system.
func (c *Client) Etcd() *clientv3.Client { return c.etcd }

// DynamoDB returns the client's DynamoDB client, or nil on another
// system.
func (c *Client) DynamoDB() *dynamodb.Client { return c.dyn }

// SQL returns the client's *sql.DB (MySQL, SQLite), or nil on another
// system.
func (c *Client) SQL() *sql.DB { return c.db }

// RedisUniversal returns the client's Redis client or Redis Cluster
// client, or nil on another system.
func (c *Client) RedisUniversal() redis.UniversalClient {
	switch {
	case c.rdb != nil:
		return c.rdb
	case c.rcl != nil:
		return c.rcl
	}
	return nil
}

// Redlock returns a client of each of Redlock's servers, in a fixed
// order, or nil on another system.
func (c *Client) Redlock() []*redis.Client { return c.redlock }

// ZooKeeperAddr returns the host:port a ZooKeeper client dials (the
// client's proxy when it has one), or "" on another system.
func (c *Client) ZooKeeperAddr() string { return c.zkAddr }

// RandomHex returns n random bytes in hex: names of scopes, runs and
// tables that no other run uses.
func RandomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
