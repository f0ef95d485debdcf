package redistest

import (
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// ServerBinary is the redis-server that [StartServer] runs (Debian's,
// installed by scripts/servers/redis.sh).
const ServerBinary = "/usr/bin/redis-server"

// Server is a redis-server process of one test's own, for faults a shared
// server must not suffer: restarts and crashes. Its data is kept in an
// append-only file synced on every write, so a restart loses nothing that
// was acknowledged. Its methods are safe for concurrent use.
type Server struct {
	t    testing.TB
	addr string
	dir  string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has exited
}

// StartServer starts a redis-server on a free 127.0.0.1 port in a
// temporary directory and stops it when the test ends. It fails the test
// if redis-server is not installed (run `make test`, which installs it) or
// does not answer within 10 s.
func StartServer(t testing.TB) *Server {
	t.Helper()
	if _, err := os.Stat(ServerBinary); err != nil {
		t.Fatalf("redistest: %s is missing: this test starts a Redis server of its own. "+
			"Run `make test` (scripts/servers/redis.sh installs it), or apt-get install redis-server", ServerBinary)
	}
	s := &Server{t: t, addr: freeAddr(t), dir: t.TempDir()}
	s.start()
	t.Cleanup(s.Stop)
	return s
}

// Addr returns the server's host:port.
func (s *Server) Addr() string { return s.addr }

// Client returns a client of this server, closed when the test ends.
func (s *Server) Client(configure ...func(*redis.Options)) *redis.Client {
	opt := &redis.Options{Addr: s.addr}
	for _, f := range configure {
		f(opt)
	}
	cli := redis.NewClient(opt)
	s.t.Cleanup(func() { cli.Close() })
	return cli
}

func (s *Server) start() {
	s.t.Helper()
	_, port, _ := net.SplitHostPort(s.addr)
	cmd := exec.Command(ServerBinary,
		"--port", port, "--bind", "127.0.0.1", "--dir", s.dir,
		"--save", "", "--appendonly", "yes", "--appendfsync", "always",
		"--daemonize", "no", "--logfile", filepath.Join(s.dir, "server.log"))
	if err := cmd.Start(); err != nil {
		s.t.Fatalf("redistest: starting %s: %v", ServerBinary, err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	s.mu.Lock()
	s.cmd, s.done = cmd, done
	s.mu.Unlock()
	cli := redis.NewClient(&redis.Options{Addr: s.addr, MaxRetries: -1, DialerRetries: 1})
	defer cli.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := cli.Ping(ctx).Err()
		cancel()
		if err == nil {
			return
		}
		select {
		case <-done:
			log, _ := os.ReadFile(filepath.Join(s.dir, "server.log"))
			s.t.Fatalf("redistest: redis-server on %s exited: %s", s.addr, log)
		default:
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("redistest: redis-server on %s does not answer: %v", s.addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Restart stops the server (SIGTERM: it syncs and exits) and starts it
// again on the same port and data, waiting until it answers. Clients see
// their connections drop; the script cache is empty afterwards.
func (s *Server) Restart() {
	s.t.Helper()
	s.stop(syscall.SIGTERM)
	s.start()
}

// Stop stops the server (SIGKILL), if it runs.
func (s *Server) Stop() { s.stop(syscall.SIGKILL) }

func (s *Server) stop(sig syscall.Signal) {
	s.mu.Lock()
	cmd, done := s.cmd, s.done
	s.cmd = nil
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(sig)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
		<-done
	}
}
