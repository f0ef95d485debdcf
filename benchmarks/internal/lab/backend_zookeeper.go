package lab

import (
	"context"
	"errors"
	"fmt"

	"github.com/occkit/occkit/internal/servers"
)

// EnvZooKeeperAddr names a ZooKeeper server (host:port) the lab uses;
// when it is unset, the lab starts one from Debian's zookeeper package if
// it is installed.
const EnvZooKeeperAddr = "OCCKIT_ZK_ADDR"

var zookeeperSpecs = []backendSpec{
	{
		Name:  "zookeeper",
		About: "ZooKeeper, lock service only (lock-zookeeper): OCCKIT_ZK_ADDR, or a standalone server started from Debian's zookeeper package",
		Open:  openZooKeeper,
	},
}

// ZooKeeperService is implemented by the zookeeper service, for the
// lock-zookeeper strategy.
type ZooKeeperService interface {
	ZooKeeperAddr() string
}

type zkService struct {
	// addr is where clients connect (a proxy with Env.Proxy); own is the
	// server's own address.
	addr, own, server, durability string
	srv                           *servers.ZooKeeper
}

// childEnv implements childEnver.
func (s *zkService) childEnv() []string { return []string{EnvZooKeeperAddr + "=" + s.own} }

func openZooKeeper(ctx context.Context, env *Env) (service, error) {
	if addr := env.getenv(EnvZooKeeperAddr); addr != "" {
		via, err := env.dial(addr)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", errUnavailable, err)
		}
		return &zkService{addr: via, own: addr, server: "ZooKeeper at " + addr + " (" + EnvZooKeeperAddr + ")" + env.via(), durability: "as configured on the server (not checked)"}, nil
	}
	if !env.StartServers {
		return nil, fmt.Errorf("%w: %s is not set, and starting servers is off", errUnavailable, EnvZooKeeperAddr)
	}
	srv, err := servers.StartZooKeeper(ctx)
	if errors.Is(err, servers.ErrZooKeeperNotInstalled) {
		return nil, fmt.Errorf("%w: %s is not set, and ZooKeeper is not installed (apt-get install zookeeper; the lab never installs servers)", errUnavailable, EnvZooKeeperAddr)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errUnavailable, err)
	}
	via, err := env.dial(srv.Addr)
	if err != nil {
		srv.Stop()
		return nil, fmt.Errorf("%w: %w", errUnavailable, err)
	}
	s := &zkService{
		addr:       via,
		own:        srv.Addr,
		server:     fmt.Sprintf("ZooKeeper %s standalone at %s (Debian's package), started by the lab; admin server off, four-letter words off%s", srv.Version, srv.Addr, env.via()),
		durability: "forceSync=no: the transaction log is not fsynced (throwaway data)",
		srv:        srv,
	}
	env.logf("zookeeper: %s", s.server)
	return s, nil
}

func (s *zkService) ZooKeeperAddr() string { return s.addr }

func (s *zkService) Info() backendInfo {
	return backendInfo{Name: "zookeeper", Server: s.server, Durability: s.durability, Locker: "— (lends lock-zookeeper to other backends)", BackOff: "—"}
}

func (s *zkService) Close(context.Context) error {
	if s.srv != nil {
		s.srv.Stop()
	}
	return nil
}
