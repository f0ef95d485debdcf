package backends

import (
	"context"
	"sync"
	"time"

	"github.com/occkit/occkit/adapters/memcas"
	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/hybrid"
)

// memoryDriver serves memcas stores, shared by the clients of one memory
// Server.
type memoryDriver struct{ stores *memoryStores }

func (d memoryDriver) store(ns string) (cas.Store, error) { return d.stores.get(ns), nil }

func (d memoryDriver) create(_ context.Context, ns string) error {
	d.stores.drop(ns) // a fresh store
	return nil
}

func (d memoryDriver) drop(_ context.Context, ns string) error {
	d.stores.drop(ns)
	return nil
}

func (memoryDriver) locker(_ context.Context, cfg LockerConfig) (hybrid.Locker, func() error, error) {
	return localLocker(cfg)
}

func (memoryDriver) describe(context.Context) (string, string, error) {
	return "", "none (process memory)", nil
}

func (memoryDriver) dropScope(context.Context) error { return nil }
func (memoryDriver) close() error                    { return nil }
func (memoryDriver) native(*Client)                  {}

// localLocker is the lease lock of the systems without a lock service:
// hybrid.NewLocalLocker, in this process.
func localLocker(cfg LockerConfig) (hybrid.Locker, func() error, error) {
	ttl := cfg.TTL
	if ttl <= 0 {
		ttl = 10 * time.Second
	}
	return hybrid.NewLocalLocker(ttl), func() error { return nil }, nil
}

// memoryStores are the stores of the memory "server": the clients of one
// memory Server share them, as clients of one database server would.
type memoryStores struct {
	mu sync.Mutex
	m  map[string]*memcas.Store
}

func (m *memoryStores) get(ns string) *memcas.Store {
	m.mu.Lock()
	defer m.mu.Unlock()
	s, ok := m.m[ns]
	if !ok {
		s = memcas.New()
		m.m[ns] = s
	}
	return s
}

func (m *memoryStores) drop(ns string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.m, ns)
}
