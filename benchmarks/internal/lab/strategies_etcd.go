package lab

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"go.etcd.io/etcd/client/v3/concurrency"
)

var etcdStrategies = []strategySpec{
	{
		Name:      "lock-etcd-mutex",
		Kind:      kindLock,
		About:     "etcd's concurrency.Mutex (one session per worker) around read, work and write; the data may live on any backend",
		SingleKey: true, MultiKey: true,
		// On etcd it is the data's own lock; on memory it stands beside
		// the other services' locks. PostgreSQL, Redis and DynamoDB
		// run the locks users pair with them (their own, lock-redis,
		// lock-redlock).
		DefaultOn: func(b string, _ bool) bool { return slices.Contains([]string{"memory", "etcd"}, b) },
		New:       newEtcdMutex,
	},
}

func newEtcdMutex(ctx context.Context, h *harness) (cellStrategy, error) {
	svc, _ := h.Service("etcd")
	es, ok := svc.(EtcdService)
	if !ok {
		return nil, fmt.Errorf("the etcd backend is not open: %w", errNotApplicable)
	}
	cli := es.EtcdClient()
	sessions := make([]*concurrency.Session, h.Cell.Workers)
	closeAll := func() error {
		var errs []error
		for _, s := range sessions {
			if s != nil {
				errs = append(errs, s.Close())
			}
		}
		return errors.Join(errs...)
	}
	for i := range sessions {
		s, err := concurrency.NewSession(cli, concurrency.WithTTL(10), concurrency.WithContext(context.WithoutCancel(ctx)))
		if err != nil {
			_ = closeAll()
			return nil, fmt.Errorf("etcd session: %w", err)
		}
		sessions[i] = s
	}
	h.OnClose(func(context.Context) error { return closeAll() })
	// A session is one lease, and a Mutex's key is its prefix plus the
	// lease: two goroutines sharing a session would both "hold" a lock,
	// so each worker has its own.
	return lockedDo(h, func(ctx context.Context, w int, name string) (func(), error) {
		m := concurrency.NewMutex(sessions[w], "lab-mutex/"+name)
		if err := m.Lock(ctx); err != nil {
			return nil, err
		}
		return func() {
			uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			_ = m.Unlock(uctx)
		}, nil
	}), nil
}
