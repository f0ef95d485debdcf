package versionvector

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/occ"
)

// Lister is a [cas.Store] that can list its keys. [SyncPrefix] needs both
// stores to implement it; [SyncKeys] works with any store.
type Lister = cas.Lister

// SyncStats counts what an anti-entropy pass did. It is a plain value.
type SyncStats struct {
	// Keys is the number of keys compared.
	Keys int
	// UpdatedA and UpdatedB are the numbers of keys written to the first
	// and to the second store: those that lacked something the other had.
	UpdatedA, UpdatedB int
}

func (s *SyncStats) add(t SyncStats) {
	s.Keys += t.Keys
	s.UpdatedA += t.UpdatedA
	s.UpdatedB += t.UpdatedB
}

// raw reads and writes sets without decoding their values: anti-entropy and
// pruning only move values, whatever their type.
var raw = SetCodec(cas.Bytes())

// Sync is anti-entropy for one key between two stores (two regions): after
// it, each store's set for key holds everything either held when Sync read
// it (the union, [Set.Sync]), so writes made in one region reach the other
// and concurrent ones become siblings in both. A key that exists in neither
// store is left alone.
//
// Sync reads b, merges into a with a compare-and-swap, then merges a's
// result into b the same way; each write is retried on conflict with
// occ.Retry (opts are its options), so Sync may run while Puts go on in both
// regions, and a store that already holds the union is not written. It
// decodes neither store's values, so one Sync serves registers of every type.
func Sync(ctx context.Context, a, b cas.Store, key string, opts ...occ.Option) (SyncStats, error) {
	st := SyncStats{Keys: 1}
	sb, _, err := getRaw(ctx, b, key)
	if err != nil {
		return SyncStats{}, fmt.Errorf("versionvector: sync %q: %w", key, err)
	}
	ma, wroteA, err := mergeInto(ctx, a, key, sb, opts)
	if err != nil {
		return SyncStats{}, fmt.Errorf("versionvector: sync %q: %w", key, err)
	}
	if wroteA {
		st.UpdatedA++
	}
	_, wroteB, err := mergeInto(ctx, b, key, ma, opts)
	if err != nil {
		return st, fmt.Errorf("versionvector: sync %q: %w", key, err)
	}
	if wroteB {
		st.UpdatedB++
	}
	return st, nil
}

// SyncKeys runs Sync for each key. A key that fails does not stop the
// others; the error joins every key's error (a context that ends stops the
// pass and is among them). It works with any store.
func SyncKeys(ctx context.Context, a, b cas.Store, keys []string, opts ...occ.Option) (SyncStats, error) {
	var (
		total SyncStats
		errs  []error
	)
	for _, key := range keys {
		st, err := Sync(ctx, a, b, key, opts...)
		total.add(st)
		if err != nil {
			errs = append(errs, err)
			if ctx.Err() != nil {
				break
			}
		}
	}
	return total, errors.Join(errs...)
}

// SyncPrefix runs Sync for every key under prefix in either store. Both
// stores must implement [Lister]; otherwise it fails with an error matching
// errors.ErrUnsupported and syncs nothing (use SyncKeys with a key list of
// your own).
func SyncPrefix(ctx context.Context, a, b cas.Store, prefix string, opts ...occ.Option) (SyncStats, error) {
	var keys []string
	for _, s := range []cas.Store{a, b} {
		l, ok := s.(Lister)
		if !ok {
			return SyncStats{}, fmt.Errorf("versionvector: sync prefix %q: store %T cannot list keys: %w", prefix, s, errors.ErrUnsupported)
		}
		k, err := l.KeysWithPrefix(ctx, prefix)
		if err != nil {
			return SyncStats{}, fmt.Errorf("versionvector: sync prefix %q: %w", prefix, err)
		}
		keys = append(keys, k...)
	}
	slices.Sort(keys)
	return SyncKeys(ctx, a, b, slices.Compact(keys), opts...)
}

// Prune removes the entries of retired replicas from key's set in s where
// they hold no sibling ([Set.Prune]), with a compare-and-swap retried by
// occ.Retry. Run it on every store, after the replicas stopped writing and
// anti-entropy has run everywhere; see the package documentation, "Retiring
// a replica". A missing key is left alone.
func Prune(ctx context.Context, s cas.Store, key string, retired []string, opts ...occ.Option) error {
	err := occ.Retry(ctx, func(ctx context.Context) error {
		cur, ver, err := getRaw(ctx, s, key)
		if err != nil || ver == 0 {
			return err
		}
		next := cur.Prune(retired...)
		if sameDots(next, cur) {
			return nil
		}
		_, err = casRaw(ctx, s, key, ver, next)
		return err
	}, opts...)
	if err != nil {
		return fmt.Errorf("versionvector: prune %q: %w", key, err)
	}
	return nil
}

// getRaw reads key's set from s; a missing key is the empty set at version 0.
func getRaw(ctx context.Context, s cas.Store, key string) (Set[[]byte], cas.Version, error) {
	it, err := s.Get(ctx, key)
	if errors.Is(err, cas.ErrNotFound) {
		return Set[[]byte]{}, 0, nil
	}
	if err != nil {
		return Set[[]byte]{}, 0, err
	}
	var set Set[[]byte]
	if err := raw.Unmarshal(it.Value, &set); err != nil {
		return Set[[]byte]{}, 0, &cas.CodecError{Key: key, Decode: true, Err: err}
	}
	return set, it.Version, nil
}

func casRaw(ctx context.Context, s cas.Store, key string, expected cas.Version, set Set[[]byte]) (cas.Version, error) {
	b, err := raw.Marshal(set)
	if err != nil {
		return 0, &cas.CodecError{Key: key, Err: err}
	}
	return s.CompareAndSwap(ctx, key, expected, b)
}

// mergeInto makes s's set for key the union of what it holds and other,
// writing only if that adds something. It returns the set s holds after.
func mergeInto(ctx context.Context, s cas.Store, key string, other Set[[]byte], opts []occ.Option) (Set[[]byte], bool, error) {
	var (
		result Set[[]byte]
		wrote  bool
	)
	err := occ.Retry(ctx, func(ctx context.Context) error {
		cur, ver, err := getRaw(ctx, s, key)
		if err != nil {
			return err
		}
		next := cur.Sync(other)
		if sameDots(next, cur) {
			result, wrote = cur, false
			return nil
		}
		if _, err := casRaw(ctx, s, key, ver, next); err != nil {
			return err
		}
		result, wrote = next, true
		return nil
	}, opts...)
	return result, wrote, err
}
