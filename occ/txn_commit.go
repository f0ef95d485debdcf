package occ

import (
	"context"
	"errors"
	"fmt"

	"github.com/occkit/occkit/cas"
)

// commit validates the reads and applies the writes.
func (tx *Tx) commit() error {
	if len(tx.writes) == 0 && len(tx.reads) == 0 {
		return nil
	}
	keys := tx.keys()

	committer, notCommitter := cas.AsCommitter(tx.store)
	if notCommitter != nil {
		switch {
		case len(tx.writes) == 0:
			return tx.validateReads()
		case len(keys) > 1:
			return fmt.Errorf("occ: transaction writing with %d keys: %w", len(keys), notCommitter)
		}
	}

	ops, err := tx.ops()
	if err != nil {
		return err
	}
	var versions []cas.Version
	if notCommitter == nil {
		versions, err = committer.Commit(tx.ctx, ops)
	} else {
		var v cas.Version
		v, err = applyOne(tx.ctx, tx.store, ops[0])
		versions = []cas.Version{v}
	}
	if err == nil {
		tx.noteWritten(ops, versions, tx.cache)
	}
	return err
}

// ops returns the commit's operations, in key order: a check of every key
// read and not written, a put or a delete at the version read of every
// key written (blind writes are read here, in one round trip where the
// store can).
func (tx *Tx) ops() ([]cas.Op, error) {
	var blind []string
	for k := range tx.writes {
		if _, read := tx.reads[k]; !read {
			blind = append(blind, k)
		}
	}
	if len(blind) > 1 {
		if err := tx.fetch(blind, false); err != nil {
			return nil, err
		}
	}
	keys := tx.keys()
	ops := make([]cas.Op, 0, len(keys))
	for _, k := range keys {
		r, err := tx.read(k)
		if err != nil {
			return nil, err
		}
		w, written := tx.writes[k]
		switch {
		case !written:
			ops = append(ops, cas.Check(k, r.Version))
		case w.del && r.Version == 0:
			ops = append(ops, cas.Check(k, 0))
		case w.del:
			ops = append(ops, cas.Delete(k, r.Version))
		default:
			ops = append(ops, cas.Put(k, r.Version, w.value))
		}
	}
	return ops, nil
}

// noteWritten records what a commit of ops wrote (tx.written), and puts
// it in cache when there is one.
func (tx *Tx) noteWritten(ops []cas.Op, versions []cas.Version, cache *Cache) {
	tx.written = make(map[string]cas.Item, len(ops))
	for i, op := range ops {
		switch op.Kind {
		case cas.OpPut:
			tx.written[op.Key] = cas.Item{Key: op.Key, Value: op.Value, Version: versions[i]}
		case cas.OpDelete:
			tx.written[op.Key] = cas.Item{Key: op.Key}
		default:
			continue
		}
		if cache != nil {
			cache.put(tx.written[op.Key])
		}
	}
}

// cachedRead returns key's cached state when the transaction uses a cache,
// or the state the process remembers at it (recent.go) when it has none.
// The commit validates it like any other read, so a stale entry costs a
// conflict and a retry, never a wrong commit.
func (tx *Tx) cachedRead(key string) (cas.Item, bool) {
	if !tx.readCache {
		return cas.Item{}, false
	}
	if tx.cache != nil {
		it, ok := tx.cache.serve(key)
		if ok {
			if tx.cached == nil {
				tx.cached = map[string]bool{}
			}
			tx.cached[key] = true
		}
		return it, ok
	}
	it, ok := recalled(tx.store, key)
	if ok {
		if tx.recent == nil {
			tx.recent = map[string]bool{}
		}
		tx.recent[key] = true
	}
	return it, ok
}

// validateReads checks that every key read still has its version. Because
// versions are never reused, a key found at the same version was at that
// version all along, so the reads held together at the moment of the last
// read: the read-only transaction is serializable.
func (tx *Tx) validateReads() error {
	for k, r := range tx.reads {
		it, err := tx.store.Get(tx.ctx, k)
		switch {
		case errors.Is(err, cas.ErrNotFound):
			it = cas.Item{Key: k}
		case err != nil:
			return err
		}
		if it.Version != r.Version {
			return &cas.ConflictError{Key: k, Expected: r.Version, Current: it, HasCurrent: true}
		}
	}
	return nil
}

// applyOne applies a single op on a store without Committer and returns
// the version Commit would have.
func applyOne(ctx context.Context, s cas.Store, op cas.Op) (cas.Version, error) {
	switch op.Kind {
	case cas.OpPut:
		return s.CompareAndSwap(ctx, op.Key, op.Expected, op.Value)
	case cas.OpDelete:
		return 0, s.CompareAndDelete(ctx, op.Key, op.Expected)
	}
	// OpCheck of an absent key that the transaction deleted.
	it, err := s.Get(ctx, op.Key)
	switch {
	case errors.Is(err, cas.ErrNotFound):
		return 0, nil
	case err != nil:
		return 0, err
	}
	return 0, &cas.ConflictError{Key: op.Key, Expected: op.Expected, Current: it, HasCurrent: true}
}
