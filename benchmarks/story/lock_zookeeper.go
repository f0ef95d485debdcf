package story

import (
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

// The zookeeper mode: ZooKeeper's lock recipe, written here with a
// context (go-zookeeper's zk.Lock waits without one): an ephemeral
// sequential node under the lock's node; the lowest holds the lock; every
// other waits for the deletion of the node just below its own.

type zkNopLogger struct{}

func (zkNopLogger) Printf(string, ...any) {}

func zkConnect(addr string, session time.Duration) (*zk.Conn, <-chan zk.Event, error) {
	return zk.Connect([]string{addr}, session, zk.WithLogger(zkNopLogger{}))
}

func openZooKeeperLock(_ context.Context, r *run) (lockService, error) {
	if r.spec.Endpoints.ZK == "" {
		return nil, errors.New("no ZooKeeper server")
	}
	conn, events, err := zkConnect(r.spec.Endpoints.ZK, r.spec.TTL)
	if err != nil {
		return nil, err
	}
	go drain(events)
	s := &zkLockService{conn: conn, dir: "/occkit-story." + r.spec.NS, ttl: r.spec.TTL}
	if _, err := conn.Create(s.dir, nil, 0, zk.WorldACL(zk.PermAll)); err != nil && !errors.Is(err, zk.ErrNodeExists) {
		conn.Close()
		return nil, fmt.Errorf("creating %s: %w", s.dir, err)
	}
	return s, nil
}

func drain(events <-chan zk.Event) {
	for range events {
	}
}

type zkLockService struct {
	conn *zk.Conn
	dir  string
	ttl  time.Duration
}

func (s *zkLockService) newLocker(_ context.Context, ep endpoints) (locker, error) {
	conn, events, err := zkConnect(ep.ZK, s.ttl)
	if err != nil {
		return nil, err
	}
	l := &zkLocker{conn: conn, dir: s.dir, sessionLost: make(chan struct{}), done: make(chan struct{})}
	go l.watchSession(events)
	return l, nil
}

// sortedChildren returns the lock's nodes, lowest sequence first.
func sortedChildren(conn *zk.Conn, dir string) ([]string, error) {
	children, _, err := conn.Children(dir)
	if err != nil {
		return nil, err
	}
	slices.SortFunc(children, func(a, b string) int { return compareInt(zkSeq(a), zkSeq(b)) })
	return children, nil
}

func compareInt(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// zkSeq returns the sequence number ZooKeeper appended to a node's name.
func zkSeq(name string) uint64 {
	i := strings.LastIndex(name, "-")
	n, _ := strconv.ParseUint(name[i+1:], 10, 64)
	return n
}

func (s *zkLockService) held(_ context.Context, ref string) (bool, error) {
	children, err := sortedChildren(s.conn, s.dir)
	if err != nil {
		return false, err
	}
	return len(children) > 0 && children[0] == path.Base(ref), nil
}

func (s *zkLockService) expireEarly(_ context.Context, ref string) (string, error) {
	if err := s.conn.Delete(ref, -1); err != nil {
		return "", fmt.Errorf("deleting %s: %w", ref, err)
	}
	return "the runner deleted the holder's lock node on the server, as its session's expiry would", nil
}

func (s *zkLockService) expired() string {
	return "its ZooKeeper session expired on the server: its ephemeral lock node is gone"
}

func (s *zkLockService) cleanup(context.Context) error {
	children, _, err := s.conn.Children(s.dir)
	if err != nil {
		return err
	}
	var errs []error
	for _, c := range children {
		if err := s.conn.Delete(s.dir+"/"+c, -1); err != nil && !errors.Is(err, zk.ErrNoNode) {
			errs = append(errs, err)
		}
	}
	if err := s.conn.Delete(s.dir, -1); err != nil && !errors.Is(err, zk.ErrNoNode) {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

func (s *zkLockService) close() { s.conn.Close() }

// zkLocker is one client's session and its lock.
type zkLocker struct {
	conn *zk.Conn
	dir  string

	mu          sync.Mutex
	sessionLost chan struct{} // closed when the current session expires
	done        chan struct{}
}

// watchSession closes sessionLost when the session expires (the client
// then opens a new one).
func (l *zkLocker) watchSession(events <-chan zk.Event) {
	defer close(l.done)
	for ev := range events {
		if ev.Type == zk.EventSession && ev.State == zk.StateExpired {
			l.mu.Lock()
			close(l.sessionLost)
			l.sessionLost = make(chan struct{})
			l.mu.Unlock()
		}
	}
}

func (l *zkLocker) close() {
	l.conn.Close()
	<-l.done
}

func (l *zkLocker) acquire(ctx context.Context) (grant, error) {
	l.mu.Lock()
	sessionLost := l.sessionLost
	l.mu.Unlock()
	node, err := l.conn.Create(l.dir+"/lock-", nil, zk.FlagEphemeralSequential, zk.WorldACL(zk.PermAll))
	if err != nil {
		return nil, fmt.Errorf("zookeeper: creating the lock node: %w", err)
	}
	giveBack := func() { _ = l.conn.Delete(node, -1) }
	for {
		children, err := sortedChildren(l.conn, l.dir)
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
		ok, _, ch, err := l.conn.ExistsW(l.dir + "/" + children[i-1])
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
	g := &zkGrant{l: l, node: node, lostCh: make(chan struct{}), stop: make(chan struct{}), done: make(chan struct{})}
	_, _, own, err := l.conn.ExistsW(node)
	if err != nil {
		giveBack()
		return nil, err
	}
	go g.watch(own, sessionLost)
	return g, nil
}

type zkGrant struct {
	l      *zkLocker
	node   string
	lostCh chan struct{}
	cause  string
	stop   chan struct{}
	done   chan struct{}
}

// token is the node's place in the lock's sequence, from 1 (ZooKeeper
// numbers the nodes from 0).
func (g *zkGrant) token() uint64              { return zkSeq(g.node) + 1 }
func (g *zkGrant) ref() string                { return g.node }
func (g *zkGrant) expires() (time.Time, bool) { return time.Time{}, false }
func (g *zkGrant) lost() <-chan struct{}      { return g.lostCh }
func (g *zkGrant) lostCause() string          { return g.cause }

// watch closes lostCh when the grant's node is deleted or its session
// expires, as the client learns it.
func (g *zkGrant) watch(own <-chan zk.Event, sessionLost <-chan struct{}) {
	defer close(g.done)
	select {
	case <-g.stop:
		return
	case ev := <-own:
		if ev.Type == zk.EventNodeDeleted {
			g.cause = "its client was told its lock node was deleted"
		} else {
			g.cause = fmt.Sprintf("its client's watch on its lock node ended (%v: the connection was lost or the session expired)", ev.Type)
		}
	case <-sessionLost:
		g.cause = "its client was told its session had expired"
	}
	close(g.lostCh)
}

func (g *zkGrant) release(context.Context) error {
	close(g.stop)
	<-g.done
	var err error
	for range 3 {
		// A client that is reconnecting (after a partition) fails the
		// requests it queued meanwhile: try again.
		err = g.l.conn.Delete(g.node, -1)
		if !errors.Is(err, zk.ErrNoServer) && !errors.Is(err, zk.ErrConnectionClosed) {
			break
		}
	}
	if err != nil && !errors.Is(err, zk.ErrNoNode) {
		return err
	}
	return nil
}
