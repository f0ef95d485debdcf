package zktest

import (
	"bufio"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestServer starts a server, uses it, and checks that it is locked down:
// loopback only, four-letter-word commands refused.
func TestServer(t *testing.T) {
	s := Start(t)
	if !strings.HasPrefix(s.Addr, "127.0.0.1:") || s.Version == "" {
		t.Fatalf("server at %q, version %q", s.Addr, s.Version)
	}
	c, _, err := zk.Connect([]string{s.Addr}, 10*time.Second, zk.WithLogger(nopLogger{}))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Create("/occkit", []byte("x"), 0, zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatal(err)
	}
	b, _, err := c.Get("/occkit")
	if err != nil || string(b) != "x" {
		t.Fatalf("get: %q, %v", b, err)
	}

	// Four-letter words are off; ZooKeeper keeps only srvr, which it
	// always allows (its zkServer.sh status needs it).
	for _, w := range []string{"envi", "cons", "dump", "stat", "wchc"} {
		if reply := fourLetters(t, s.Addr, w); !strings.Contains(reply, "not in the whitelist") {
			t.Errorf("four-letter word %s answered %q; want it refused", w, reply)
		}
	}
}

func fourLetters(t *testing.T, addr, word string) string {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := conn.Write([]byte(word)); err != nil {
		t.Fatal(err)
	}
	reply, _ := bufio.NewReader(conn).ReadString(0)
	return reply
}

// nopLogger silences the client's log.
type nopLogger struct{}

func (nopLogger) Printf(string, ...any) {}
