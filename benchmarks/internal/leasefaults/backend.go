package leasefaults

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/occkit/occkit/adapters/etcdcas"
	"github.com/occkit/occkit/adapters/memcas"
	"github.com/occkit/occkit/adapters/pgcas"
	"github.com/occkit/occkit/adapters/rediscas"
	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/hybrid"
)

// Backend is a lease lock and a fenced store on one system. Memory, Redis,
// Etcd and Postgres build the four of occkit; any other can be described
// the same way. A Backend is a plain value; its functions and store must
// be safe for concurrent use.
type Backend struct {
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

// Memory is the in-process backend: hybrid.NewLocalLocker(ttl), shared by
// every worker as a lock server would be, and a memcas store. Its grants
// run out after ttl; nothing can end one early. Its locker also serves a
// fenced store that has no lock of its own (DynamoDB): copy the Backend
// and set Name, Store and Retryable.
func Memory(ttl time.Duration) Backend {
	l := hybrid.NewLocalLocker(ttl)
	return Backend{
		Name:      "memory",
		Store:     memcas.New(),
		NewLocker: func(context.Context) (hybrid.Locker, error) { return l, nil },
		TTL:       ttl,
		RunsOut:   true,
	}
}

// redisExpireScript deletes the lock key KEYS[1] if it holds the grant
// with token ARGV[1] (its value is "<token>:<holder>").
var redisExpireScript = redis.NewScript(`
local cur = redis.call('GET', KEYS[1])
if cur and string.sub(cur, 1, string.len(ARGV[1]) + 1) == ARGV[1] .. ':' then
  return redis.call('DEL', KEYS[1])
end
return 0
`)

// Redis is the Redis backend: a rediscas store under prefix and
// rediscas.Lockers with lock keys under prefix+"lock:" and the given TTL
// (at least rediscas.MinLockTTL). A grant runs out after ttl once its
// watchdog stops; Expire deletes the lock key if it still holds the grant,
// as the server would on expiring it early.
func Redis(cli redis.UniversalClient, prefix string, ttl time.Duration) (Backend, error) {
	s, err := rediscas.New(cli, rediscas.Config{Prefix: prefix})
	if err != nil {
		return Backend{}, err
	}
	lcfg := rediscas.LockerConfig{Prefix: prefix + "lock:", TTL: ttl}
	// Check the configuration now; the lock key's layout is documented
	// (rediscas.Locker): Prefix + "{" + key + "}".
	if _, err := rediscas.NewLocker(cli, lcfg); err != nil {
		return Backend{}, err
	}
	return Backend{
		Name:  "redis",
		Store: s,
		NewLocker: func(context.Context) (hybrid.Locker, error) {
			return rediscas.NewLocker(cli, lcfg)
		},
		TTL:     ttl,
		RunsOut: true,
		Expire: func(ctx context.Context, key string, lease hybrid.Lease) error {
			return redisExpireScript.Run(ctx, cli, []string{lcfg.Prefix + "{" + key + "}"}, lease.Token()).Err()
		},
		ExpireNote: "the lock key was deleted on the server, as its expiry would",
		Retryable:  rediscas.Retryable,
	}, nil
}

// Etcd is the etcd backend: an etcdcas store under prefix, and an
// etcdcas.Locker per worker (its own session lease, TTL 1 s: etcd's least)
// with lock keys under prefix+"lock/". A session lease is kept alive by
// the client in the background, which a pause inside one goroutine does
// not stop: Expire revokes the session lease of the holder's grant, as
// its expiry would once the holder's keepalives stopped.
func Etcd(cli *clientv3.Client, prefix string) (Backend, error) {
	s, err := etcdcas.New(cli, etcdcas.Config{Prefix: prefix})
	if err != nil {
		return Backend{}, err
	}
	lcfg := etcdcas.LockerConfig{Prefix: prefix + "lock/", TTL: time.Second}
	return Backend{
		Name:  "etcd",
		Store: s,
		NewLocker: func(context.Context) (hybrid.Locker, error) {
			return etcdcas.NewLocker(cli, lcfg)
		},
		TTL: lcfg.TTL,
		Expire: func(ctx context.Context, key string, lease hybrid.Lease) error {
			// The grant is the key prefix/<key>\x00... created at the
			// revision that is its token, attached to the session lease.
			resp, err := cli.Get(ctx, lcfg.Prefix+key+"\x00", clientv3.WithPrefix())
			if err != nil {
				return fmt.Errorf("leasefaults: finding the grant of %q: %w", key, err)
			}
			for _, kv := range resp.Kvs {
				if uint64(kv.CreateRevision) == lease.Token() {
					if _, err := cli.Revoke(ctx, clientv3.LeaseID(kv.Lease)); err != nil {
						return fmt.Errorf("leasefaults: revoking the session of %q: %w", key, err)
					}
					return nil
				}
			}
			return nil // the grant is gone already
		},
		ExpireNote: "the holder's etcd session lease was revoked, as its expiry would",
		Retryable:  etcdcas.Retryable,
	}, nil
}

// pgTerminate ends the backend holding the session advisory lock of $1
// (pgcas's lock key: hashtextextended(key, OID of the token sequence $2);
// pg_locks shows a bigint key as classid, objid and objsubid 1).
const pgTerminate = `SELECT count(pg_terminate_backend(pid)) FROM pg_locks
WHERE locktype = 'advisory' AND granted AND objsubid = 1
  AND ((classid::bigint << 32) | objid::bigint) = hashtextextended($1, $2::regclass::oid::bigint)`

// Postgres is the PostgreSQL backend: a pgcas store on table (created if
// missing) using pool, and a pgcas.Locker (session locks, tokens
// from pgcas.DefaultTokenSequence, created if missing, checked every 50 ms)
// on lockPool. Every waiting or holding lease pins a connection of
// lockPool: give it one per worker. Both pools must resolve the sequence
// the same way (same database and search_path), and pool's role must be
// allowed to terminate lockPool's backends.
//
// A session advisory lock has no TTL: it lasts as long as its session.
// Expire terminates the backend holding the grant (pg_terminate_backend),
// which frees it: what the server does to a client paused long enough
// for a TCP keepalive or idle timeout to drop its connection.
func Postgres(ctx context.Context, pool, lockPool *pgxpool.Pool, table string) (Backend, error) {
	if pool == nil || lockPool == nil {
		return Backend{}, errors.New("leasefaults: Postgres: nil pool")
	}
	s, err := pgcas.New(pool, pgcas.Config{Table: table})
	if err != nil {
		return Backend{}, err
	}
	if err := s.CreateTable(ctx); err != nil {
		return Backend{}, err
	}
	l, err := pgcas.NewLocker(lockPool, pgcas.LockerConfig{CheckInterval: 50 * time.Millisecond})
	if err != nil {
		return Backend{}, err
	}
	if err := l.CreateSequence(ctx); err != nil {
		return Backend{}, err
	}
	seq := pgx.Identifier{pgcas.DefaultTokenSequence}.Sanitize()
	return Backend{
		Name:      "postgres",
		Store:     s,
		NewLocker: func(context.Context) (hybrid.Locker, error) { return l, nil },
		Expire: func(ctx context.Context, key string, _ hybrid.Lease) error {
			if _, err := pool.Exec(ctx, pgTerminate, key, seq); err != nil {
				return fmt.Errorf("leasefaults: terminating the holder of %q: %w", key, err)
			}
			return nil
		},
		ExpireNote: "the holder's backend was terminated (pg_terminate_backend), which frees its session lock",
		Retryable:  pgcas.Retryable,
	}, nil
}
