package servers

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
	"time"

	"github.com/go-zookeeper/zk"
)

// ZooKeeperJar is the server jar of Debian's zookeeper package; its manifest names
// the other jars it needs.
const ZooKeeperJar = "/usr/share/java/zookeeper.jar"

// ErrZooKeeperNotInstalled reports that java or Debian's zookeeper package is
// missing.
var ErrZooKeeperNotInstalled = errors.New("ZooKeeper is not installed (apt-get install zookeeper)")

// ZooKeeper is a running standalone ZooKeeper.
type ZooKeeper struct {
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

// ZooKeeperInstalled reports whether java and the zookeeper package are present.
func ZooKeeperInstalled() bool {
	if _, err := exec.LookPath("java"); err != nil {
		return false
	}
	_, err := os.Stat(ZooKeeperJar)
	return err == nil
}

// StartZooKeeper starts a standalone server from the installed package and
// waits until it accepts clients. It fails with ErrZooKeeperNotInstalled when java
// or the package is missing; it never installs anything.
func StartZooKeeper(ctx context.Context) (*ZooKeeper, error) {
	if !ZooKeeperInstalled() {
		return nil, ErrZooKeeperNotInstalled
	}
	var err error
	for attempt := 1; attempt <= 3; attempt++ {
		var s *ZooKeeper
		if s, err = startZooKeeper(ctx); err == nil {
			return s, nil
		}
		if !strings.Contains(err.Error(), "in use") {
			break
		}
	}
	return nil, err
}

func startZooKeeper(ctx context.Context) (*ZooKeeper, error) {
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
		"-cp", ZooKeeperJar, "org.apache.zookeeper.server.ZooKeeperServerMain", cfgPath)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("zookeeper: java: %w", err)
	}
	s := &ZooKeeper{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), Version: zooKeeperVersion(), cmd: cmd, dir: dir, done: make(chan struct{})}
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
			return nil, fmt.Errorf("zookeeper: the server exited (%v): %s", s.err, log)
		case <-ctx.Done():
			s.Stop()
			return nil, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			s.Stop()
			return nil, errors.New("zookeeper: the server does not accept clients after 60 s")
		}
	}
}

// ready reports whether the server serves a session: a connection, a
// read of the root.
func (s *ZooKeeper) ready() bool {
	c, err := net.DialTimeout("tcp", s.Addr, time.Second)
	if err != nil {
		return false
	}
	c.Close()
	zc, _, err := zk.Connect([]string{s.Addr}, 4*time.Second, zk.WithLogger(zkNopLogger{}))
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

// zkNopLogger silences the client's log.
type zkNopLogger struct{}

func (zkNopLogger) Printf(string, ...any) {}

// Stop stops the server and removes its directory. It is safe to call
// more than once.
func (s *ZooKeeper) Stop() {
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

// zooKeeperVersion returns the package's version from its versioned jar
// (zookeeper-3.8.0.jar beside zookeeper.jar), or "".
func zooKeeperVersion() string {
	m, _ := filepath.Glob(filepath.Join(filepath.Dir(ZooKeeperJar), "zookeeper-[0-9]*.jar"))
	if len(m) == 0 {
		return ""
	}
	return strings.TrimSuffix(strings.TrimPrefix(filepath.Base(m[0]), "zookeeper-"), ".jar")
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("zookeeper: finding a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
