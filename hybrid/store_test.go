package hybrid_test

import (
	"context"
	"sync"

	"github.com/occkit/occkit/cas"
)

// fencedMap is a small in-memory cas.FencedStore for hybrid's tests and
// examples, which import no adapter (any cas.FencedStore will do:
// memcas.New(), or a PostgreSQL, etcd, Redis or DynamoDB store). Its
// versions come from one counter and are never reused; the largest token
// that wrote a key is kept after the key is deleted.
type fencedMap struct {
	mu      sync.Mutex
	version cas.Version
	items   map[string]cas.Item
	fences  map[string]uint64
}

func newFencedMap() *fencedMap {
	return &fencedMap{items: map[string]cas.Item{}, fences: map[string]uint64{}}
}

func (m *fencedMap) Get(ctx context.Context, key string) (cas.Item, error) {
	if err := (cas.Limits{}).Get(ctx, key); err != nil {
		return cas.Item{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	it, ok := m.items[key]
	if !ok {
		return cas.Item{}, &cas.KeyError{Op: "get", Key: key, Err: cas.ErrNotFound}
	}
	it.Value = append([]byte(nil), it.Value...)
	return it, nil
}

func (m *fencedMap) CompareAndSwap(ctx context.Context, key string, expected cas.Version, value []byte) (cas.Version, error) {
	return m.put(ctx, key, expected, 0, false, value)
}

func (m *fencedMap) CompareAndSwapFenced(ctx context.Context, key string, expected cas.Version, token uint64, value []byte) (cas.Version, error) {
	return m.put(ctx, key, expected, token, true, value)
}

func (m *fencedMap) put(ctx context.Context, key string, expected cas.Version, token uint64, fenced bool, value []byte) (cas.Version, error) {
	if err := (cas.Limits{}).Put(ctx, key, value); err != nil {
		return 0, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if highest := m.fences[key]; fenced && token < highest {
		return 0, &cas.FencedError{Key: key, Token: token, Highest: highest}
	}
	if err := m.check(key, expected); err != nil {
		return 0, err
	}
	if fenced {
		m.fences[key] = token
	}
	m.version++
	m.items[key] = cas.Item{Key: key, Value: append([]byte(nil), value...), Version: m.version}
	return m.version, nil
}

func (m *fencedMap) CompareAndDelete(ctx context.Context, key string, expected cas.Version) error {
	if err := (cas.Limits{}).Delete(ctx, key, expected); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.check(key, expected); err != nil {
		return err
	}
	delete(m.items, key)
	return nil
}

// check returns a conflict unless key is at expected; m.mu is held.
func (m *fencedMap) check(key string, expected cas.Version) error {
	cur := m.items[key]
	if cur.Version == expected {
		return nil
	}
	cur.Value = append([]byte(nil), cur.Value...)
	return &cas.ConflictError{Key: key, Expected: expected, Current: cur, HasCurrent: true}
}
