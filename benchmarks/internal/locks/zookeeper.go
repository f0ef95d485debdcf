package locks

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"
)

// ZooKeeper is one ZooKeeper session and ZooKeeper's lock recipe on it,
// with a context (go-zookeeper's zk.Lock waits without one): a lock is a
// node whose children are ephemeral sequential nodes; the lowest holds the
// lock, and every other waits for the deletion of the node just below its
// own. A lock lasts as long as the session that created its node: use a
// ZooKeeper per client (a process, a worker), never one for several
// clients that must exclude each other.
type ZooKeeper struct {
	conn *zk.Conn
	// watchGrants: every grant watches its node (one more request per
	// acquisition) and its session, and is lost when either goes.
	watchGrants bool

	mu          sync.Mutex
	sessionLost chan struct{} // closed when the current session expires
	done        chan struct{}
}

type zkNopLogger struct{}

func (zkNopLogger) Printf(string, ...any) {}

// DialZooKeeper opens a session with the server at addr (session is its
// timeout). With watchGrants, a grant's Lost is closed when its node is
// deleted or the session expires; without, Lost is nil.
func DialZooKeeper(addr string, session time.Duration, watchGrants bool) (*ZooKeeper, error) {
	conn, events, err := zk.Connect([]string{addr}, session, zk.WithLogger(zkNopLogger{}))
	if err != nil {
		return nil, err
	}
	z := &ZooKeeper{conn: conn, watchGrants: watchGrants, sessionLost: make(chan struct{}), done: make(chan struct{})}
	go z.watchSession(events)
	return z, nil
}

// Conn returns the session's connection, for a look at the server.
func (z *ZooKeeper) Conn() *zk.Conn { return z.conn }

// Close ends the session: its nodes, and the locks they hold, go.
func (z *ZooKeeper) Close() {
	z.conn.Close()
	<-z.done
}

// watchSession closes sessionLost when the session expires (the client
// then opens a new one).
func (z *ZooKeeper) watchSession(events <-chan zk.Event) {
	defer close(z.done)
	for ev := range events {
		if ev.Type == zk.EventSession && ev.State == zk.StateExpired {
			z.mu.Lock()
			close(z.sessionLost)
			z.sessionLost = make(chan struct{})
			z.mu.Unlock()
		}
	}
}

// children returns the lock's nodes, lowest sequence first.
func (z *ZooKeeper) children(dir string) ([]string, error) {
	children, _, err := z.conn.Children(dir)
	if err != nil {
		return nil, err
	}
	slices.SortFunc(children, func(a, b string) int { return cmp.Compare(zkSeq(a), zkSeq(b)) })
	return children, nil
}

// zkSeq returns the sequence number ZooKeeper appended to a node's name.
func zkSeq(name string) uint64 {
	i := strings.LastIndex(name, "-")
	n, _ := strconv.ParseUint(name[i+1:], 10, 64)
	return n
}

// Holder returns the path of the node holding the lock dir ("" when none
// does).
func (z *ZooKeeper) Holder(dir string) (string, error) {
	children, err := z.children(dir)
	if err != nil || len(children) == 0 {
		return "", err
	}
	return dir + "/" + children[0], nil
}

// create creates the ephemeral sequential node of a waiter under dir,
// creating dir and its parents first when they are missing.
func (z *ZooKeeper) create(dir string) (string, error) {
	acl := zk.WorldACL(zk.PermAll)
	node, err := z.conn.Create(dir+"/lock-", nil, zk.FlagEphemeralSequential, acl)
	if !errors.Is(err, zk.ErrNoNode) {
		return node, err
	}
	for i := 1; i <= len(dir); i++ {
		if i == len(dir) || dir[i] == '/' {
			if _, err := z.conn.Create(dir[:i], nil, 0, acl); err != nil && !errors.Is(err, zk.ErrNodeExists) {
				return "", err
			}
		}
	}
	return z.conn.Create(dir+"/lock-", nil, zk.FlagEphemeralSequential, acl)
}

// Acquire takes the lock dir (an absolute node path). The grant's Ref is
// its node's path, its Token the node's place in the lock's sequence, from
// 1 (ZooKeeper numbers the nodes from 0). Its Release deletes the node; a
// node already gone (its session expired) is no error.
func (z *ZooKeeper) Acquire(ctx context.Context, dir string) (*Grant, error) {
	z.mu.Lock()
	sessionLost := z.sessionLost
	z.mu.Unlock()
	node, err := z.create(dir)
	if err != nil {
		return nil, fmt.Errorf("zookeeper: creating the lock node: %w", err)
	}
	giveBack := func() { _ = z.conn.Delete(node, -1) }
	for {
		children, err := z.children(dir)
		if err != nil {
			giveBack()
			return nil, err
		}
		i := slices.Index(children, path.Base(node))
		if i < 0 {
			return nil, fmt.Errorf("zookeeper: lock node %s is gone (session expired)", node)
		}
		if i == 0 {
			break
		}
		ok, _, ch, err := z.conn.ExistsW(dir + "/" + children[i-1])
		if err != nil {
			giveBack()
			return nil, err
		}
		if !ok {
			continue
		}
		select {
		case <-ch:
		case <-ctx.Done():
			giveBack()
			return nil, ctx.Err()
		}
	}
	g := &Grant{Ref: node, Token: zkSeq(node) + 1, release: func(context.Context) error { return z.delete(node) }}
	if z.watchGrants {
		_, _, own, err := z.conn.ExistsW(node)
		if err != nil {
			giveBack()
			return nil, err
		}
		g.watch(func(w *watch) { watchNode(w, own, sessionLost) })
	}
	return g, nil
}

// watchNode loses a grant when its node is deleted or its session
// expires, as the client learns it.
func watchNode(w *watch, own <-chan zk.Event, sessionLost <-chan struct{}) {
	select {
	case <-w.stop:
	case ev := <-own:
		if ev.Type == zk.EventNodeDeleted {
			w.lose("its client was told its lock node was deleted")
		} else {
			w.lose(fmt.Sprintf("its client's watch on its lock node ended (%v: the connection was lost or the session expired)", ev.Type))
		}
	case <-sessionLost:
		w.lose("its client was told its session had expired")
	}
}

// delete deletes a lock node; one already gone is no error.
func (z *ZooKeeper) delete(node string) error {
	var err error
	for range 3 {
		// A client that is reconnecting (after a partition) fails the
		// requests it queued meanwhile: try again.
		err = z.conn.Delete(node, -1)
		if !errors.Is(err, zk.ErrNoServer) && !errors.Is(err, zk.ErrConnectionClosed) {
			break
		}
	}
	if err != nil && !errors.Is(err, zk.ErrNoNode) {
		return err
	}
	return nil
}
