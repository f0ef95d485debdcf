package memcas

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/occkit/occkit/cas"
)

const numShards = 64

// Store is an in-memory versioned key-value store. The zero value is not
// usable; call New or NewWithConfig. A Store is safe for concurrent use.
type Store struct {
	limits cas.Limits
	clock  atomic.Uint64
	shards [numShards]shard
}

type shard struct {
	mu sync.RWMutex
	m  map[string]entry
	_  [64 - 32]byte // keep shards on separate cache lines
}

// entry is a key's state. version == 0 marks a tombstone that only keeps the
// key's fencing token.
type entry struct {
	value   []byte
	version cas.Version
	token   uint64
}

// Config configures a Store. The zero value is the configuration of New.
type Config struct {
	// Limits are the key, value and commit limits; zero fields mean
	// cas's defaults (cas.DefaultMaxKeyBytes, cas.DefaultMaxValueBytes,
	// cas.DefaultMaxCommitOps, no commit byte limit). Negative fields
	// are refused.
	Limits cas.Limits
}

// New returns an empty Store with the default limits.
func New() *Store {
	s, _ := NewWithConfig(Config{}) // the zero Config is valid
	return s
}

// NewWithConfig returns an empty Store configured by cfg.
func NewWithConfig(cfg Config) (*Store, error) {
	if err := cfg.Limits.Within(cas.Limits{}); err != nil {
		return nil, fmt.Errorf("memcas: %w", err)
	}
	s := &Store{limits: cfg.Limits.WithDefaults()}
	for i := range s.shards {
		s.shards[i].m = make(map[string]entry)
	}
	return s, nil
}

var (
	_ cas.Store       = (*Store)(nil)
	_ cas.FencedStore = (*Store)(nil)
	_ cas.Committer   = (*Store)(nil)
	_ cas.Lister      = (*Store)(nil)
	_ cas.BatchGetter = (*Store)(nil)
	_ cas.Adder       = (*Store)(nil)
)

// Limits returns the limits the store enforces.
func (s *Store) Limits() cas.Limits { return s.limits }

// String returns "memcas".
func (s *Store) String() string { return "memcas" }

func shardIndex(key string) int {
	// FNV-1a, inlined to avoid allocating a hash.Hash.
	h := uint32(2166136261)
	for i := 0; i < len(key); i++ {
		h ^= uint32(key[i])
		h *= 16777619
	}
	return int(h % numShards)
}

func (s *Store) shard(key string) *shard { return &s.shards[shardIndex(key)] }

// Get implements cas.Store.
func (s *Store) Get(ctx context.Context, key string) (cas.Item, error) {
	if err := s.limits.Get(ctx, key); err != nil {
		return cas.Item{}, err
	}
	sh := s.shard(key)
	sh.mu.RLock()
	e := sh.m[key]
	var v []byte
	if e.version != 0 {
		v = clone(e.value)
	}
	sh.mu.RUnlock()
	if e.version == 0 {
		return cas.Item{}, &cas.KeyError{Op: "get", Key: key, Err: cas.ErrNotFound}
	}
	return cas.Item{Key: key, Value: v, Version: e.version}, nil
}

// GetMany implements cas.BatchGetter: each key is read as Get reads it.
func (s *Store) GetMany(ctx context.Context, keys []string) ([]cas.Item, error) {
	if err := s.limits.GetMany(ctx, keys); err != nil {
		return nil, err
	}
	out := make([]cas.Item, len(keys))
	for i, key := range keys {
		sh := s.shard(key)
		sh.mu.RLock()
		e := sh.m[key]
		out[i] = cas.Item{Key: key, Version: e.version}
		if e.version != 0 {
			out[i].Value = clone(e.value)
		}
		sh.mu.RUnlock()
	}
	return out, nil
}

// CompareAndSwap implements cas.Store.
func (s *Store) CompareAndSwap(ctx context.Context, key string, expected cas.Version, value []byte) (cas.Version, error) {
	return s.put(ctx, key, expected, 0, false, value)
}

// CompareAndSwapFenced implements cas.FencedStore.
func (s *Store) CompareAndSwapFenced(ctx context.Context, key string, expected cas.Version, token uint64, value []byte) (cas.Version, error) {
	return s.put(ctx, key, expected, token, true, value)
}

func (s *Store) put(ctx context.Context, key string, expected cas.Version, token uint64, fenced bool, value []byte) (cas.Version, error) {
	if err := s.limits.Put(ctx, key, value); err != nil {
		return 0, err
	}
	v := clone(value)
	sh := s.shard(key)
	sh.mu.Lock()
	e := sh.m[key]
	if fenced && token < e.token {
		sh.mu.Unlock()
		return 0, fencedError(key, token, e.token)
	}
	if e.version != expected {
		err := conflict(key, expected, e)
		sh.mu.Unlock()
		return 0, err
	}
	if fenced {
		e.token = token
	}
	e.value = v
	e.version = cas.Version(s.clock.Add(1))
	sh.m[key] = e
	sh.mu.Unlock()
	return e.version, nil
}

// Add implements cas.Adder: the key's shard is locked for the check and
// the write, so concurrent deltas of one key never conflict.
func (s *Store) Add(ctx context.Context, key string, n int64, b cas.Bounds) (int64, cas.Version, error) {
	if _, _, err := s.limits.Add(ctx, key, n, b); err != nil {
		return 0, 0, err
	}
	sh := s.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e := sh.m[key]
	var cur int64
	if e.version != 0 {
		var err error
		if cur, err = cas.ParseInt(key, e.value); err != nil {
			return 0, 0, err
		}
	}
	if !b.Allows(cur, n) {
		return 0, 0, &cas.BoundError{Key: key, Add: n, Bounds: b, Current: cur, HasCurrent: true}
	}
	next := cur + n
	e.value = cas.FormatInt(next)
	e.version = cas.Version(s.clock.Add(1))
	sh.m[key] = e
	return next, e.version, nil
}

// CompareAndDelete implements cas.Store.
func (s *Store) CompareAndDelete(ctx context.Context, key string, expected cas.Version) error {
	if err := s.limits.Delete(ctx, key, expected); err != nil {
		return err
	}
	sh := s.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e := sh.m[key]
	if e.version != expected {
		return conflict(key, expected, e)
	}
	s.remove(sh, key, e)
	return nil
}

// remove deletes key, leaving a tombstone if it carries a fencing token.
// The caller holds sh.mu.
func (s *Store) remove(sh *shard, key string, e entry) {
	if e.token == 0 {
		delete(sh.m, key)
		return
	}
	sh.m[key] = entry{token: e.token}
}

// Commit implements cas.Committer: it locks the shards of all keys in index
// order, checks every version, then applies every write.
func (s *Store) Commit(ctx context.Context, ops []cas.Op) ([]cas.Version, error) {
	if err := s.limits.Commit(ctx, ops); err != nil {
		return nil, err
	}
	idx := make([]int, 0, len(ops))
	for _, op := range ops {
		idx = append(idx, shardIndex(op.Key))
	}
	locked := slices.Clone(idx)
	slices.Sort(locked)
	locked = slices.Compact(locked)
	values := make([][]byte, len(ops))
	for i, op := range ops {
		if op.Kind == cas.OpPut {
			values[i] = clone(op.Value)
		}
	}
	for _, i := range locked {
		s.shards[i].mu.Lock()
	}
	defer func() {
		for _, i := range locked {
			s.shards[i].mu.Unlock()
		}
	}()
	for i, op := range ops {
		e := s.shards[idx[i]].m[op.Key]
		if e.version != op.Expected {
			return nil, conflict(op.Key, op.Expected, e)
		}
	}
	out := make([]cas.Version, len(ops))
	for i, op := range ops {
		sh := &s.shards[idx[i]]
		e := sh.m[op.Key]
		switch op.Kind {
		case cas.OpCheck:
			out[i] = op.Expected
		case cas.OpPut:
			e.value = values[i]
			e.version = cas.Version(s.clock.Add(1))
			sh.m[op.Key] = e
			out[i] = e.version
		case cas.OpDelete:
			s.remove(sh, op.Key, e)
		}
	}
	return out, nil
}

// KeysWithPrefix implements cas.Lister.
func (s *Store) KeysWithPrefix(ctx context.Context, prefix string) ([]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var keys []string
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.RLock()
		for k, e := range sh.m {
			if e.version != 0 && strings.HasPrefix(k, prefix) {
				keys = append(keys, k)
			}
		}
		sh.mu.RUnlock()
	}
	return keys, nil
}

func conflict(key string, expected cas.Version, e entry) error {
	cur := cas.Item{Key: key, Version: e.version}
	if e.version != 0 {
		cur.Value = clone(e.value)
	}
	return &cas.ConflictError{Key: key, Expected: expected, Current: cur, HasCurrent: true}
}

func fencedError(key string, token, highest uint64) error {
	return &cas.FencedError{Key: key, Token: token, Highest: highest}
}

func clone(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return slices.Clone(b)
}
