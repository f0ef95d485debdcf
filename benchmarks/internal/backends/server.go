package backends

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/occkit/occkit/adapters/memcas"
	"github.com/occkit/occkit/internal/faultproxy"
	"github.com/occkit/occkit/internal/servers"
)

// The systems.
const (
	Memory    = "memory"
	Postgres  = "postgres"
	Redis     = "redis"
	Etcd      = "etcd"
	DynamoDB  = "dynamodb"
	MySQL     = "mysql"
	SQLite    = "sqlite"
	ZooKeeper = "zookeeper"

	// RedisCluster is a Redis Cluster (3 masters, 3 replicas, from
	// scripts/servers/redis-cluster.sh): a store's keys spread over the
	// hash slots (rediscas with a prefix without a hash tag).
	RedisCluster = "redis-cluster"
	// Etcd3 is etcd with three members in process; clients talk to every
	// member (clientv3 balances requests round robin), or to one
	// (ClientOptions.Pinned).
	Etcd3 = "etcd3"
	// PostgresReplica is a PostgreSQL primary with a streaming replica
	// (scripts/servers/postgres.sh --replica): stores write to the
	// primary; Client.FollowerStore reads from the replica.
	PostgresReplica = "postgres-replica"

	// Redlock is RedlockServers independent Redis servers, which hold no
	// data: they lend their lock (Client.Redlock) to the other systems.
	// ZooKeeper too holds no data (Client.ZooKeeperAddr).
	Redlock = "redlock"
)

// RedlockServers is how many Redis servers Env.Reach starts for Redlock:
// Redlock's usual five (a lock needs three of them).
const RedlockServers = 5

// ErrUnavailable marks a system whose server can neither be reached nor
// started here; the error says why.
var ErrUnavailable = errors.New("backends: unavailable")

// The environment variables that name servers. The in-process ones
// (etcd, minidyn, SQLite's directory) are set for child processes that
// must reach their parent's server.
const (
	EnvPostgresURL   = "OCCKIT_PG_URL"
	EnvRedisURL      = "OCCKIT_REDIS_URL"
	EnvMySQLDSN      = "OCCKIT_MYSQL_DSN"
	EnvZooKeeperAddr = "OCCKIT_ZK_ADDR"
	EnvDynaliteURL   = servers.EnvDynaliteURL
	EnvEtcdURL       = "OCCKIT_LAB_ETCD_URL"
	EnvMinidynURL    = "OCCKIT_LAB_MINIDYN_URL"
	EnvSQLiteDir     = "OCCKIT_LAB_SQLITE_DIR"

	// EnvRedisClusterURL names a Redis Cluster (redis.ParseClusterURL's
	// form: redis://host:port?addr=host2:port2&addr=...).
	EnvRedisClusterURL = "OCCKIT_REDIS_CLUSTER_URL"
	// EnvPostgresReplicaURL names a hot standby streaming from the
	// server of EnvPostgresURL (or of EnvPostgresPrimaryURL when set).
	EnvPostgresReplicaURL = "OCCKIT_PG_REPLICA_URL"
	// EnvPostgresPrimaryURL names the primary of EnvPostgresReplicaURL
	// for a child process, whose EnvPostgresURL may name the postgres
	// backend's other server.
	EnvPostgresPrimaryURL = "OCCKIT_LAB_PG_PRIMARY_URL"
	// EnvEtcd3URLs names the members of the parent process's etcd3
	// (client URLs, comma-separated).
	EnvEtcd3URLs = "OCCKIT_LAB_ETCD3_URLS"
	// EnvRedlockURLs names Redlock's Redis servers (Redis URLs,
	// comma-separated; Redlock wants an odd number of independent
	// servers).
	EnvRedlockURLs = "OCCKIT_REDLOCK_URLS"
)

// scripts are the systems started by scripts/servers/<script>.sh.
var scripts = map[string]struct{ script, envVar, binary string }{
	Postgres: {"postgres", EnvPostgresURL, servers.PostgresBinary},
	Redis:    {"redis", EnvRedisURL, servers.RedisBinary},
	MySQL:    {"mariadb", EnvMySQLDSN, servers.MariaDBBinary},
	// 3 masters + 3 replicas.
	RedisCluster: {"redis-cluster", EnvRedisClusterURL, servers.RedisBinary},
}

// Env says how servers are reached or started. The zero value reaches
// servers through os.Getenv only.
type Env struct {
	// RepoRoot is the occkit checkout, for scripts/servers/*.sh. Empty:
	// found from the working directory.
	RepoRoot string
	// StartServers allows starting throwaway servers from installed
	// binaries (never installing anything). Servers in process (etcd,
	// minidyn, SQLite) are started whatever it says.
	StartServers bool
	// Log receives the scripts' messages and a line per server started
	// (nothing if nil).
	Log io.Writer
	// Getenv reads the environment (os.Getenv if nil).
	Getenv func(string) string
}

func (e Env) getenv(k string) string {
	if e.Getenv != nil {
		return e.Getenv(k)
	}
	return os.Getenv(k)
}

// Root returns RepoRoot, or the checkout above the working directory.
func (e Env) Root() (string, error) {
	if e.RepoRoot != "" {
		return e.RepoRoot, nil
	}
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	return servers.RepoRoot(wd)
}

// Server is a system's server, reached or started.
type Server struct {
	// System is the system's name (Postgres, ...).
	System string
	// URL is how clients reach the server itself: a postgres:// or
	// redis:// URL, a go-sql-driver/mysql DSN, etcd's or the DynamoDB
	// server's http:// URL, ZooKeeper's host:port, SQLite's directory;
	// empty for memory. For the clusters: the Redis Cluster's URL
	// (EnvRedisClusterURL's form), the etcd3 members' client URLs
	// comma-separated, the primary's URL of postgres-replica.
	URL string
	// ReplicaURL is postgres-replica's streaming replica's URL.
	ReplicaURL string
	// EnvVar is the environment variable that names this server to
	// Env.Reach (in a child process, say); empty for memory.
	EnvVar string
	// Where says what the server is and who started it, for reports.
	Where string
	// Version is the server's version where it is known without asking
	// it (in-process servers); Client.Describe asks the others.
	Version string
	// MultiKeyUnsupported says why the server cannot commit several keys
	// atomically (dynalite has no TransactWriteItems), or is "".
	MultiKeyUnsupported string

	script  *servers.Script   // restartable when the script says so
	scripts []*servers.Script // Redlock's, when started here
	etcd    *servers.EtcdCluster
	stop    func() // an in-process server's
	memory  *memoryStores
	closeMu sync.Mutex
}

// Reach returns the server of system named by its environment variable,
// or starts one (Server.Close stops it): with its script when
// StartServers is set, or in process. An error wraps ErrUnavailable.
func (e Env) Reach(ctx context.Context, system string) (*Server, error) {
	s, err := e.reach(ctx, system)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return s, nil
}

func (e Env) reach(ctx context.Context, system string) (*Server, error) {
	s := &Server{System: system}
	switch system {
	case PostgresReplica:
		return e.reachReplica(ctx)
	case Redlock:
		return e.reachRedlock(ctx)
	}
	if sc, ok := scripts[system]; ok {
		s.EnvVar = sc.envVar
		if s.URL = e.getenv(sc.envVar); s.URL != "" {
			s.Where = "at " + redact(s.URL) + " (" + sc.envVar + ")"
			return s, nil
		}
		if _, err := e.mayStart(sc.script, sc.envVar, "a throwaway server with scripts/servers/"+sc.script+".sh"); err != nil {
			return nil, err
		}
		started, err := e.start(ctx, system)
		if err != nil {
			return nil, fmt.Errorf("%s is not set, and %w", sc.envVar, err)
		}
		return started, nil
	}
	switch system {
	case Memory:
		s.Where, s.memory = "in process (adapters/memcas)", &memoryStores{m: map[string]*memcas.Store{}}
	case Etcd:
		s.EnvVar = EnvEtcdURL
		if s.URL = e.getenv(EnvEtcdURL); s.URL != "" {
			s.Where = "etcd at " + s.URL + ", the parent process's member"
			break
		}
		srv, err := servers.StartEtcd(ctx)
		if err != nil {
			return nil, err
		}
		s.URL, s.Version, s.stop = srv.Endpoint, srv.Version, srv.Close
		s.Where = fmt.Sprintf("etcd %s, one member in process (go.etcd.io/etcd/server/v3/embed) at %s", srv.Version, srv.Endpoint)
	case Etcd3:
		if err := e.reachEtcd3(ctx, s); err != nil {
			return nil, err
		}
	case DynamoDB:
		if s.URL = e.getenv(EnvMinidynURL); s.URL != "" {
			s.EnvVar, s.Where = EnvMinidynURL, "minidyn at "+s.URL+", the parent process's"
		} else if s.URL = e.getenv(EnvDynaliteURL); s.URL != "" {
			s.EnvVar, s.Where = EnvDynaliteURL, "dynalite at "+redact(s.URL)+" ("+EnvDynaliteURL+")"
			s.MultiKeyUnsupported = "dynalite has no TransactWriteItems, so no atomic multi-key commit (run without " + EnvDynaliteURL + " for minidyn, which has it)"
		} else {
			srv := servers.StartMinidyn()
			s.URL, s.EnvVar, s.stop = srv.URL, EnvMinidynURL, srv.Close
			s.Where = "minidyn's DynamoDB HTTP server in process at " + srv.URL
		}
	case SQLite:
		s.EnvVar = EnvSQLiteDir
		if s.URL = e.getenv(EnvSQLiteDir); s.URL != "" {
			s.Where = "the parent process's file in " + s.URL
			break
		}
		dir, err := os.MkdirTemp("", "occbench-sqlite-")
		if err != nil {
			return nil, err
		}
		s.URL, s.stop = dir, func() { _ = os.RemoveAll(dir) }
		s.Where = "file " + filepath.Join(dir, sqliteFile) + " in a temporary directory"
	case ZooKeeper:
		s.EnvVar = EnvZooKeeperAddr
		if s.URL = e.getenv(EnvZooKeeperAddr); s.URL != "" {
			s.Where = "at " + s.URL + " (" + EnvZooKeeperAddr + ")"
			break
		}
		if !e.StartServers {
			return nil, fmt.Errorf("%s is not set, and starting servers is off", EnvZooKeeperAddr)
		}
		srv, err := servers.StartZooKeeper(ctx)
		if errors.Is(err, servers.ErrZooKeeperNotInstalled) {
			return nil, fmt.Errorf("%s is not set, and ZooKeeper is not installed (apt-get install zookeeper; servers are never installed here)", EnvZooKeeperAddr)
		}
		if err != nil {
			return nil, err
		}
		s.URL, s.Version, s.stop = srv.Addr, srv.Version, srv.Stop
		s.Where = fmt.Sprintf("standalone at %s (Debian's package), admin server off, four-letter words off", srv.Addr)
	default:
		return nil, fmt.Errorf("unknown system %q", system)
	}
	if s.stop != nil && e.Log != nil {
		fmt.Fprintf(e.Log, "%s: started %s\n", system, s.Where)
	}
	return s, nil
}

// mayStart returns the checkout's root when e may start what envVar does
// not name (starting, logged as name's), or says why it may not.
func (e Env) mayStart(name, envVar, starting string) (string, error) {
	if !e.StartServers {
		return "", fmt.Errorf("%s is not set, and starting servers is off", envVar)
	}
	root, err := e.Root()
	if err != nil {
		return "", fmt.Errorf("%s is not set, and scripts/servers cannot be found: %w", envVar, err)
	}
	if e.Log != nil {
		fmt.Fprintf(e.Log, "%s: %s is not set: starting %s\n", name, envVar, starting)
	}
	return root, nil
}

// StartOwn starts a server of system for the caller alone, whatever the
// environment names (the environment's server may be shared, and is never
// disrupted): a server that Restart can restart (PostgreSQL, Redis,
// MySQL, with their scripts), or a cluster to disrupt: a Redis Cluster
// (scripts/servers/redis-cluster.sh), or etcd3's three members in process
// with fast raft timings (ticks of 50 ms, elections after 500 ms: a lost
// leader is replaced within about a second) and each member's client port
// behind a proxy, so that a hard-stopped member is gone for its clients at
// once (Server.EtcdCluster). It fails, matching servers.ErrNotInstalled,
// when the server is not installed, and with servers.ErrNoRestart for a
// system that cannot be restarted.
func (e Env) StartOwn(ctx context.Context, system string) (*Server, error) {
	switch system {
	case Etcd3:
		s := &Server{System: Etcd3}
		if err := startEtcd3(ctx, s, servers.EtcdOptions{Members: etcd3Members, TickMs: 50, ElectionMs: 500}); err != nil {
			return nil, err
		}
		return s, nil
	case RedisCluster:
		return e.start(ctx, system)
	}
	s, err := e.start(ctx, system)
	if err != nil {
		return nil, err
	}
	if !s.script.CanRestart() {
		_ = s.Close(context.Background())
		return nil, fmt.Errorf("%s: %w", system, servers.ErrNoRestart)
	}
	return s, nil
}

// start starts a server of system with its script.
func (e Env) start(ctx context.Context, system string) (*Server, error) {
	sc, ok := scripts[system]
	if !ok {
		return nil, fmt.Errorf("%s: %w", system, servers.ErrNoRestart)
	}
	root, err := e.Root()
	if err != nil {
		return nil, fmt.Errorf("scripts/servers/%s.sh cannot be found: %w", sc.script, err)
	}
	script, err := servers.StartScript(ctx, root, sc.script, sc.envVar, sc.binary, e.Log)
	if err != nil {
		return nil, err
	}
	return &Server{System: system, URL: script.URL, EnvVar: sc.envVar, script: script,
		Where: "at " + redact(script.URL) + ", started with scripts/servers/" + sc.script + ".sh"}, nil
}

// Started reports whether the server was started here (and Close stops
// it), rather than named by the environment.
func (s *Server) Started() bool { return s.script != nil || s.stop != nil || s.scripts != nil }

// Restart stops the server, keeps it down for down, and starts it again
// with its data (servers.Script.Restart); only a server of StartOwn's can.
func (s *Server) Restart(ctx context.Context, down time.Duration) error {
	if s.script == nil {
		return servers.ErrNoRestart
	}
	return s.script.Restart(ctx, down)
}

// Env returns the environment (NAME=value) that makes Env.Reach in
// another process (a --procs child) reach this server; nil for memory.
func (s *Server) Env() []string {
	switch {
	case s.EnvVar == "":
		return nil
	case s.System == PostgresReplica:
		return []string{EnvPostgresPrimaryURL + "=" + s.URL, EnvPostgresReplicaURL + "=" + s.ReplicaURL}
	}
	return []string{s.EnvVar + "=" + s.URL}
}

// Addr returns the host:port the server listens on, for a proxy.
func (s *Server) Addr() (string, error) {
	switch s.System {
	case Memory, SQLite:
		return "", fmt.Errorf("%s runs in process: no address", s.System)
	case RedisCluster, Etcd3, PostgresReplica, Redlock:
		// A proxy per node would not do for Redis Cluster either: its
		// nodes send clients to each other by their own addresses
		// (MOVED, CLUSTER SLOTS).
		return "", fmt.Errorf("%s is several servers: no single address to put a proxy in front of", s.System)
	case ZooKeeper:
		return s.URL, nil
	case MySQL:
		cfg, err := mysql.ParseDSN(s.URL)
		if err != nil {
			return "", err
		}
		return cfg.Addr, nil
	}
	p, err := url.Parse(s.URL)
	if err != nil {
		return "", err
	}
	if p.Port() == "" {
		return "", fmt.Errorf("no port in %s", p.Redacted())
	}
	return p.Host, nil
}

// Proxy returns a new fault proxy in front of the server, holding every
// byte for delay in each direction (faultproxy.Proxy.SetPathDelay). Clients
// reach the server through it with ClientOptions.Via = its Addr(); the
// caller closes it.
func (s *Server) Proxy(delay time.Duration) (*faultproxy.Proxy, error) {
	addr, err := s.Addr()
	if err != nil {
		return nil, err
	}
	return newProxy(addr, delay)
}

// newProxy returns a fault proxy in front of hostport that holds every
// byte for delay in each direction.
func newProxy(hostport string, delay time.Duration) (*faultproxy.Proxy, error) {
	p, err := faultproxy.New(hostport)
	if err != nil {
		return nil, fmt.Errorf("proxy for %s: %w", hostport, err)
	}
	p.SetPathDelay(delay)
	return p, nil
}

// Close stops the server if it was started here; it does nothing to a
// server named by the environment. Close its clients first.
func (s *Server) Close(ctx context.Context) error {
	s.closeMu.Lock()
	defer s.closeMu.Unlock()
	if s.stop != nil {
		s.stop()
		s.stop = nil
	}
	// Side by side: each stop waits for its server to be gone (about 2 s
	// here, until the orphaned process is reaped).
	errs := make([]error, len(s.scripts)+1)
	var wg sync.WaitGroup
	for i, p := range append(s.scripts, s.script) {
		if p != nil {
			wg.Go(func() { errs[i] = p.Stop(ctx) })
		}
	}
	wg.Wait()
	s.script, s.scripts = nil, nil
	return errors.Join(errs...)
}

// redact drops a password from a URL for reports; a DSN (no scheme) is
// shown without its user and password.
func redact(u string) string {
	if !strings.Contains(u, "://") {
		if at := strings.LastIndex(u, "@"); at >= 0 {
			return u[at+1:]
		}
		return u
	}
	p, err := url.Parse(u)
	if err != nil {
		return "(unparsable URL)"
	}
	return p.Redacted()
}
