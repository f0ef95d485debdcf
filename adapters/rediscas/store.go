package rediscas

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/internal/writeid"
	"github.com/redis/go-redis/v9"
)

// Defaults and bounds of Config's fields.
const (
	DefaultPrefix         = "occkit:"
	DefaultMaxValueBytes  = 1 << 20
	DefaultResolveTimeout = 5 * time.Second
	DefaultTombstoneTTL   = time.Minute
	DefaultHistory        = 8
	// MaxHistory is the largest Config.History.
	MaxHistory = 64
	// MaxValueLimit is the largest Config.Limits.MaxValueBytes (and
	// MaxKeyBytes): Redis refuses a bulk string over 512 MiB
	// (proto-max-bulk-len).
	MaxValueLimit = 512<<20 - 64<<10
	// MaxCommitBytes is the largest sum of key and value bytes in one
	// Commit, well below Redis's 1 GiB client query buffer.
	MaxCommitBytes = 512 << 20
	// MaxPrefixBytes is the longest Config.Prefix.
	MaxPrefixBytes = 256
)

// Config configures a Store. The zero value is usable: keys under
// "occkit:", values up to 1 MiB.
type Config struct {
	// Prefix is prepended to every Redis key the store uses (default
	// "occkit:"). Stores with different prefixes are independent. With a
	// Redis Cluster (or a Ring) the prefix must contain a hash tag, such as
	// "{orders}:", so that every key of the store and its version counter
	// live in one slot: the scripts touch several keys at once.
	Prefix string
	// Limits are the key, value and commit limits. Zero fields mean the
	// defaults: keys up to cas.DefaultMaxKeyBytes, values up to
	// DefaultMaxValueBytes (1 MiB), commits of cas.DefaultMaxCommitOps
	// operations and MaxCommitBytes. Redis's maximums (keys and values
	// up to MaxValueLimit, commits up to MaxCommitBytes) cannot be
	// exceeded: New refuses larger limits. Input over a limit fails with
	// cas.ErrTooLarge or cas.ErrInvalidKey before anything is sent.
	Limits cas.Limits
	// ResolveTimeout bounds the time spent finding out whether a write
	// whose answer was lost was applied (default 5 s).
	ResolveTimeout time.Duration
	// TombstoneTTL is how long a deleted key's tombstone (its history) is
	// kept, so that a write whose answer was lost can be resolved (default
	// 1 min). Tombstones of keys with a fencing token are kept for good: the
	// token must survive the delete.
	TombstoneTTL time.Duration
	// History is how many of a key's last writes its hash remembers, 24
	// bytes each (default 8, at most MaxHistory): a write whose answer was
	// lost is resolved as long as fewer than History writes of the key
	// followed it (see the package documentation).
	History int
	// ExclusiveTTL is how long an exclusive update (UpdateExclusive, the
	// escalation of occ.Update for a call that keeps losing) holds a key
	// at most, by the server's clock: a holder that stops answering loses
	// it then. Zero means DefaultExclusiveTTL.
	ExclusiveTTL time.Duration
	// WaitReplicas, when above zero, makes every write wait until that
	// many replicas have acknowledged it (Redis's WAIT, sent with the
	// write on the same connection), at most WaitTimeout (default
	// DefaultWaitTimeout). A write applied on the master but acknowledged
	// by fewer replicas returns a *cas.AmbiguousError holding a
	// *ReplicationError: a failover could still lose it. Redis replicates
	// asynchronously, so without it a failover can lose writes the
	// store reported as done (see the package documentation). It costs
	// the replicas' round trip on every write.
	WaitReplicas int
	// WaitTimeout bounds WaitReplicas's wait (default DefaultWaitTimeout).
	WaitTimeout time.Duration
	// DeltaRetention is how long the record of an applied delta (Add) is
	// kept, under the prefix: a delta sent again after a lost answer within
	// it reports its first outcome instead of applying twice. Zero means
	// DefaultDeltaRetention; it is never below twice ResolveTimeout.
	DeltaRetention time.Duration
}

// Store is a cas.Store, cas.FencedStore and cas.Committer on Redis. It is
// safe for concurrent use.
type Store struct {
	cli     redis.UniversalClient
	data    string // prefix of data hashes
	counter string // the version counter
	limits  cas.Limits
	resolve time.Duration
	ttlMs   string // tombstone TTL in milliseconds
	keep    string // bytes of old history a write keeps: (History-1) entries
	ids     *writeid.Source

	exclusiveTTL time.Duration
	deltas       string // prefix of delta records
	deltaTTL     string // their TTL in milliseconds

	perSlot      bool // a cluster with keys spread over slots: a counter per slot
	waitReplicas int  // Config.WaitReplicas
	waitTimeout  time.Duration
}

var (
	_ cas.Store       = (*Store)(nil)
	_ cas.FencedStore = (*Store)(nil)
	_ cas.Committer   = (*Store)(nil)
	_ cas.BatchGetter = (*Store)(nil)
	_ cas.Adder       = (*Store)(nil)
)

// New returns a Store that keeps its keys under cfg.Prefix on the Redis
// server (or cluster) cli talks to. Writes are sent at most once whatever
// the client's MaxRetries (see the package documentation).
func New(cli redis.UniversalClient, cfg Config) (*Store, error) {
	if cli == nil {
		return nil, errors.New("rediscas: nil client")
	}
	if cfg.Prefix == "" {
		cfg.Prefix = DefaultPrefix
	}
	if cfg.ResolveTimeout == 0 {
		cfg.ResolveTimeout = DefaultResolveTimeout
	}
	if cfg.TombstoneTTL == 0 {
		cfg.TombstoneTTL = DefaultTombstoneTTL
	}
	if cfg.History == 0 {
		cfg.History = DefaultHistory
	}
	switch {
	case len(cfg.Prefix) > MaxPrefixBytes:
		return nil, fmt.Errorf("rediscas: prefix is %d bytes, limit %d", len(cfg.Prefix), MaxPrefixBytes)
	case cfg.Limits.Within(hardLimits) != nil:
		return nil, fmt.Errorf("rediscas: %w", cfg.Limits.Within(hardLimits))
	case cfg.ResolveTimeout < 0:
		return nil, fmt.Errorf("rediscas: negative ResolveTimeout %v", cfg.ResolveTimeout)
	case cfg.TombstoneTTL < time.Millisecond:
		return nil, fmt.Errorf("rediscas: TombstoneTTL %v is below 1 ms", cfg.TombstoneTTL)
	case cfg.ExclusiveTTL < 0:
		return nil, fmt.Errorf("rediscas: negative ExclusiveTTL %v", cfg.ExclusiveTTL)
	case cfg.History < 1 || cfg.History > MaxHistory:
		return nil, fmt.Errorf("rediscas: History %d is outside [1, %d]", cfg.History, MaxHistory)
	}
	perSlot := false
	switch cli.(type) {
	case *redis.Ring:
		// A Ring places keys by their hash on independent servers: a
		// script over keys of several servers would not be atomic.
		if !hasHashTag(cfg.Prefix) {
			return nil, fmt.Errorf("rediscas: %T spreads keys over servers: Config.Prefix %q needs a hash tag, such as \"{occkit}:\", so that a store's keys and its version counter live on one server", cli, cfg.Prefix)
		}
	case *redis.ClusterClient:
		perSlot = !hasHashTag(cfg.Prefix)
		if perSlot && strings.ContainsAny(cfg.Prefix, "{}") {
			return nil, fmt.Errorf("rediscas: Config.Prefix %q has a brace but no hash tag: on a Redis Cluster a prefix either has a whole hash tag (\"{orders}:\", every key in one slot) or no brace at all (keys spread over slots)", cfg.Prefix)
		}
	}
	if cfg.WaitReplicas < 0 || cfg.WaitTimeout < 0 {
		return nil, fmt.Errorf("rediscas: negative WaitReplicas %d or WaitTimeout %v", cfg.WaitReplicas, cfg.WaitTimeout)
	}
	if _, ring := cli.(*redis.Ring); ring && cfg.WaitReplicas > 0 {
		return nil, fmt.Errorf("rediscas: WaitReplicas needs a client of one server or of a Redis Cluster, not a %T", cli)
	}
	return &Store{
		cli:     cli,
		data:    cfg.Prefix + "d:",
		counter: cfg.Prefix + "version",
		limits: cfg.Limits.Or(cas.Limits{
			MaxKeyBytes:    cas.DefaultMaxKeyBytes,
			MaxValueBytes:  DefaultMaxValueBytes,
			MaxCommitOps:   cas.DefaultMaxCommitOps,
			MaxCommitBytes: MaxCommitBytes,
		}),
		resolve: cfg.ResolveTimeout,
		ttlMs:   strconv.FormatInt(cfg.TombstoneTTL.Milliseconds(), 10),
		keep:    strconv.Itoa((cfg.History - 1) * historyEntryLen),
		ids:     writeid.NewSource(),

		exclusiveTTL: cmp.Or(cfg.ExclusiveTTL, DefaultExclusiveTTL),
		deltas:       cfg.Prefix + "a:",
		deltaTTL:     strconv.FormatInt(max(cmp.Or(cfg.DeltaRetention, DefaultDeltaRetention), 2*cfg.ResolveTimeout).Milliseconds(), 10),
		perSlot:      perSlot,
		waitReplicas: cfg.WaitReplicas,
		waitTimeout:  cmp.Or(cfg.WaitTimeout, DefaultWaitTimeout),
	}, nil
}

// hardLimits are Redis's: no bulk string over 512 MiB, commits within
// the client query buffer.
var hardLimits = cas.Limits{MaxKeyBytes: MaxValueLimit, MaxValueBytes: MaxValueLimit, MaxCommitBytes: MaxCommitBytes}

// hasHashTag reports whether s contains a Redis Cluster hash tag: a "{"
// followed, later, by a "}" with at least one byte between them.
func hasHashTag(s string) bool {
	i := strings.IndexByte(s, '{')
	if i < 0 {
		return false
	}
	j := strings.IndexByte(s[i+1:], '}')
	return j > 0
}

// Limits returns the limits the store enforces.
func (s *Store) Limits() cas.Limits { return s.limits }

// String returns "rediscas".
func (s *Store) String() string { return "rediscas" }

// dataKey returns the Redis key of the hash that holds key: Prefix + "d:" +
// key.
func (s *Store) dataKey(key string) string { return s.data + key }

// Get implements cas.Store with one HMGET of the key's hash.
func (s *Store) Get(ctx context.Context, key string) (cas.Item, error) {
	if err := s.limits.Get(ctx, key); err != nil {
		return cas.Item{}, err
	}
	vals, err := s.cli.HMGet(ctx, s.dataKey(key), "v", "n").Result()
	if err != nil {
		return cas.Item{}, &readError{key: key, err: s.noticeFailure(ctx, err)}
	}
	v, live := vals[0].(string)
	if !live {
		return cas.Item{}, &cas.KeyError{Op: "get", Key: key, Err: cas.ErrNotFound}
	}
	n, _ := vals[1].(string)
	ver, err := parseVersion(n)
	if err != nil {
		return cas.Item{}, &cas.KeyError{Op: "get", Key: key, Err: err}
	}
	return cas.Item{Key: key, Value: []byte(v), Version: cas.Version(ver)}, nil
}

// GetMany implements cas.BatchGetter with one pipeline of the HMGETs
// Get sends: one round trip. Each key is read on its own (a cluster
// splits the pipeline by node), as Get reads it.
func (s *Store) GetMany(ctx context.Context, keys []string) ([]cas.Item, error) {
	if err := s.limits.GetMany(ctx, keys); err != nil {
		return nil, err
	}
	out := make([]cas.Item, len(keys))
	if len(keys) == 0 {
		return out, nil
	}
	cmds := make([]*redis.SliceCmd, len(keys))
	_, err := s.cli.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, k := range keys {
			cmds[i] = p.HMGet(ctx, s.dataKey(k), "v", "n")
		}
		return nil
	})
	if err != nil {
		return nil, &readError{key: keys[0], err: s.noticeFailure(ctx, err)}
	}
	for i, k := range keys {
		out[i] = cas.Item{Key: k}
		vals := cmds[i].Val()
		v, live := vals[0].(string)
		if !live {
			continue
		}
		n, _ := vals[1].(string)
		ver, err := parseVersion(n)
		if err != nil {
			return nil, &cas.KeyError{Op: "get-many", Key: k, Err: err}
		}
		out[i] = cas.Item{Key: k, Value: []byte(v), Version: cas.Version(ver)}
	}
	return out, nil
}

// CompareAndSwap implements cas.Store with one script: it compares the
// hash's version with expected and writes value, a new version from the
// store's counter and the write's history entry, or returns the current
// item.
func (s *Store) CompareAndSwap(ctx context.Context, key string, expected cas.Version, value []byte) (cas.Version, error) {
	if err := s.limits.Put(ctx, key, value); err != nil {
		return 0, err
	}
	return s.put(ctx, key, expected, "", 0, value, "")
}

// CompareAndSwapFenced implements cas.FencedStore: the same script as
// CompareAndSwap, which first refuses a token smaller than the hash's
// fence field, then records token there.
func (s *Store) CompareAndSwapFenced(ctx context.Context, key string, expected cas.Version, token uint64, value []byte) (cas.Version, error) {
	if err := s.limits.Put(ctx, key, value); err != nil {
		return 0, err
	}
	return s.put(ctx, key, expected, encodeToken(token), token, value, "")
}

// put runs putScript; holder is the token of the exclusive update that
// writes, or "".
func (s *Store) put(ctx context.Context, key string, expected cas.Version, fence string, token uint64, value []byte, holder string) (cas.Version, error) {
	w := pending{op: "compare-and-swap", key: key, expected: expected, id: s.ids.Next()}
	dk := s.dataKey(key)
	keys := []string{dk, s.counterOf(dk)}
	args := []any{formatVersion(expected), value, historyEntry(w.id, uint64(expected)), fence, s.keep, holder}
	w.send = func(ctx context.Context) (any, error) { return s.run(ctx, putScript, keys, args...) }
	w.answer = func(r reply) (cas.Version, error) {
		switch r.status {
		case "ok":
			v, err := parseVersion(r.field(0))
			return cas.Version(v), err
		case "fenced":
			highest, _ := strconv.ParseUint(r.field(0), 10, 64)
			return 0, &cas.FencedError{Key: key, Token: token, Highest: highest}
		case "conflict":
			return 0, conflict(key, expected, r.fields)
		case "held":
			return 0, heldConflict(key, expected, r.fields)
		}
		return 0, fmt.Errorf("rediscas: unexpected script reply %q", r.status)
	}
	if holder != "" {
		return s.write(ctx, w)
	}
	return s.writeUnheld(ctx, w)
}

// write sends w and interprets its answer, resolving a lost one.
func (s *Store) write(ctx context.Context, w pending) (cas.Version, error) {
	res, err := w.send(ctx)
	if err != nil && replication(err) == nil {
		return s.failedWrite(ctx, w, err)
	}
	return w.interpret(res, err)
}

func formatVersion(v cas.Version) string { return strconv.FormatUint(uint64(v), 10) }

// conflict builds a conflict from a script's current state: {"0"} for an
// absent key, {version, value} otherwise.
func conflict(key string, expected cas.Version, cur []string) error {
	ce := &cas.ConflictError{Key: key, Expected: expected, Current: cas.Item{Key: key}, HasCurrent: true}
	if len(cur) >= 2 {
		v, err := parseVersion(cur[0])
		if err != nil {
			return err
		}
		ce.Current.Version, ce.Current.Value = cas.Version(v), []byte(cur[1])
	}
	return ce
}

// CompareAndDelete implements cas.Store with one script: it removes the
// value if the version is expected and leaves a tombstone with the key's
// history (this delete's entry first) and its fence.
func (s *Store) CompareAndDelete(ctx context.Context, key string, expected cas.Version) error {
	if err := s.limits.Delete(ctx, key, expected); err != nil {
		return err
	}
	w := pending{op: "compare-and-delete", key: key, expected: expected, del: true, id: s.ids.Next()}
	keys := []string{s.dataKey(key)}
	args := []any{formatVersion(expected), historyEntry(w.id, uint64(expected)), s.ttlMs, s.keep}
	w.send = func(ctx context.Context) (any, error) { return s.run(ctx, deleteScript, keys, args...) }
	w.answer = func(r reply) (cas.Version, error) {
		switch r.status {
		case "ok":
			return 0, nil
		case "conflict":
			return 0, conflict(key, expected, r.fields)
		case "held":
			return 0, heldConflict(key, expected, r.fields)
		}
		return 0, fmt.Errorf("rediscas: unexpected script reply %q", r.status)
	}
	_, err := s.writeUnheld(ctx, w)
	return err
}

// Commit implements cas.Committer with one script over the version counter
// and every key of ops: it checks every version, then writes, so either
// every operation applies or none does. On a Redis Cluster whose store
// spreads keys over slots (a prefix without a hash tag), the keys of one
// commit must share a slot: a commit over several slots is refused with
// a *CrossSlotError (ErrCrossSlot) before anything is sent.
func (s *Store) Commit(ctx context.Context, ops []cas.Op) ([]cas.Version, error) {
	return s.commit(ctx, ops, "")
}

// commit is Commit by the exclusive commit holding its keys with token
// (holds with that token let it through, and it ends them), or by no
// one ("").
func (s *Store) commit(ctx context.Context, ops []cas.Op, token string) ([]cas.Version, error) {
	if err := s.limits.Commit(ctx, ops); err != nil {
		return nil, err
	}
	if s.perSlot {
		op := "commit"
		if token != "" {
			op = "exclusive commit"
		}
		keys := make([]string, len(ops))
		for i, o := range ops {
			keys[i] = o.Key
		}
		if err := s.checkSlots(op, keys); err != nil {
			return nil, err
		}
	}
	id := s.ids.Next()
	keys := make([]string, 0, 1+len(ops))
	keys = append(keys, s.counterOf(s.dataKey(ops[0].Key)))
	args := make([]any, 0, 5+4*len(ops))
	marker, firstDelete := 0, 0
	args = append(args, string(id[:]), s.ttlMs, "", s.keep, token)
	for i, op := range ops {
		keys = append(keys, s.dataKey(op.Key))
		var kind string
		switch op.Kind {
		case cas.OpPut:
			kind = "p"
			if marker == 0 {
				marker = i + 1
			}
		case cas.OpDelete:
			kind = "d"
			if firstDelete == 0 {
				firstDelete = i + 1
			}
		default:
			kind = "c"
		}
		value := op.Value
		if op.Kind != cas.OpPut {
			value = nil
		}
		args = append(args, kind, formatVersion(op.Expected), raw8(uint64(op.Expected)), value)
	}
	if marker == 0 {
		marker = firstDelete
	}
	args[2] = strconv.Itoa(marker)
	send := func(ctx context.Context) (any, error) { return s.run(ctx, commitScript, keys, args...) }
	answer := func(r reply) (cas.Version, error) {
		switch r.status {
		case "ok":
			v, err := parseVersion(r.field(0))
			return cas.Version(v), err
		case "conflict":
			i, err := strconv.Atoi(r.field(0))
			if err != nil || i < 1 || i > len(ops) {
				return 0, fmt.Errorf("rediscas: unexpected commit conflict index %q", r.field(0))
			}
			return 0, conflict(ops[i-1].Key, ops[i-1].Expected, r.fields[1:])
		}
		return 0, fmt.Errorf("rediscas: unexpected script reply %q", r.status)
	}
	if marker == 0 {
		// Only checks: nothing is written, so an answer lost is an error,
		// never an ambiguous outcome, and nothing waits for replicas.
		res, err := runOnce(ctx, s.cli, commitScript, keys, args...)
		if err != nil {
			return nil, &cas.KeyError{Op: "commit", Key: ops[0].Key, Err: wrapErr(err)}
		}
		r, err := parseReply(res)
		if err != nil {
			return nil, err
		}
		if _, err := answer(r); err != nil {
			return nil, err
		}
		return commitVersions(ops, 0), nil
	}
	m := ops[marker-1]
	ver, err := s.write(ctx, pending{op: "commit", key: m.Key, expected: m.Expected, del: m.Kind == cas.OpDelete, id: id, send: send, answer: answer})
	if err != nil {
		return nil, err
	}
	return commitVersions(ops, ver), nil
}

func commitVersions(ops []cas.Op, ver cas.Version) []cas.Version {
	out := make([]cas.Version, len(ops))
	for i, op := range ops {
		switch op.Kind {
		case cas.OpPut:
			out[i] = ver
		case cas.OpCheck:
			out[i] = op.Expected
		}
	}
	return out
}
