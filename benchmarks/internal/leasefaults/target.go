package leasefaults

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/occkit/occkit/benchmarks/internal/backends"
	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/hybrid"
)

// Target is what the lease faults run against: a lease lock and a fenced
// store on one backend. Open builds it for the systems of
// benchmarks/internal/backends; any other can be described the same way.
// A Target is a plain value; its functions and store must be safe for
// concurrent use.
type Target struct {
	// Name names the backend in results ("memory", "redis", ...).
	Name string
	// Store holds the counters. Writes go straight to the server: the
	// lease faults need no network fault in between.
	Store cas.FencedStore
	// Direct reads the counters at the end of a run; nil means Store.
	Direct cas.Store
	// NewLocker returns the Locker of one worker, which stands for one
	// process (its own session where the locker has one). Run calls it
	// once per worker and run, and closes the lockers that have a
	// Close() error method at the end of the run.
	NewLocker func(ctx context.Context) (hybrid.Locker, error)
	// TTL is how long a grant lasts once its holder stops renewing it.
	TTL time.Duration
	// RunsOut says that a grant ends on the server within TTL by itself
	// once the context given to Acquire ends (its renewals stop, as a
	// stopped process's would).
	RunsOut bool
	// Expire ends lease, the current grant of key, on the server now, as
	// its expiry would; nil if the backend cannot. A paused holder's grant
	// is ended with it when it does not run out by itself; a clock jump
	// uses it whenever it is set.
	Expire func(ctx context.Context, key string, lease hybrid.Lease) error
	// ExpireNote says what Expire does, for Result.Expiry.
	ExpireNote string
	// Retryable, if set, classifies the store's transient errors for
	// occ.WithRetryable.
	Retryable func(error) bool
}

// Open returns the Target of data's system: a store over namespace ns,
// created here (data.Drop(ns) removes it and the lockers' state), and the
// system's lease lock from locks, a client of the same server (data
// itself, or connections of their own so that lock waiters cannot starve
// the store). ttl is the grants' TTL where the system lets it be chosen
// (Redis, at least rediscas.MinLockTTL; the in-process locker of memory
// and DynamoDB, which have no lock service); etcd's is 1 s, its least,
// and a PostgreSQL session lock has none.
//
// Where the system's grants run out by themselves (memory, Redis) a
// paused holder loses its grant on time; Expire ends a grant early as its
// expiry would: Redis deletes the lock key if it still holds the grant;
// etcd revokes the holder's session lease (kept alive by the client in
// the background, which a pause inside one goroutine does not stop);
// PostgreSQL terminates the holder's backend, which frees its session
// lock, as the server does to a client paused long enough for a TCP
// keepalive or idle timeout to drop its connection.
func Open(ctx context.Context, data, locks *backends.Client, ns string, ttl time.Duration) (Target, error) {
	s, err := data.CreateStore(ctx, ns)
	if err != nil {
		return Target{}, err
	}
	fs, ok := s.(cas.FencedStore)
	if !ok {
		return Target{}, fmt.Errorf("leasefaults: the %s store (%T) checks no fencing token", data.System, s)
	}
	b := Target{Name: data.System, Store: fs, TTL: ttl, RunsOut: true, Retryable: data.Spec().Retryable}
	cfg := backends.LockerConfig{Name: ns, TTL: ttl}
	perWorker := false // a Locker per worker, standing for a process of its own
	switch data.System {
	case backends.Redis:
		perWorker = true
		cli, key := locks.Redis(), backends.RedisLockPrefix(ns)
		b.Expire = func(ctx context.Context, k string, lease hybrid.Lease) error {
			return redisExpireScript.Run(ctx, cli, []string{key + "{" + k + "}"}, lease.Token()).Err()
		}
		b.ExpireNote = "the lock key was deleted on the server, as its expiry would"
	case backends.Etcd:
		perWorker = true
		cfg.TTL = time.Second
		b.TTL, b.RunsOut = cfg.TTL, false
		b.Expire = etcdExpire(locks.Etcd(), backends.EtcdLockPrefix(ns))
		b.ExpireNote = "the holder's etcd session lease was revoked, as its expiry would"
	case backends.Postgres:
		cfg.CheckInterval = 50 * time.Millisecond
		b.TTL, b.RunsOut = 0, false
		pool, seq := data.Postgres(), pgx.Identifier{backends.PostgresSequence(ns)}.Sanitize()
		b.Expire = func(ctx context.Context, key string, _ hybrid.Lease) error {
			if _, err := pool.Exec(ctx, pgTerminate, key, seq); err != nil {
				return fmt.Errorf("leasefaults: terminating the holder of %q: %w", key, err)
			}
			return nil
		}
		b.ExpireNote = "the holder's backend was terminated (pg_terminate_backend), which frees its session lock"
	}
	// One now: it checks the configuration and creates what the locks
	// need (a token sequence).
	shared, closeShared, err := locks.NewLocker(ctx, cfg)
	if err != nil {
		return Target{}, err
	}
	if perWorker {
		if err := closeShared(); err != nil {
			return Target{}, err
		}
	}
	b.NewLocker = func(ctx context.Context) (hybrid.Locker, error) {
		if !perWorker {
			// Shared by every worker and run: Run must not close it
			// (pgcas's Locker has a Close, which ends it for good).
			return sharedLocker{shared}, nil
		}
		l, _, err := locks.NewLocker(ctx, cfg)
		return l, err
	}
	return b, nil
}

// sharedLocker is a Locker shared by the runs of a backend, without the
// Close of the Locker it wraps.
type sharedLocker struct{ hybrid.Locker }

// redisExpireScript deletes the lock key KEYS[1] if it holds the grant
// with token ARGV[1] (its value is "<token>:<holder>").
var redisExpireScript = redis.NewScript(`
local cur = redis.call('GET', KEYS[1])
if cur and string.sub(cur, 1, string.len(ARGV[1]) + 1) == ARGV[1] .. ':' then
  return redis.call('DEL', KEYS[1])
end
return 0
`)

// etcdExpire revokes the session lease of a grant: the key
// prefix/<key>\x00... created at the revision that is its token, attached
// to the session lease.
func etcdExpire(cli *clientv3.Client, prefix string) func(ctx context.Context, key string, lease hybrid.Lease) error {
	return func(ctx context.Context, key string, lease hybrid.Lease) error {
		// A grant that is gone already is not an error.
		if _, err := backends.RevokeEtcdGrant(ctx, cli, prefix, key, int64(lease.Token())); err != nil {
			return fmt.Errorf("leasefaults: revoking the session of %q: %w", key, err)
		}
		return nil
	}
}

// pgTerminate ends the backend holding the session advisory lock of $1
// (pgcas's lock key: hashtextextended(key, OID of the token sequence $2);
// pg_locks shows a bigint key as classid, objid and objsubid 1).
const pgTerminate = `SELECT count(pg_terminate_backend(pid)) FROM pg_locks
WHERE locktype = 'advisory' AND granted AND objsubid = 1
  AND ((classid::bigint << 32) | objid::bigint) = hashtextextended($1, $2::regclass::oid::bigint)`
