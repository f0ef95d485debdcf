package etcdcas

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"time"

	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/internal/ctxwait"
	"github.com/occkit/occkit/internal/writeid"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Defaults for Config's zero fields.
const (
	DefaultPrefix          = "occkit/"
	DefaultMaxRequestBytes = 1536 * 1024 // etcd's --max-request-bytes default
	DefaultMaxTxnOps       = 128         // etcd's --max-txn-ops default
	DefaultResolveTimeout  = 5 * time.Second
	// MaxPrefixBytes is the longest Config.Prefix.
	MaxPrefixBytes = 256
)

// Config configures a Store. The zero value is usable: keys under
// "occkit/", limits that fit etcd's default request limits.
type Config struct {
	// Prefix is prepended to every etcd key the store writes (default
	// "occkit/"). Stores with different prefixes are independent.
	Prefix string
	// Limits are the key, value and commit limits. Zero fields mean
	// what fits a server with etcd's defaults, --max-request-bytes
	// 1.5 MiB and --max-txn-ops 128: ServerLimits(DefaultMaxRequestBytes,
	// DefaultMaxTxnOps, MaxKeyBytes). For a server started with other
	// flags, pass ServerLimits of its flags. etcd itself has no fixed
	// maximum (its flags set it); a value or commit above gRPC's 2 GiB
	// message is refused by New.
	Limits cas.Limits
	// ResolveTimeout bounds the time spent finding out whether a write
	// whose answer was lost was applied (default 5 s).
	ResolveTimeout time.Duration
	// ExclusiveTTL is how long an exclusive update (UpdateExclusive, the
	// escalation of occ.Update for a call that keeps losing) holds a key
	// at most: the lease of its hold key, in whole seconds (etcd refuses
	// leases under its minimum TTL, about 2 s with default flags). Zero
	// means DefaultExclusiveTTL.
	ExclusiveTTL time.Duration
	// SerializableReads makes Get and GetMany serializable reads
	// (clientv3.WithSerializable): the member the client talks to answers
	// from its own state, without first confirming with the leader that it
	// is current (etcd's ReadIndex: a round trip from a follower to the
	// leader, and from the leader to a quorum). A read then costs one hop
	// and no leader work, and keeps being answered while the member is
	// cut off from the leader, but may return an older state of the key
	// than the latest acknowledged write. That is safe for occ: a write
	// made from a stale version conflicts, and the conflict carries the
	// current state, so the retry starts from it; nothing is lost or
	// written twice, and a stale read costs one more write attempt. Every
	// other read stays linearizable: the read in a conflict (the Else of
	// the write's transaction), the reads that resolve a write whose
	// answer was lost, UpdateExclusive's and CommitExclusive's reads
	// under their hold, KeysWithPrefix, and the Locker's. Leave it off
	// when a caller needs Get to see its own or anyone's latest write.
	SerializableReads bool
}

// Store is a cas.Store on etcd. It is safe for concurrent use.
type Store struct {
	cli     *clientv3.Client
	data    string // prefix of data keys
	fence   string // prefix of fence keys
	hold    string // prefix of hold keys (UpdateExclusive)
	limits  cas.Limits
	resolve time.Duration
	ids     *writeid.Source
	reads   []clientv3.OpOption // of Get and GetMany: WithSerializable with Config.SerializableReads

	exclusiveTTL time.Duration
	leaseMu      sync.Mutex
	lease        clientv3.LeaseID // the lease of holds (UpdateExclusive); 0: none yet
	leaseAt      time.Time        // when it was granted
}

var (
	_ cas.Store       = (*Store)(nil)
	_ cas.FencedStore = (*Store)(nil)
	_ cas.Committer   = (*Store)(nil)
	_ cas.Lister      = (*Store)(nil)
	_ cas.BatchGetter = (*Store)(nil)
)

// New returns a Store that keeps its keys under cfg.Prefix in the etcd
// cluster cli talks to.
func New(cli *clientv3.Client, cfg Config) (*Store, error) {
	if cli == nil {
		return nil, errors.New("etcdcas: nil client")
	}
	if cfg.Prefix == "" {
		cfg.Prefix = DefaultPrefix
	}
	if cfg.ResolveTimeout == 0 {
		cfg.ResolveTimeout = DefaultResolveTimeout
	}
	if len(cfg.Prefix) > MaxPrefixBytes {
		return nil, fmt.Errorf("etcdcas: prefix is %d bytes, limit %d", len(cfg.Prefix), MaxPrefixBytes)
	}
	if cfg.ResolveTimeout < 0 {
		return nil, fmt.Errorf("etcdcas: negative ResolveTimeout %v", cfg.ResolveTimeout)
	}
	if err := cfg.Limits.Within(hardLimits); err != nil {
		return nil, fmt.Errorf("etcdcas: %w", err)
	}
	defaults, err := ServerLimits(DefaultMaxRequestBytes, DefaultMaxTxnOps, cfg.Limits.MaxKeyBytes)
	if err != nil {
		return nil, fmt.Errorf("etcdcas: %w", err)
	}
	return &Store{
		cli:   cli,
		data:  cfg.Prefix + "d/",
		fence: cfg.Prefix + "f/",
		hold:  cfg.Prefix + "h/",

		exclusiveTTL: cmp.Or(cfg.ExclusiveTTL, DefaultExclusiveTTL),
		limits:       cfg.Limits.Or(defaults),
		resolve:      cfg.ResolveTimeout,
		ids:          writeid.NewSource(),
		reads:        readOpts(cfg.SerializableReads),
	}, nil
}

// hardLimits are the most any etcd store can take: gRPC refuses a
// message over 2 GiB, whatever the server's flags.
var hardLimits = cas.Limits{MaxKeyBytes: math.MaxInt32, MaxValueBytes: math.MaxInt32, MaxCommitBytes: math.MaxInt32}

// ServerLimits returns the limits of a store on an etcd server started
// with --max-request-bytes maxRequestBytes and --max-txn-ops maxTxnOps,
// for keys up to maxKeyBytes long (0: cas.DefaultMaxKeyBytes): values and
// commits that would make a request over the server's limit are then
// refused with cas.ErrTooLarge before anything is sent. Pass the result
// as Config.Limits (with any field lowered as you like).
func ServerLimits(maxRequestBytes, maxTxnOps, maxKeyBytes int) (cas.Limits, error) {
	if maxKeyBytes == 0 {
		maxKeyBytes = cas.DefaultMaxKeyBytes
	}
	switch {
	case maxRequestBytes < 64<<10:
		return cas.Limits{}, fmt.Errorf("max request bytes %d is below 64 KiB", maxRequestBytes)
	case maxTxnOps < 1 || maxKeyBytes < 1:
		return cas.Limits{}, fmt.Errorf("max txn ops %d and max key bytes %d must be positive", maxTxnOps, maxKeyBytes)
	}
	// A request carries a key up to three times (compare, write, read
	// back on failure) plus protocol overhead; the caller's bytes get the
	// rest. The limits assume the longest prefix, so that they do not
	// change with it.
	keyBytes := MaxPrefixBytes + 2 + maxKeyBytes
	perOp := 3*keyBytes + envelopeHeader + 64
	l := cas.Limits{
		MaxKeyBytes:    maxKeyBytes,
		MaxValueBytes:  maxRequestBytes - 2*perOp,
		MaxCommitOps:   maxTxnOps,
		MaxCommitBytes: maxRequestBytes - maxTxnOps*(perOp-keyBytes) - 2*keyBytes*maxTxnOps,
	}
	if l.MaxValueBytes < 1 || l.MaxCommitBytes < 1 {
		return cas.Limits{}, fmt.Errorf("keys of %d bytes leave no room for values in requests of %d bytes (%d operations)", maxKeyBytes, maxRequestBytes, maxTxnOps)
	}
	return l, nil
}

// Limits returns the limits the store enforces.
func (s *Store) Limits() cas.Limits { return s.limits }

// String returns "etcdcas".
func (s *Store) String() string { return "etcdcas" }

func (s *Store) dataKey(key string) string { return s.data + key }

func (s *Store) fenceKey(key string) string { return s.fence + key }

// heldOnly reports whether a write at expected that failed, whose key
// read back as rr, failed only for a hold: the key is at expected.
func heldOnly(rr *clientv3.GetResponse, expected cas.Version) bool {
	if len(rr.Kvs) == 0 {
		return expected == 0
	}
	return cas.Version(rr.Kvs[0].ModRevision) == expected
}

// notHeld is the compare of a write that an exclusive update's hold of
// key refuses: the hold key does not exist.
func (s *Store) notHeld(key string) clientv3.Cmp {
	return clientv3.Compare(clientv3.CreateRevision(s.holdKey(key)), "=", 0)
}

// item decodes a data key's etcd value.
func (s *Store) item(key string, kv *mvccpb.KeyValue) (cas.Item, writeid.ID, error) {
	id, v, err := decodeEnvelope(kv.Value)
	if err != nil {
		return cas.Item{}, id, &cas.KeyError{Op: "get", Key: key, Err: err}
	}
	return cas.Item{Key: key, Value: v, Version: cas.Version(kv.ModRevision)}, id, nil
}

// readOpts returns the options of Get's and GetMany's reads.
func readOpts(serializable bool) []clientv3.OpOption {
	if serializable {
		return []clientv3.OpOption{clientv3.WithSerializable()}
	}
	return nil
}

// Get implements cas.Store with a linearizable read, or with
// Config.SerializableReads a serializable one.
func (s *Store) Get(ctx context.Context, key string) (cas.Item, error) {
	if err := s.limits.Get(ctx, key); err != nil {
		return cas.Item{}, err
	}
	return s.get(ctx, key, s.reads...)
}

// get reads key with opts (none: a linearizable read).
func (s *Store) get(ctx context.Context, key string, opts ...clientv3.OpOption) (cas.Item, error) {
	resp, err := s.cli.Get(ctx, s.dataKey(key), opts...)
	if err != nil {
		return cas.Item{}, &readError{key: key, err: err}
	}
	if len(resp.Kvs) == 0 {
		return cas.Item{}, &cas.KeyError{Op: "get", Key: key, Err: cas.ErrNotFound}
	}
	it, _, err := s.item(key, resp.Kvs[0])
	return it, err
}

// GetMany implements cas.BatchGetter with one etcd transaction of
// Gets: one round trip, every key read at one revision (with
// Config.SerializableReads, the member's revision: the items are one
// state of the keys, possibly an older one).
func (s *Store) GetMany(ctx context.Context, keys []string) ([]cas.Item, error) {
	if err := s.limits.GetMany(ctx, keys); err != nil {
		return nil, err
	}
	out := make([]cas.Item, len(keys))
	if len(keys) == 0 {
		return out, nil
	}
	gets := make([]clientv3.Op, len(keys))
	for i, k := range keys {
		out[i] = cas.Item{Key: k}
		gets[i] = clientv3.OpGet(s.dataKey(k), s.reads...)
	}
	// A transaction of serializable gets only is served by the member.
	resp, err := s.cli.Txn(ctx).Then(gets...).Commit()
	if err != nil {
		return nil, &readError{key: keys[0], err: err}
	}
	for i, r := range resp.Responses {
		rr := r.GetResponseRange()
		if rr == nil || len(rr.Kvs) == 0 {
			continue
		}
		it, _, err := s.item(keys[i], rr.Kvs[0])
		if err != nil {
			return nil, err
		}
		out[i] = it
	}
	return out, nil
}

// conflict builds the conflict of a write expecting expected, from the
// data key's range response (empty when the key is absent).
func (s *Store) conflict(key string, expected cas.Version, rr *clientv3.GetResponse) error {
	ce := &cas.ConflictError{Key: key, Expected: expected, Current: cas.Item{Key: key}, HasCurrent: true}
	if rr != nil && len(rr.Kvs) > 0 {
		it, _, err := s.item(key, rr.Kvs[0])
		if err != nil {
			return err
		}
		ce.Current = it
	}
	return ce
}

// CompareAndSwap implements cas.Store as one etcd transaction:
// If(ModRevision(key) == expected, no hold) Then(Put) Else(Get), so a
// conflict carries the current item at no extra round trip (no hold: no
// exclusive update holds the key, see UpdateExclusive).
func (s *Store) CompareAndSwap(ctx context.Context, key string, expected cas.Version, value []byte) (cas.Version, error) {
	if err := s.limits.Put(ctx, key, value); err != nil {
		return 0, err
	}
	dk, id := s.dataKey(key), s.ids.Next()
	var poll ctxwait.Poll
	for {
		resp, err := s.cli.Txn(ctx).
			If(clientv3.Compare(clientv3.ModRevision(dk), "=", int64(expected)), s.notHeld(key)).
			Then(clientv3.OpPut(dk, encodeEnvelope(id, value))).
			Else(clientv3.OpGet(dk)).
			Commit()
		if err != nil {
			return s.failedWrite(ctx, "compare-and-swap", key, expected, id, err)
		}
		if resp.Succeeded {
			return cas.Version(resp.Header.Revision), nil
		}
		rr := (*clientv3.GetResponse)(resp.Responses[0].GetResponseRange())
		if !heldOnly(rr, expected) {
			return 0, s.conflict(key, expected, rr)
		}
		// The version matched: an exclusive update holds the key. Wait
		// for it, as a writer waits for a row lock (nothing was written,
		// so sending the write again is safe).
		if err := poll.Wait(ctx); err != nil {
			return 0, err
		}
	}
}

// CompareAndSwapFenced implements cas.FencedStore. Each fenced key has a
// fence key beside it holding the largest token that wrote it, compared in
// the same transaction:
//
//	If(Value(fence) > token) Then(Get(fence))          -- stale token
//	Else(Txn(If(ModRevision(key) == expected)
//	         Then(Put(key), Put(fence, token))
//	         Else(Get(key))))
//
// Fence keys are never deleted, so a token survives deletes of the key.
func (s *Store) CompareAndSwapFenced(ctx context.Context, key string, expected cas.Version, token uint64, value []byte) (cas.Version, error) {
	if err := s.limits.Put(ctx, key, value); err != nil {
		return 0, err
	}
	dk, fk, id := s.dataKey(key), s.fenceKey(key), s.ids.Next()
	inner := clientv3.OpTxn(
		[]clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(dk), "=", int64(expected))},
		[]clientv3.Op{clientv3.OpPut(dk, encodeEnvelope(id, value)), clientv3.OpPut(fk, encodeToken(token))},
		[]clientv3.Op{clientv3.OpGet(dk)})
	resp, err := s.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.Value(fk), ">", encodeToken(token))).
		Then(clientv3.OpGet(fk)).
		Else(inner).
		Commit()
	if err != nil {
		return s.failedWrite(ctx, "compare-and-swap", key, expected, id, err)
	}
	if resp.Succeeded {
		var highest uint64
		if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) > 0 {
			highest = decodeToken(kvs[0].Value)
		}
		return 0, &cas.FencedError{Key: key, Token: token, Highest: highest}
	}
	tr := resp.Responses[0].GetResponseTxn()
	if !tr.Succeeded {
		return 0, s.conflict(key, expected, (*clientv3.GetResponse)(tr.Responses[0].GetResponseRange()))
	}
	return cas.Version(resp.Header.Revision), nil
}

// CompareAndDelete implements cas.Store as
// If(ModRevision(key) == expected, no hold) Then(Delete) Else(Get).
func (s *Store) CompareAndDelete(ctx context.Context, key string, expected cas.Version) error {
	if err := s.limits.Delete(ctx, key, expected); err != nil {
		return err
	}
	dk := s.dataKey(key)
	var poll ctxwait.Poll
	for {
		resp, err := s.cli.Txn(ctx).
			If(clientv3.Compare(clientv3.ModRevision(dk), "=", int64(expected)), s.notHeld(key)).
			Then(clientv3.OpDelete(dk)).
			Else(clientv3.OpGet(dk)).
			Commit()
		if err != nil {
			_, err = s.failedWrite(ctx, "compare-and-delete", key, expected, writeid.ID{}, err)
			return err
		}
		if resp.Succeeded {
			return nil
		}
		rr := (*clientv3.GetResponse)(resp.Responses[0].GetResponseRange())
		if !heldOnly(rr, expected) {
			return s.conflict(key, expected, rr)
		}
		if err := poll.Wait(ctx); err != nil {
			return err
		}
	}
}

// KeysWithPrefix implements cas.Lister: the keys under prefix (of the
// store's own keyspace), in order. It is meant for tools and anti-entropy,
// not hot paths.
func (s *Store) KeysWithPrefix(ctx context.Context, prefix string) ([]string, error) {
	resp, err := s.cli.Get(ctx, s.data+prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		return nil, fmt.Errorf("etcdcas: keys %q: %w", prefix, err)
	}
	keys := make([]string, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		keys = append(keys, strings.TrimPrefix(string(kv.Key), s.data))
	}
	return keys, nil
}
