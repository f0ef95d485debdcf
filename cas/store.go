package cas

import (
	"context"
	"errors"
)

// Version is the version a store gave a key's current state. 0 means the key
// does not exist. A key's versions strictly increase over its whole history
// and are never reused, also across delete and re-create, so a version seen
// once identifies one state (no ABA).
type Version uint64

// Item is a key's state: its value and the version the store gave it.
type Item struct {
	Key   string
	Value []byte
	// Version is the key's version when Value was read: the expected
	// version of the next conditional write (0: the key is absent).
	Version Version
}

// Store is a versioned key-value store with compare-and-swap. Every adapter
// implements it, and every implementation is safe for concurrent use.
//
// Implementations validate their input with [Limits] before talking to the
// backend, return the sentinel errors of this package (wrapped, matched with
// errors.Is), honour ctx, and never keep or modify the slices passed in or
// returned.
type Store interface {
	// Get returns the key's current item, or an error matching ErrNotFound
	// when the key does not exist.
	Get(ctx context.Context, key string) (Item, error)

	// CompareAndSwap writes value only if the key's version is expected
	// (0: only if the key does not exist) and returns the new version.
	// Otherwise it fails with a *ConflictError.
	CompareAndSwap(ctx context.Context, key string, expected Version, value []byte) (Version, error)

	// CompareAndDelete deletes the key only if its version is expected
	// (which must not be 0). Otherwise it fails with a *ConflictError.
	CompareAndDelete(ctx context.Context, key string, expected Version) error
}

// FencedStore is a Store that also checks fencing tokens in the write
// itself. Use it with a lock that hands out growing tokens (see package
// hybrid): a holder that lost its lock without knowing cannot overwrite the
// work of the next holder.
type FencedStore interface {
	Store

	// CompareAndSwapFenced writes only if the key's version is expected and
	// token is at least the largest token that has written the key, then
	// records token. A smaller token fails with an error matching ErrFenced
	// (checked before the version: a fenced-off writer must stop, not
	// retry). The largest token survives plain writes and deletes of the key.
	CompareAndSwapFenced(ctx context.Context, key string, expected Version, token uint64, value []byte) (Version, error)
}

// OpKind is the kind of one operation of a [Commit].
type OpKind uint8

// The kinds of commit operations.
const (
	// OpCheck asserts that the key's version is Expected and writes nothing.
	OpCheck OpKind = iota + 1
	// OpPut writes Value if the key's version is Expected (0: absent).
	OpPut
	// OpDelete deletes the key if its version is Expected (not 0).
	OpDelete
)

// String returns the kind's name.
func (k OpKind) String() string {
	switch k {
	case OpCheck:
		return "check"
	case OpPut:
		return "put"
	case OpDelete:
		return "delete"
	}
	return "invalid"
}

// Op is one operation of a multi-key commit.
type Op struct {
	Kind OpKind
	Key  string
	// Expected is the version the key must be at for the commit to apply
	// (0: the key must be absent).
	Expected Version
	Value    []byte // OpPut only
}

// Check returns an operation asserting that key is at version expected.
func Check(key string, expected Version) Op { return Op{Kind: OpCheck, Key: key, Expected: expected} }

// Put returns an operation writing value to key if it is at version expected.
func Put(key string, expected Version, value []byte) Op {
	return Op{Kind: OpPut, Key: key, Expected: expected, Value: value}
}

// Delete returns an operation deleting key if it is at version expected.
func Delete(key string, expected Version) Op { return Op{Kind: OpDelete, Key: key, Expected: expected} }

// Committer is a Store that applies several conditional operations
// atomically: either every operation's version matches and every write is
// applied, or nothing is. Callers detect the capability with a type
// assertion; occ.Txn uses it.
type Committer interface {
	Store

	// Commit applies ops atomically. It returns one version per op, in
	// order: the new version for OpPut, the checked version for OpCheck and
	// 0 for OpDelete. When a version does not match it fails with a
	// *ConflictError naming the first such key (in op order) and applies
	// nothing. A key may appear at most once.
	Commit(ctx context.Context, ops []Op) ([]Version, error)
}

// BatchGetter is a Store that reads several keys in one round trip:
// occ.Txn's Prefetch and its commit-time reads use it.
type BatchGetter interface {
	Store

	// GetMany returns the current item of each of keys, in keys' order;
	// a key that does not exist is an Item with its Key, Version 0 and a
	// nil Value (not an error). Keys must be valid and distinct, and at
	// most Limits.MaxCommitOps of them (see Limits.GetMany); no keys
	// returns no items. The items need not be read at one instant: each
	// is a state its key had during the call, as from Get.
	GetMany(ctx context.Context, keys []string) ([]Item, error)
}

// GetMany reads keys from s: in one round trip when s is a BatchGetter,
// otherwise with one Get per key. Absent keys come back as Items with
// Version 0, as BatchGetter.GetMany returns them.
func GetMany(ctx context.Context, s Store, keys []string) ([]Item, error) {
	if b, ok := s.(BatchGetter); ok {
		return b.GetMany(ctx, keys)
	}
	out := make([]Item, len(keys))
	for i, k := range keys {
		it, err := s.Get(ctx, k)
		switch {
		case errors.Is(err, ErrNotFound):
			it = Item{Key: k}
		case err != nil:
			return nil, err
		}
		out[i] = it
	}
	return out, nil
}

// Lister is a Store that can list its keys: tools and anti-entropy
// (versionvector.SyncPrefix) use it. Not meant for hot paths.
type Lister interface {
	Store

	// KeysWithPrefix returns the keys that exist and start with prefix
	// (every key for the empty prefix), in any order.
	KeysWithPrefix(ctx context.Context, prefix string) ([]string, error)
}
