package faultproxy

import (
	"bytes"
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// echoServer answers every connection with what it reads, until EOF.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		wg.Wait()
	})
	return ln.Addr().String()
}

func newProxy(t *testing.T) *Proxy {
	t.Helper()
	p, err := New(echoServer(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func dial(t *testing.T, p *Proxy) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	return c
}

func roundTrip(t *testing.T, c net.Conn, msg []byte) []byte {
	t.Helper()
	if _, err := c.Write(msg); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(c, got); err != nil {
		t.Fatal(err)
	}
	return got
}

func TestForwards(t *testing.T) {
	p := newProxy(t)
	c := dial(t, p)
	msg := bytes.Repeat([]byte("occkit "), 20000) // several chunks
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		_, _ = c.Write(msg)
	}()
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(c, got); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if !bytes.Equal(got, msg) {
		t.Fatal("echo through the proxy differs from what was sent")
	}
}

func TestHalfClose(t *testing.T) {
	p := newProxy(t)
	c := dial(t, p)
	if _, err := c.Write([]byte("bye")); err != nil {
		t.Fatal(err)
	}
	if err := c.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(c)
	if err != nil || string(got) != "bye" {
		t.Fatalf("after a half-close: got %q, %v; want \"bye\", EOF", got, err)
	}
}

func TestChunkDelay(t *testing.T) {
	p := newProxy(t)
	c := dial(t, p)
	roundTrip(t, c, []byte("warm")) // the dial itself is not measured
	const d = 30 * time.Millisecond
	p.SetChunkDelay(d)
	start := time.Now()
	roundTrip(t, c, []byte("x"))
	// One chunk each way: at least twice the delay.
	if took := time.Since(start); took < 2*d {
		t.Fatalf("round trip took %v with %v per chunk; want at least %v", took, d, 2*d)
	}
	p.SetChunkDelay(0)
	start = time.Now()
	roundTrip(t, c, []byte("y"))
	if took := time.Since(start); took >= 2*d {
		t.Fatalf("round trip took %v after the delay was turned off", took)
	}
}

// TestPathDelay: with SetPathDelay each message comes back no sooner than two
// delays after it was sent, and messages sent one after the other travel
// together instead of queueing behind each other's delay (sent 10 ms
// apart with a 200 ms delay, ten echoes take about 0.5 s; one at a time
// they would take 4 s).
func TestPathDelay(t *testing.T) {
	p := newProxy(t)
	const d = 200 * time.Millisecond
	p.SetPathDelay(d)
	c := dial(t, p)
	const n = 10
	sent := make(chan time.Time, n)
	go func() {
		for i := range n {
			sent <- time.Now()
			if _, err := c.Write([]byte{byte('0' + i)}); err != nil {
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
	start := time.Now()
	buf := make([]byte, 1)
	for i := range n {
		if _, err := io.ReadFull(c, buf); err != nil {
			t.Fatal(err)
		}
		if buf[0] != byte('0'+i) {
			t.Fatalf("echo %d is %q: out of order", i, buf)
		}
		if took := time.Since(<-sent); took < 2*d {
			t.Fatalf("echo %d came back after %v; want at least %v", i, took, 2*d)
		}
	}
	if took := time.Since(start); took > n*2*d/2 {
		t.Fatalf("%d echoes took %v: the delay held each message behind the previous one's", n, took)
	}
	if _, err := c.Write([]byte("z")); err != nil {
		t.Fatal(err)
	}
	if err := c.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	if got, err := io.ReadAll(c); err != nil || string(got) != "z" {
		t.Fatalf("after a half-close: got %q, %v; want \"z\", EOF", got, err)
	}
}

func TestDropAll(t *testing.T) {
	p := newProxy(t)
	conns := []net.Conn{dial(t, p), dial(t, p), dial(t, p)}
	for _, c := range conns {
		roundTrip(t, c, []byte("ping")) // connected end to end
	}
	if n := p.DropAll(); n != 3 {
		t.Fatalf("DropAll closed %d connections, want 3", n)
	}
	for i, c := range conns {
		buf := make([]byte, 1)
		if _, err := c.Read(buf); err == nil {
			t.Fatalf("connection %d still reads after DropAll", i)
		}
	}
	// New connections work.
	c := dial(t, p)
	if got := roundTrip(t, c, []byte("again")); string(got) != "again" {
		t.Fatalf("after DropAll: got %q", got)
	}
	if accepted, dropped := p.Stats(); accepted != 4 || dropped != 3 {
		t.Fatalf("Stats() = %d, %d; want 4, 3", accepted, dropped)
	}
}

func TestCutAfter(t *testing.T) {
	tests := []struct {
		name  string
		arm   int64 // bytes after which the answer is cut
		msg   string
		want  string
		cut   bool
		early bool // arm before the connection is opened
	}{
		{name: "mid-answer", arm: 4, msg: "0123456789", want: "0123", cut: true},
		{name: "new connection", arm: 3, msg: "abcdef", want: "ab", cut: true, early: true},
		{name: "answer shorter than the cut", arm: 100, msg: "short", want: "short"},
		{name: "disarmed", arm: 0, msg: "whole answer", want: "whole answer"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newProxy(t)
			if tt.early {
				p.CutAfter(tt.arm)
			}
			c := dial(t, p)
			roundTrip(t, c, []byte{'.'}) // connected end to end
			if !tt.early {
				p.CutAfter(tt.arm)
			}
			if _, err := c.Write([]byte(tt.msg)); err != nil {
				t.Fatal(err)
			}
			got := make([]byte, len(tt.msg))
			if tt.early {
				got = got[:len(tt.msg)-1] // the '.' of the first round trip counted
			}
			n, err := io.ReadFull(c, got)
			if tt.early {
				// The cut counted the '.' echo: the msg answer got arm-1 bytes.
				if n != int(tt.arm)-1 || !errors.Is(err, io.ErrUnexpectedEOF) {
					t.Fatalf("read %q, %v; want %d bytes then EOF", got[:n], err, tt.arm-1)
				}
				if got := p.Cuts(); got != 1 {
					t.Fatalf("Cuts() = %d after one cut, want 1", got)
				}
				return
			}
			if tt.cut {
				if err == nil {
					t.Fatalf("read the whole answer %q through an armed cut", got)
				}
				if string(got[:n]) != tt.want {
					t.Fatalf("before the cut: got %q, want %q", got[:n], tt.want)
				}
				if got := p.Cuts(); got != 1 {
					t.Fatalf("Cuts() = %d after one cut, want 1", got)
				}
				return
			}
			if err != nil || string(got) != tt.want {
				t.Fatalf("got %q, %v; want %q", got[:n], err, tt.want)
			}
			if got := p.Cuts(); got != 0 {
				t.Fatalf("Cuts() = %d without a cut, want 0", got)
			}
		})
	}
}

func TestCloseEndsConnections(t *testing.T) {
	p, err := New(echoServer(t))
	if err != nil {
		t.Fatal(err)
	}
	c := dial(t, p)
	roundTrip(t, c, []byte("ping"))
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	buf := make([]byte, 1)
	if _, err := c.Read(buf); err == nil {
		t.Fatal("connection still reads after Close")
	}
	if _, err := net.DialTimeout("tcp", p.Addr(), time.Second); err == nil {
		t.Fatal("proxy still accepts after Close")
	}
}
