package lab

import (
	"context"
	"fmt"
	"time"

	"github.com/go-zookeeper/zk"
)

var zookeeperStrategies = []strategySpec{
	{
		Name:      "lock-zookeeper",
		Kind:      kindLock,
		About:     "ZooKeeper's lock recipe (ephemeral sequential nodes, each waiter watching its predecessor; go-zookeeper/zk, one session per worker) around read, work and write; the data may live on any backend",
		SingleKey: true, MultiKey: true,
		// The default run compares it with lock-etcd-mutex over the
		// in-process store, where the lock is the whole cost.
		DefaultOn: func(b string, _ bool) bool { return b == "memory" },
		New:       newZooKeeperLock,
	},
}

type zkNopLogger struct{}

func (zkNopLogger) Printf(string, ...any) {}

func newZooKeeperLock(_ context.Context, h *harness) (cellStrategy, error) {
	svc, _ := h.Service("zookeeper")
	zs, ok := svc.(ZooKeeperService)
	if !ok {
		return nil, fmt.Errorf("the zookeeper service is not open: %w", errNotApplicable)
	}
	conns := make([]*zk.Conn, h.Cell.Workers)
	closeAll := func() {
		for _, c := range conns {
			if c != nil {
				c.Close()
			}
		}
	}
	for i := range conns {
		c, _, err := zk.Connect([]string{zs.ZooKeeperAddr()}, 10*time.Second, zk.WithLogger(zkNopLogger{}))
		if err != nil {
			closeAll()
			return nil, fmt.Errorf("zookeeper session: %w", err)
		}
		conns[i] = c
	}
	h.OnClose(func(context.Context) error { closeAll(); return nil })
	acl := zk.WorldACL(zk.PermAll)
	// A session per worker, as a process would have one: a lock node is
	// ephemeral, tied to the session that created it.
	return lockedDo(h, func(_ context.Context, w int, name string) (func(), error) {
		l := zk.NewLock(conns[w], "/occbench/"+name, acl)
		if err := l.Lock(); err != nil {
			return nil, err
		}
		// An unlock that fails leaves the node to go with the session.
		return func() { _ = l.Unlock() }, nil
	}), nil
}
