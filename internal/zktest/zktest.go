// Package zktest starts a throwaway ZooKeeper for tests and the contention
// lab: Debian's zookeeper package run standalone by its own java, on a free
// 127.0.0.1 port, with a generated zoo.cfg (no admin server, four-letter
// words off — ZooKeeper always keeps srvr —, transaction log not
// fsynced), data in a temporary directory removed when it stops.
//
// StartServer works anywhere (the lab uses it outside tests); Start is
// the test helper, which installs the package first when it is missing
// and the test runs as root, as scripts/servers/postgres.sh does for
// PostgreSQL.
package zktest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
)

// Jar is the server jar of Debian's zookeeper package; its manifest names
// the other jars it needs.
const Jar = "/usr/share/java/zookeeper.jar"

// ErrNotInstalled reports that java or Debian's zookeeper package is
// missing.
var ErrNotInstalled = errors.New("zktest: ZooKeeper is not installed (apt-get install zookeeper)")

// Server is a running standalone ZooKeeper.
type Server struct {
	// Addr is the client address, 127.0.0.1:port.
	Addr string
	// Version is the server's version, from its jar's name.
	Version string

	cmd  *exec.Cmd
	dir  string
	done chan struct{}
	once sync.Once
	err  error
}

// Installed reports whether java and the zookeeper package are present.
func Installed() bool {
	if _, err := exec.LookPath("java"); err != nil {
		return false
	}
	_, err := os.Stat(Jar)
	return err == nil
}

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

// StartServer starts a standalone server from the installed package and
// waits until it accepts clients. It fails with ErrNotInstalled when java
// or the package is missing; it never installs anything.
func StartServer(ctx context.Context) (*Server, error) {
	if !Installed() {
		return nil, ErrNotInstalled
	}
	var err error
	for attempt := 1; attempt <= 3; attempt++ {
		var s *Server
		if s, err = startServer(ctx); err == nil {
			return s, nil
		}
		if !strings.Contains(err.Error(), "in use") {
			break
		}
	}
	return nil, err
}

func startServer(ctx context.Context) (*Server, error) {
	dir, err := os.MkdirTemp("", "occkit-zk-")
	if err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	cfg := fmt.Sprintf(`# occkit throwaway ZooKeeper: loopback only, fast and unsafe.
tickTime=2000
dataDir=%s
clientPort=%d
clientPortAddress=127.0.0.1
admin.enableServer=false
4lw.commands.whitelist=none
forceSync=no
maxClientCnxns=0
`, filepath.Join(dir, "data"), port)
	cfgPath := filepath.Join(dir, "zoo.cfg")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	logf, err := os.Create(filepath.Join(dir, "server.log"))
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	defer logf.Close()
	cmd := exec.Command("java", "-Xms64m", "-Xmx512m",
		"-Dzookeeper.admin.enableServer=false", "-Dzookeeper.4lw.commands.whitelist=none",
		"-cp", Jar, "org.apache.zookeeper.server.ZooKeeperServerMain", cfgPath)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("zktest: java: %w", err)
	}
	s := &Server{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), Version: version(), cmd: cmd, dir: dir, done: make(chan struct{})}
	go func() {
		s.err = cmd.Wait()
		close(s.done)
	}()
	// The port accepts connections before the server serves sessions
	// (it closes them while its database loads): wait for a session.
	deadline := time.Now().Add(60 * time.Second)
	for {
		if s.ready() {
			return s, nil
		}
		select {
		case <-s.done:
			log, _ := os.ReadFile(filepath.Join(dir, "server.log"))
			os.RemoveAll(dir)
			return nil, fmt.Errorf("zktest: the server exited (%v): %s", s.err, log)
		case <-ctx.Done():
			s.Stop()
			return nil, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			s.Stop()
			return nil, errors.New("zktest: the server does not accept clients after 60 s")
		}
	}
}

// ready reports whether the server serves a session: a connection, a
// read of the root.
func (s *Server) ready() bool {
	c, err := net.DialTimeout("tcp", s.Addr, time.Second)
	if err != nil {
		return false
	}
	c.Close()
	zc, _, err := zk.Connect([]string{s.Addr}, 4*time.Second, zk.WithLogger(nopLogger{}))
	if err != nil {
		return false
	}
	defer zc.Close()
	done := make(chan error, 1)
	go func() {
		_, _, err := zc.Exists("/")
		done <- err
	}()
	select {
	case err := <-done:
		return err == nil
	case <-time.After(5 * time.Second):
		return false
	}
}

// nopLogger silences the client's log.
type nopLogger struct{}

func (nopLogger) Printf(string, ...any) {}

// Stop stops the server and removes its directory. It is safe to call
// more than once.
func (s *Server) Stop() {
	s.once.Do(func() {
		_ = s.cmd.Process.Signal(os.Interrupt)
		select {
		case <-s.done:
		case <-time.After(10 * time.Second):
			_ = s.cmd.Process.Kill()
			<-s.done
		}
		os.RemoveAll(s.dir)
	})
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
	s, err := StartServer(ctx)
	if err != nil {
		t.Fatalf("zktest: %v", err)
	}
	t.Cleanup(s.Stop)
	return s
}

// version returns the package's version from its versioned jar
// (zookeeper-3.8.0.jar beside zookeeper.jar), or "".
func version() string {
	m, _ := filepath.Glob(filepath.Join(filepath.Dir(Jar), "zookeeper-[0-9]*.jar"))
	if len(m) == 0 {
		return ""
	}
	return strings.TrimSuffix(strings.TrimPrefix(filepath.Base(m[0]), "zookeeper-"), ".jar")
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("zktest: finding a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
