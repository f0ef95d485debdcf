package story

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/occkit/occkit/benchmarks/internal/locks"
)

// The zookeeper mode: ZooKeeper's lock recipe (locks.ZooKeeper), a
// session per client, each grant watching its node and its session.

func openZooKeeperLock(_ context.Context, r *run) (lockService, error) {
	if r.spec.Endpoints.ZK == "" {
		return nil, errors.New("no ZooKeeper server")
	}
	z, err := locks.DialZooKeeper(r.spec.Endpoints.ZK, r.spec.TTL, false)
	if err != nil {
		return nil, err
	}
	return &zkLockService{z: z, dir: "/occkit-story." + r.spec.NS, ttl: r.spec.TTL}, nil
}

type zkLockService struct {
	z   *locks.ZooKeeper // direct, for looks at the server
	dir string           // the lock's node
	ttl time.Duration
}

func (s *zkLockService) newLocker(_ context.Context, ep endpoints) (*locker, error) {
	z, err := locks.DialZooKeeper(ep.ZK, s.ttl, true)
	if err != nil {
		return nil, err
	}
	return &locker{l: z, name: s.dir, close: z.Close}, nil
}

// held: the grant's node is the lowest of the lock's.
func (s *zkLockService) held(_ context.Context, ref string) (bool, error) {
	holder, err := s.z.Holder(s.dir)
	return err == nil && holder == ref, err
}

func (s *zkLockService) expireEarly(_ context.Context, ref string) (string, error) {
	if err := s.z.Conn().Delete(ref, -1); err != nil {
		return "", fmt.Errorf("deleting %s: %w", ref, err)
	}
	return "the runner deleted the holder's lock node on the server, as its session's expiry would", nil
}

func (s *zkLockService) expired() string {
	return "its ZooKeeper session expired on the server: its ephemeral lock node is gone"
}

func (s *zkLockService) cleanup(context.Context) error {
	conn := s.z.Conn()
	children, _, err := conn.Children(s.dir)
	if errors.Is(err, zk.ErrNoNode) {
		return nil
	}
	if err != nil {
		return err
	}
	var errs []error
	for _, c := range append(children, "") {
		p := s.dir
		if c != "" {
			p += "/" + c
		}
		if err := conn.Delete(p, -1); err != nil && !errors.Is(err, zk.ErrNoNode) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (s *zkLockService) close() { s.z.Close() }
