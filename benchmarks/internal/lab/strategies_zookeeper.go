package lab

import (
	"context"
	"fmt"
	"time"

	"github.com/occkit/occkit/benchmarks/internal/locks"
)

var zookeeperStrategies = []strategySpec{
	{
		Name:      "lock-zookeeper",
		Kind:      kindLock,
		About:     "ZooKeeper's lock recipe (ephemeral sequential nodes, each waiter watching its predecessor; locks.ZooKeeper on go-zookeeper/zk, one session per worker) around read, work and write; the data may live on any backend",
		SingleKey: true, MultiKey: true,
		// The default run compares it with lock-etcd-mutex over the
		// in-process store, where the lock is the whole cost.
		DefaultOn: func(b string, _ bool) bool { return b == "memory" },
		New:       newZooKeeperLock,
	},
}

func newZooKeeperLock(_ context.Context, h *harness) (cellStrategy, error) {
	zk, ok := h.lab.backend("zookeeper")
	if !ok {
		return nil, fmt.Errorf("the zookeeper service is not open: %w", errNotApplicable)
	}
	// A lock node is ephemeral, tied to the session that created it.
	return lockedPerWorker(h, "/occbench/"+h.NS+"/", func() (locks.Locker, func(), error) {
		z, err := locks.DialZooKeeper(zk.ZooKeeperAddr(), 10*time.Second, false)
		if err != nil {
			return nil, nil, fmt.Errorf("zookeeper session: %w", err)
		}
		return z, z.Close, nil
	})
}
