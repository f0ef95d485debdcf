package connfault

import (
	"errors"
	"io"
	"net"
	"testing"
	"time"
)

var errBroken = errors.New("broken")

// echo returns a connection, wrapped by m, to a server that echoes what
// it reads.
func echo(t *testing.T, m *Marker) net.Conn {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		_, _ = io.Copy(c, c)
	}()
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return m.Wrap(c, errBroken)
}

func TestLoseReply(t *testing.T) {
	var m Marker
	c := echo(t, &m)
	buf := make([]byte, 16)
	if _, err := c.Write([]byte("plain")); err != nil {
		t.Fatal(err)
	}
	if n, err := c.Read(buf); err != nil || string(buf[:n]) != "plain" {
		t.Fatalf("unarmed read: %q, %v", buf[:n], err)
	}
	then := 0
	m.LoseReply("the-key", func() { then++ })
	if _, err := c.Write([]byte("get the-key")); err != nil {
		t.Fatalf("a request whose reply is lost is sent: %v", err)
	}
	for range 2 { // the fault stays
		if _, err := c.Read(buf); !errors.Is(err, errBroken) {
			t.Fatalf("read after a lost reply: %v, want the injected error", err)
		}
	}
	if then != 1 || m.Fired() != 1 {
		t.Fatalf("then ran %d times, %d faults fired; want 1 and 1", then, m.Fired())
	}
}

func TestFailSend(t *testing.T) {
	var m Marker
	c := echo(t, &m)
	m.FailSend("the-key")
	if _, err := c.Write([]byte("other")); err != nil {
		t.Fatalf("a request without the marker: %v", err)
	}
	if _, err := c.Write([]byte("set the-key")); !errors.Is(err, errBroken) {
		t.Fatalf("write of the marker: %v, want the injected error", err)
	}
	if m.Fired() != 1 {
		t.Fatalf("%d faults fired, want 1", m.Fired())
	}
}

func TestShortMarkerRefused(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("a one-byte marker was armed; want a panic")
		}
	}()
	var m Marker
	m.FailSend("k")
}

// TestSendLate: the request is held back and the client's read fails; the
// connection stays open through the client's Close, and Release delivers
// the request (the echo server answers it) and closes the connection.
func TestSendLate(t *testing.T) {
	var m Marker
	if err := m.Release(time.Second); !errors.Is(err, ErrNothingHeld) {
		t.Fatalf("release with nothing held: %v, want ErrNothingHeld", err)
	}
	c := echo(t, &m)
	m.SendLate("the-key")
	if n, err := c.Write([]byte("incr the-key")); err != nil || n != len("incr the-key") {
		t.Fatalf("a held-back request looks sent: %d, %v", n, err)
	}
	if _, err := c.Read(make([]byte, 16)); !errors.Is(err, errBroken) {
		t.Fatalf("read after a held-back request: %v, want the injected error", err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := m.Release(5 * time.Second); err != nil {
		t.Fatalf("release: %v, want the request delivered and answered", err)
	}
	if m.Fired() != 1 {
		t.Fatalf("%d faults fired, want 1", m.Fired())
	}
	if err := m.Release(time.Second); !errors.Is(err, ErrNothingHeld) {
		t.Fatalf("second release: %v, want ErrNothingHeld", err)
	}
}
