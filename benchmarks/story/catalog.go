package story

import (
	"context"
	"fmt"
	"time"

	"github.com/occkit/occkit/benchmarks/internal/backends"
)

// The story and mode names.
const (
	GCPause    = "gc-pause"
	ClockJump  = "clock-jump"
	Partition  = "partition"
	Contention = "contention"

	ModeRedis         = "redis"
	ModeRedisWatchdog = "redis-watchdog"
	ModeRedlock       = "redlock"
	ModeZooKeeper     = "zookeeper"
	ModeEtcd          = "etcd"
	ModeMySQL         = "mysql"
	ModeFenced        = "fenced"
	ModeOCC           = "occ"
)

// Settings shared by the stories.
const (
	// TTL is the lock TTL of the stories (the lease of every lock mode; a
	// server may grant more: etcd at least 2 s, ZooKeeper sessions at
	// least twice its tick).
	TTL = time.Second
	// clockJumpTTL is the TTL in clock-jump, long enough that no lock
	// expires by itself before the runner expires it early.
	clockJumpTTL = 3 * TTL
	// contentionClients and contentionSales: five clients, two sales each.
	contentionClients = 5
	contentionSales   = 2
	// contentionWork is the usual time inside the critical section;
	// contentionLongWork the first sale of client A, longer than the TTL.
	contentionWork     = 80 * time.Millisecond
	contentionLongWork = TTL * 3 / 2
)

// storySpec is one story: its description and its script.
type storySpec struct {
	Info
	initial int64
	ttl     time.Duration
	script  func(ctx context.Context, r *run) error
}

// modeSpec is one lock mode: its description, how it writes and its lock.
type modeSpec struct {
	Info
	data dataKind
	// lock opens the mode's lock service for a run (nil: no lock).
	lock func(ctx context.Context, r *run) (lockService, error)
	// needs names the system (backends.Etcd, ...) the mode needs besides
	// Redis.
	needs string
}

// dataKind is how a mode writes the stock.
type dataKind int

const (
	// plainData: GET, then a blind SET of the value read minus one.
	plainData dataKind = iota
	// fencedData: rediscas CompareAndSwapFenced with the lease's token.
	fencedData
	// casData: rediscas CompareAndSwap through occ.Update.
	casData
)

func stories() []storySpec {
	return []storySpec{
		{
			Info: Info{Name: GCPause, Title: "A holder paused past its TTL",
				About: fmt.Sprintf("Stock 10, two sales, expected 8. Client A is a child process: it takes the lock and reads 10, "+
					"then is stopped with SIGSTOP (its renewals stop too, as in a long GC pause) until its lock has expired on the server "+
					"and client B has taken it and sold (stock 9). A is resumed with SIGCONT and writes 9 from its stale read. "+
					"Lock TTL %v.", TTL)},
			initial: 10, ttl: TTL, script: gcPause,
		},
		{
			Info: Info{Name: ClockJump, Title: "A lock that ends early on the server",
				About: fmt.Sprintf("Stock 10, two sales, expected 8. Redlock on 5 Redis servers: A reaches only nodes 1-3 "+
					"(4 and 5 are behind a closed TCP proxy for A) and takes the lock on a majority; node 3's clock jumps forward, so "+
					"A's key there expires early (the runner sets PEXPIRE 1 ms on it); B takes nodes 3-5, a majority, while A still "+
					"believes it holds the lock; both write. The other modes get the same fault on their lock service: the holder's "+
					"lock ends early on the server (its Redis key expired, its etcd lease revoked, its ZooKeeper node deleted). Lock TTL %v.", clockJumpTTL)},
			initial: 10, ttl: clockJumpTTL, script: clockJump,
		},
		{
			Info: Info{Name: Partition, Title: "A holder cut off from the lock service",
				About: fmt.Sprintf("Stock 10, two sales, expected 8. A reaches the lock service through an in-process TCP proxy. "+
					"After A has read 10, the proxy blackholes A's connections (a partition: nothing arrives, nothing is reset) while "+
					"A's work goes on; A's lock expires on the server (Redis TTL, etcd lease, ZooKeeper session), B takes it and sells. "+
					"The partition heals, A's work ends and A writes. The data path stays up (in occ mode, which has no lock service, "+
					"A's connection to the store is the one cut). Lock TTL %v.", TTL)},
			initial: 10, ttl: TTL, script: partition,
		},
		{
			Info: Info{Name: Contention, Title: "Five clients on one key",
				About: fmt.Sprintf("Stock 20; %d clients sell %d items each, expected %d. Each sale spends %v inside the critical "+
					"section, except A's first, which takes %v, longer than the %v TTL: a lock without renewal expires under A and "+
					"lets the next client in; a watchdog or a session keeps it. Blocked is the time clients waited for the lock.",
					contentionClients, contentionSales, 20-contentionClients*contentionSales, contentionWork, contentionLongWork, TTL)},
			initial: 20, ttl: TTL, script: contention,
		},
	}
}

func modes() []modeSpec {
	const data = "The stock is a plain Redis key: the client GETs it and then SETs the value read minus one, a blind write " +
		"(and appends what it read and wrote to an audit list in the same MULTI, which the outcome is computed from)."
	return []modeSpec{
		{
			Info: Info{Name: ModeRedis, Title: "Redis lock, no fencing",
				About: "SET lock token NX PX ttl with a random token, polled while held, released by a script that deletes the key " +
					"only if it still holds the token. No renewal, no fencing token. " + data},
			data: plainData, lock: openRedisLock(false),
		},
		{
			Info: Info{Name: ModeRedisWatchdog, Title: "Redis lock with a watchdog",
				About: "The same lock, renewed every TTL/3 while held by a watchdog goroutine (PEXPIRE if the key still holds the " +
					"token), as Redisson's watchdog does. No fencing token. " + data},
			data: plainData, lock: openRedisLock(true),
		},
		{
			Info: Info{Name: ModeRedlock, Title: "Redlock on 5 Redis servers",
				About: "github.com/go-redsync/redsync/v4 over 5 independent Redis servers: SET NX PX on each, held with a majority " +
					"(3), retried every 20 ms; no renewal, no fencing token. " + data},
			data: plainData, lock: openRedlock, needs: backends.Redlock,
		},
		{
			Info: Info{Name: ModeZooKeeper, Title: "ZooKeeper lock recipe",
				About: "ZooKeeper's lock recipe (github.com/go-zookeeper/zk, a session per client): an ephemeral sequential node " +
					"under the lock's node, held by the lowest, each waiter watching its predecessor; the lock lasts as long as the " +
					"session (its timeout is the TTL, or the server's minimum). The token shown is the node's place in the sequence " +
					"(from 1), which nothing checks. " + data},
			data: plainData, lock: openZooKeeperLock, needs: backends.ZooKeeper,
		},
		{
			Info: Info{Name: ModeEtcd, Title: "etcd lease lock",
				About: "etcdcas.Locker on etcd (in process): a key attached to a lease kept alive by the client, held by the oldest " +
					"key of the lock, waiters watching their predecessor. Its token is the key's creation revision, which this mode " +
					"does not check. " + data},
			data: plainData, lock: openEtcdLock, needs: backends.Etcd,
		},
		{
			Info: Info{Name: ModeMySQL, Title: "MySQL GET_LOCK",
				About: "MySQL's named lock on MariaDB: GET_LOCK(name, timeout) in the session of a connection the client holds " +
					"for the critical section, RELEASE_LOCK in the same session; waiters retry GET_LOCK. The lock lasts as long as " +
					"the session: the client keeps it alive with a statement every TTL/3, and the server ends a session idle for " +
					"longer than its wait_timeout (the TTL, in whole seconds), or whose connection was killed or dropped. " +
					"No fencing token. " + data},
			data: plainData, lock: openMySQLLock, needs: backends.MySQL,
		},
		{
			Info: Info{Name: ModeFenced, Title: "Lock + fenced write (occkit)",
				About: "rediscas.Locker (SET PX with an INCR fencing token, a watchdog renewing it every TTL/3) and rediscas's " +
					"fenced write: CompareAndSwapFenced(version read, lease token), which Redis refuses with ErrFenced when a " +
					"larger token has written the key (and with a conflict when the version moved). A refused sale starts again " +
					"with a new lease, as hybrid.Update does; the runner makes the calls itself so that a pause can fall between " +
					"the read and the write, where no check by the client could see it. The stock is a rediscas key in Redis."},
			data: fencedData, lock: openFencedLock,
		},
		{
			Info: Info{Name: ModeOCC, Title: "No lock: conditional write and retry (occkit)",
				About: "occ.Update on rediscas: read the stock and its version, write only if the version is unchanged " +
					"(CompareAndSwap), retry on a conflict with the current value. No lock, nothing to expire. The stock is a " +
					"rediscas key in Redis."},
			data: casData,
		},
	}
}

// StoryNames returns the names of the stories, in their order.
func StoryNames() []string { return names(stories()) }

// ModeNames returns the names of the lock modes, in their order.
func ModeNames() []string { return names(modes()) }

// named is a story or a mode: a spec with its Info.
type named interface{ info() Info }

func (i Info) info() Info { return i }

// names returns the names of specs, in their order.
func names[S named](specs []S) []string {
	var out []string
	for _, s := range specs {
		out = append(out, s.info().Name)
	}
	return out
}

// lookup returns the spec of specs with that name; what it says when
// there is none names kind and the names there are.
func lookup[S named](specs []S, kind, name string) (S, error) {
	for _, s := range specs {
		if s.info().Name == name {
			return s, nil
		}
	}
	var zero S
	return zero, fmt.Errorf("story: unknown %s %q (have %v)", kind, name, names(specs))
}

// pick returns the specs of specs with those names, in the order of
// names, or every spec when names is empty.
func pick[S named](specs []S, kind string, names []string) ([]S, error) {
	if len(names) == 0 {
		return specs, nil
	}
	var out []S
	for _, n := range names {
		s, err := lookup(specs, kind, n)
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}
