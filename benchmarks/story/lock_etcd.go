package story

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/occkit/occkit/adapters/etcdcas"
	"github.com/occkit/occkit/benchmarks/internal/backends"
	"github.com/occkit/occkit/benchmarks/internal/locks"
)

// The etcd mode: etcdcas.Locker, whose grants are keys attached to the
// client's lease; the token (the key's creation revision) is shown but
// the data is written without it.

// etcdLockName is the lock's name under the run's prefix.
const etcdLockName = "stock"

func openEtcdLock(_ context.Context, r *run) (lockService, error) {
	if r.spec.Endpoints.Etcd == "" {
		return nil, errors.New("no etcd server")
	}
	cli, err := backends.EtcdClient(5*time.Second, r.spec.Endpoints.Etcd)
	if err != nil {
		return nil, err
	}
	return &etcdLockService{cli: cli, prefix: "occkit-story/" + r.spec.NS + "/lock/", ttl: r.spec.TTL}, nil
}

type etcdLockService struct {
	cli    *clientv3.Client
	prefix string
	ttl    time.Duration
}

func (s *etcdLockService) newLocker(_ context.Context, ep endpoints) (*locker, error) {
	cli, err := backends.EtcdClient(5*time.Second, ep.Etcd)
	if err != nil {
		return nil, err
	}
	l, err := etcdcas.NewLocker(cli, etcdcas.LockerConfig{Prefix: s.prefix, TTL: max(s.ttl, time.Second)})
	if err != nil {
		cli.Close()
		return nil, err
	}
	return &locker{l: locks.Lease(l), name: etcdLockName, close: func() {
		_ = l.Close() // revokes the lease; fails harmlessly when it is gone
		cli.Close()
	}}, nil
}

// grantKeys returns the lock's grant keys, oldest first.
func (s *etcdLockService) grantKeys(ctx context.Context) (*clientv3.GetResponse, error) {
	return s.cli.Get(ctx, s.prefix+etcdLockName+"\x00", clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
}

// held: the oldest grant key of the lock was created at the token's
// revision.
func (s *etcdLockService) held(ctx context.Context, ref string) (bool, error) {
	rev, err := strconv.ParseInt(ref, 10, 64)
	if err != nil {
		return false, err
	}
	resp, err := s.grantKeys(ctx)
	if err != nil {
		return false, err
	}
	return len(resp.Kvs) > 0 && resp.Kvs[0].CreateRevision == rev, nil
}

func (s *etcdLockService) expireEarly(ctx context.Context, ref string) (string, error) {
	rev, err := strconv.ParseInt(ref, 10, 64)
	if err != nil {
		return "", err
	}
	found, err := backends.RevokeEtcdGrant(ctx, s.cli, s.prefix, etcdLockName, rev)
	if err == nil && !found {
		err = fmt.Errorf("no grant key created at revision %d", rev)
	}
	if err != nil {
		return "", err
	}
	return "the runner revoked the holder's etcd lease on the server, as its expiry would: its lock key went with it", nil
}

func (s *etcdLockService) expired() string {
	return "its etcd lease expired on the server: its lock key is gone"
}

func (s *etcdLockService) cleanup(ctx context.Context) error {
	_, err := s.cli.Delete(ctx, s.prefix, clientv3.WithPrefix())
	return err
}

func (s *etcdLockService) close() { s.cli.Close() }
