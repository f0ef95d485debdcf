package locks

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/occkit/occkit/hybrid"
)

// Lease is a hybrid.Locker (pgcas's advisory locks, etcdcas, rediscas) as
// a Locker: a grant is a lease, its Ref its fencing token in decimal, and
// it is lost when the lease's Context ends.
func Lease(l hybrid.Locker) Locker { return leaseLocker{l} }

type leaseLocker struct{ l hybrid.Locker }

func (l leaseLocker) Acquire(ctx context.Context, name string) (Grant, error) {
	lease, err := l.l.Acquire(ctx, name)
	if err != nil {
		return nil, err
	}
	return leaseGrant{lease}, nil
}

type leaseGrant struct{ lease hybrid.Lease }

func (g leaseGrant) Ref() string   { return strconv.FormatUint(g.lease.Token(), 10) }
func (g leaseGrant) Token() uint64 { return g.lease.Token() }

// Expires is the lease's expiry when it is a hybrid.ExpiringLease (which
// its locker renews).
func (g leaseGrant) Expires() (time.Time, bool) {
	if e, ok := g.lease.(hybrid.ExpiringLease); ok {
		return e.Expires(), true
	}
	return time.Time{}, false
}

func (g leaseGrant) Lost() <-chan struct{} { return g.lease.Context().Done() }

func (g leaseGrant) LostCause() string {
	if err := context.Cause(g.lease.Context()); err != nil {
		return err.Error()
	}
	return ""
}

func (g leaseGrant) Release(ctx context.Context) error { return g.lease.Release(ctx) }

// EtcdMutex is etcd's concurrency.Mutex on one session. A session is one
// etcd lease, and a Mutex's key is its prefix plus the lease: two
// goroutines sharing a session would both "hold" a lock, so use an
// EtcdMutex per client (a process, a worker).
type EtcdMutex struct{ Session *concurrency.Session }

// Acquire takes the mutex whose key prefix is name.
func (l EtcdMutex) Acquire(ctx context.Context, name string) (Grant, error) {
	m := concurrency.NewMutex(l.Session, name)
	if err := m.Lock(ctx); err != nil {
		return nil, err
	}
	return etcdGrant{m: m}, nil
}

type etcdGrant struct {
	bare
	m *concurrency.Mutex
}

// Ref is the mutex's key.
func (g etcdGrant) Ref() string                       { return g.m.Key() }
func (g etcdGrant) Release(ctx context.Context) error { return g.m.Unlock(ctx) }

// Local is a sync.Mutex per name in this process, for a fixed set of
// names (no lookup under a lock): correct only while one process writes.
type Local map[string]*sync.Mutex

// NewLocal returns a Local with a mutex for each of names.
func NewLocal(names []string) Local {
	l := make(Local, len(names))
	for _, n := range names {
		l[n] = new(sync.Mutex)
	}
	return l
}

// Acquire locks name's mutex; a name not given to NewLocal is an error.
func (l Local) Acquire(_ context.Context, name string) (Grant, error) {
	m, ok := l[name]
	if !ok {
		return nil, fmt.Errorf("locks: no local lock %q", name)
	}
	m.Lock()
	return localGrant{m: m}, nil
}

type localGrant struct {
	bare
	m *sync.Mutex
}

func (g localGrant) Ref() string                   { return "" }
func (g localGrant) Release(context.Context) error { g.m.Unlock(); return nil }
