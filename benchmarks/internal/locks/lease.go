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

func (l leaseLocker) Acquire(ctx context.Context, name string) (*Grant, error) {
	lease, err := l.l.Acquire(ctx, name)
	if err != nil {
		return nil, err
	}
	g := &Grant{Ref: strconv.FormatUint(lease.Token(), 10), Token: lease.Token(), release: lease.Release}
	if e, ok := lease.(hybrid.ExpiringLease); ok {
		g.expires = func() (time.Time, bool) { return e.Expires(), true }
	}
	// The lease's Context ends when it is lost.
	g.lost = lease.Context().Done()
	g.cause = func() string {
		if err := context.Cause(lease.Context()); err != nil {
			return err.Error()
		}
		return ""
	}
	return g, nil
}

// EtcdMutex is etcd's concurrency.Mutex on one session. A session is one
// etcd lease, and a Mutex's key is its prefix plus the lease: two
// goroutines sharing a session would both "hold" a lock, so use an
// EtcdMutex per client (a process, a worker).
type EtcdMutex struct{ Session *concurrency.Session }

// Acquire takes the mutex whose key prefix is name.
// The grant's Ref is the mutex's key.
func (l EtcdMutex) Acquire(ctx context.Context, name string) (*Grant, error) {
	m := concurrency.NewMutex(l.Session, name)
	if err := m.Lock(ctx); err != nil {
		return nil, err
	}
	return &Grant{Ref: m.Key(), release: m.Unlock}, nil
}

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

// Acquire locks name's mutex, without ctx (a sync.Mutex waits without
// one); a name not given to NewLocal is an error.
func (l Local) Acquire(_ context.Context, name string) (*Grant, error) {
	m, ok := l[name]
	if !ok {
		return nil, fmt.Errorf("locks: no local lock %q", name)
	}
	m.Lock()
	return &Grant{release: func(context.Context) error { m.Unlock(); return nil }}, nil
}
