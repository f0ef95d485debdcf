package lab

import (
	"context"
	"errors"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/occkit/occkit/adapters/etcdcas"
	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/hybrid"
	"github.com/occkit/occkit/internal/servers"
)

var etcdSpecs = []backendSpec{
	{
		Name:  "etcd",
		About: "etcdcas on a one-member etcd started in process (UnsafeNoFsync)",
		Open:  openEtcd,
	},
}

// EtcdService is implemented by the etcd backend, for strategies that
// lock through etcd whatever backend holds the data.
type EtcdService interface {
	EtcdClient() *clientv3.Client
}

type etcdBackend struct {
	srv      *servers.Etcd // nil in a --procs child
	cli      *clientv3.Client
	endpoint string // the member's own URL (not the proxy's)
	server   string
}

// envLabEtcdURL passes the lab's etcd member to its --procs children.
const envLabEtcdURL = "OCCKIT_LAB_ETCD_URL"

// childEnv implements childEnver.
func (b *etcdBackend) childEnv() []string { return []string{envLabEtcdURL + "=" + b.endpoint} }

func (b *etcdBackend) close() {
	if b.srv != nil {
		b.srv.Close()
		b.srv = nil
	}
}

func openEtcd(ctx context.Context, env *Env) (service, error) {
	b := &etcdBackend{endpoint: env.getenv(envLabEtcdURL)}
	if b.endpoint == "" { // not a --procs child: start the member
		srv, err := servers.StartEtcd(ctx)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", errUnavailable, err)
		}
		b.srv, b.endpoint = srv, srv.Endpoint
		b.server = fmt.Sprintf("etcd %s, one member in process (go.etcd.io/etcd/server/v3/embed) at %s, started by the lab", srv.Version, srv.Endpoint)
	} else {
		b.server = "etcd at " + b.endpoint + ", the parent process's member"
	}
	b.server += env.via()
	ep, err := env.dialURL(b.endpoint)
	if err != nil {
		b.close()
		return nil, fmt.Errorf("%w: %w", errUnavailable, err)
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   []string{ep},
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
	})
	if err != nil {
		b.close()
		return nil, fmt.Errorf("%w: etcd client: %w", errUnavailable, err)
	}
	b.cli = cli
	env.logf("etcd: %s (UnsafeNoFsync)", b.server)
	return b, nil
}

func (b *etcdBackend) EtcdClient() *clientv3.Client { return b.cli }

var etcdTuning = retryTuning{Retryable: etcdcas.Retryable}

func (b *etcdBackend) Info() backendInfo {
	return backendInfo{
		Name:       "etcd",
		Server:     b.server,
		Durability: "UnsafeNoFsync: writes are not fsynced (throwaway data)",
		Locker:     "etcdcas.Locker (etcd lease, 10 s TTL; token = the grant's creation revision)",
		BackOff:    describeBackOff(etcdTuning),
	}
}

func (b *etcdBackend) tuning() retryTuning { return etcdTuning }

func (b *etcdBackend) NewStore(_ context.Context, ns string) (cas.Store, func(context.Context) error, error) {
	prefix := "lab/" + ns + "/"
	s, err := etcdcas.New(b.cli, etcdcas.Config{Prefix: prefix})
	if err != nil {
		return nil, nil, err
	}
	drop := func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		_, err := b.cli.Delete(ctx, prefix, clientv3.WithPrefix())
		return err
	}
	return s, drop, nil
}

func (b *etcdBackend) openStore(_ context.Context, ns string) (cas.Store, error) {
	return etcdcas.New(b.cli, etcdcas.Config{Prefix: "lab/" + ns + "/"})
}

func (b *etcdBackend) NewLocker(_ context.Context, ns string) (hybrid.Locker, func(context.Context) error, error) {
	l, err := etcdcas.NewLocker(b.cli, etcdcas.LockerConfig{Prefix: "lab-lease/" + ns + "/", TTL: 10 * time.Second})
	if err != nil {
		return nil, nil, err
	}
	return l, func(context.Context) error { return l.Close() }, nil
}

func (b *etcdBackend) Close(context.Context) error {
	err := b.cli.Close()
	b.close()
	if errors.Is(err, context.Canceled) {
		err = nil
	}
	return err
}
