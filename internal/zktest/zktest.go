// Package zktest starts a throwaway ZooKeeper for tests (internal/servers'
// StartZooKeeper: Debian's zookeeper package run standalone by its own
// java, on a free 127.0.0.1 port, data in a temporary directory removed
// when it stops). Start installs the package first when it is missing and
// the test runs as root, as scripts/servers/postgres.sh does for
// PostgreSQL.
package zktest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/occkit/occkit/internal/servers"
)

// Server is a running standalone ZooKeeper (its Addr is 127.0.0.1:port).
type Server = servers.ZooKeeper

// ErrNotInstalled reports that java or Debian's zookeeper package is
// missing.
var ErrNotInstalled = servers.ErrZooKeeperNotInstalled

// Installed reports whether java and the zookeeper package are present.
func Installed() bool { return servers.ZooKeeperInstalled() }

// Install installs Debian's zookeeper package (the libraries and the jar;
// it starts no service). It needs root.
func Install(ctx context.Context) error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("%w, and installing it needs root", ErrNotInstalled)
	}
	for _, args := range [][]string{{"update", "-qq"}, {"install", "-y", "-qq", "zookeeper"}} {
		cmd := exec.CommandContext(ctx, "apt-get", args...)
		cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("zktest: apt-get %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	if !Installed() {
		return ErrNotInstalled
	}
	return nil
}

// Start starts a server for a test and stops it when the test ends. When
// ZooKeeper is missing it installs Debian's package (as root), or fails
// the test saying how to get it: a missing server never passes for a
// passing test.
func Start(t testing.TB) *Server {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if !Installed() {
		t.Logf("zktest: ZooKeeper is not installed: installing Debian's zookeeper package")
		if err := Install(ctx); err != nil {
			t.Fatalf("zktest: %v", err)
		}
	}
	s, err := servers.StartZooKeeper(ctx)
	if err != nil {
		t.Fatalf("zktest: %v", err)
	}
	t.Cleanup(s.Stop)
	return s
}
