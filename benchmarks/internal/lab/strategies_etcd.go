package lab

import (
	"context"
	"fmt"
	"slices"

	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/occkit/occkit/benchmarks/internal/locks"
)

var etcdStrategies = []strategySpec{
	{
		Name:      "lock-etcd-mutex",
		Kind:      kindLock,
		About:     "etcd's concurrency.Mutex (one session per worker) around read, work and write; the data may live on any backend",
		SingleKey: true, MultiKey: true,
		// On etcd and etcd3 it is the data's own lock; on memory it
		// stands beside the other services' locks. PostgreSQL, Redis
		// and DynamoDB run the locks users pair with them (their own,
		// lock-redis, lock-redlock).
		DefaultOn: func(b string, _ bool) bool { return slices.Contains([]string{"memory", "etcd", "etcd3"}, b) },
		New:       newEtcdMutex,
	},
}

func newEtcdMutex(ctx context.Context, h *harness) (cellStrategy, error) {
	// The data's own etcd (etcd, etcd3), else the etcd backend's.
	cli := h.Backend.Etcd()
	if cli == nil {
		b, ok := h.lab.backend("etcd")
		if !ok {
			return nil, fmt.Errorf("the etcd backend is not open: %w", errNotApplicable)
		}
		cli = b.Etcd()
	}
	// A session per worker (see locks.EtcdMutex).
	return lockedPerWorker(h, "lab-mutex/"+h.NS+"/", func() (locks.Locker, func(), error) {
		s, err := concurrency.NewSession(cli, concurrency.WithTTL(10), concurrency.WithContext(context.WithoutCancel(ctx)))
		if err != nil {
			return nil, nil, fmt.Errorf("etcd session: %w", err)
		}
		return locks.EtcdMutex{Session: s}, func() { _ = s.Close() }, nil
	})
}
