// Package servers starts the throwaway servers of the contention lab and
// of the fault-injection runs (benchmarks/cmd/occfaults) outside of tests:
// an in-process etcd member or cluster (whose leader can be crashed), and
// PostgreSQL or Redis through the repository's scripts/servers/<name>.sh
// run standalone (which can be restarted with their data).
// (internal/etcdtest does the same for tests, but needs a testing.TB.)
package servers

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/version"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// Etcd is a running in-process etcd member.
type Etcd struct {
	// Endpoint is the member's client URL (http://127.0.0.1:port).
	Endpoint string
	// Version is the embedded server's version.
	Version string
	e       *embed.Etcd
	dir     string
}

// StartEtcd starts a one-member etcd in process, on free 127.0.0.1 ports,
// with its data in a temporary directory and fsync off (UnsafeNoFsync:
// throwaway data, and the same durability as the lab's PostgreSQL with
// fsync=off). It waits until the member serves.
func StartEtcd(ctx context.Context) (*Etcd, error) {
	// Free ports are found by binding and releasing them, so another
	// process may take one first: try again with new ports.
	var err error
	for attempt := 1; attempt <= 3; attempt++ {
		var e *Etcd
		if e, err = startEtcd(ctx); err == nil {
			return e, nil
		}
		if !strings.Contains(err.Error(), "address already in use") {
			break
		}
	}
	return nil, err
}

func startEtcd(ctx context.Context) (*Etcd, error) {
	dir, err := os.MkdirTemp("", "occbench-etcd-")
	if err != nil {
		return nil, err
	}
	peer, err := freeURL()
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	client, err := freeURL()
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	cfg := memberConfig("lab", dir, peer, client)
	cfg.InitialCluster = fmt.Sprintf("lab=%s", peer)
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("etcd: %w", err)
	}
	srv := &Etcd{Endpoint: client.String(), e: e, dir: dir, Version: version.Version}
	select {
	case <-e.Server.ReadyNotify():
		return srv, nil
	case err := <-e.Err():
		srv.Close()
		return nil, fmt.Errorf("etcd: %w", err)
	case <-ctx.Done():
		srv.Close()
		return nil, ctx.Err()
	case <-time.After(30 * time.Second):
		srv.Close()
		return nil, errors.New("etcd: not ready after 30 s")
	}
}

// memberConfig is the configuration of one lab member named name, with
// its data in dir, its peer and client URLs, fsync off and no logging.
// The caller sets InitialCluster.
func memberConfig(name, dir string, peer, client *url.URL) *embed.Config {
	cfg := embed.NewConfig()
	cfg.Name = name
	cfg.Dir = dir
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*peer}, []url.URL{*peer}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*client}, []url.URL{*client}
	cfg.InitialClusterToken = "occbench"
	cfg.UnsafeNoFsync = true
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	return cfg
}

// Close stops the member and removes its data. Close its clients first,
// or the shutdown waits for them.
func (e *Etcd) Close() {
	e.e.Close()
	os.RemoveAll(e.dir)
}

func freeURL() (*url.URL, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("finding a free port: %w", err)
	}
	addr := l.Addr().String()
	l.Close()
	return &url.URL{Scheme: "http", Host: addr}, nil
}
