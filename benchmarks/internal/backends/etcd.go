package backends

import (
	"context"
	"errors"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	grpcbackoff "google.golang.org/grpc/backoff"

	"github.com/occkit/occkit/adapters/etcdcas"
	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/hybrid"
)

// etcdDriver is an etcd client.
type etcdDriver struct{ cli *clientv3.Client }

func connectEtcd(s *Server, opts ClientOptions) (*etcdDriver, error) {
	ep := s.URL
	if opts.Via != "" {
		ep = "http://" + opts.Via
	}
	cli, err := EtcdClient(opts.DialTimeout, ep)
	if err != nil {
		return nil, err
	}
	return &etcdDriver{cli: cli}, nil
}

// EtcdClient returns a client of endpoints that reconnects soon after a
// drop (gRPC's default first wait is 1 s); dialTimeout bounds a
// connection attempt (0: 5 s).
func EtcdClient(dialTimeout time.Duration, endpoints ...string) (*clientv3.Client, error) {
	if dialTimeout <= 0 {
		dialTimeout = 5 * time.Second
	}
	return clientv3.New(clientv3.Config{
		Endpoints:   endpoints,
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
		DialOptions: []grpc.DialOption{grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           grpcbackoff.Config{BaseDelay: 20 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 500 * time.Millisecond},
			MinConnectTimeout: dialTimeout,
		})},
	})
}

func (d *etcdDriver) store(ns string) (cas.Store, error) {
	return etcdcas.New(d.cli, etcdcas.Config{Prefix: ns + "/"})
}

func (d *etcdDriver) create(context.Context, string) error { return nil }

func (d *etcdDriver) drop(ctx context.Context, ns string) error {
	_, err := d.cli.Delete(ctx, ns+"/", clientv3.WithPrefix())
	return err
}

// EtcdLockPrefix is the key prefix of the etcd locker named name
// (LockerConfig.Name).
func EtcdLockPrefix(name string) string { return name + "/lock/" }

func (d *etcdDriver) locker(_ context.Context, cfg LockerConfig) (hybrid.Locker, func() error, error) {
	l, err := etcdcas.NewLocker(d.cli, etcdcas.LockerConfig{Prefix: EtcdLockPrefix(cfg.Name), TTL: cfg.TTL})
	if err != nil {
		return nil, nil, err
	}
	return l, l.Close, nil
}

func (d *etcdDriver) describe(context.Context) (string, string, error) {
	return "", "UnsafeNoFsync: writes are not fsynced (throwaway data)", nil
}

func (d *etcdDriver) dropScope(context.Context) error { return nil }
func (d *etcdDriver) native(c *Client)                { c.etcd = d.cli }

func (d *etcdDriver) close() error {
	if err := d.cli.Close(); !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}

// RevokeEtcdGrant ends the grant of etcdcas.Locker's lock name under
// prefix (its key prefix + name + "\x00...") created at revision rev (the
// grant's token) by revoking its session lease, as the lease's expiry
// would. found is false when no such grant is left.
func RevokeEtcdGrant(ctx context.Context, cli *clientv3.Client, prefix, name string, rev int64) (found bool, err error) {
	resp, err := cli.Get(ctx, prefix+name+"\x00", clientv3.WithPrefix())
	if err != nil {
		return false, err
	}
	for _, kv := range resp.Kvs {
		if kv.CreateRevision == rev {
			_, err := cli.Revoke(ctx, clientv3.LeaseID(kv.Lease))
			return true, err
		}
	}
	return false, nil
}
