package redistest

import (
	"bytes"
	"context"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"
)

// ErrInjected is the error of a connection broken by [Faults]. It also
// matches io.EOF, as a connection closed by the peer does, so that clients
// treat it as they would a real one (go-redis re-sends commands on EOF
// unless they forbid it).
var ErrInjected = injected{}

type injected struct{}

func (injected) Error() string        { return "redistest: connection broken by an injected fault" }
func (injected) Is(target error) bool { return target == io.EOF }

// Faults breaks a client's connections on purpose, to test what a store
// does when a request or its answer is lost. Install it with Configure (as
// a configure function of Client), then arm one fault at a time: it fires
// on the next request whose bytes contain the marker (a key or a value of
// the command to break), on whichever connection sends it. Faults is safe
// for concurrent use.
type Faults struct {
	mu     sync.Mutex
	marker []byte
	mode   faultMode
	then   func()
	fired  atomic.Int64
}

type faultMode uint8

const (
	faultNone faultMode = iota
	faultLoseReply
	faultFailSend
)

// Configure makes the client's connections go through f.
func (f *Faults) Configure(opt *redis.Options) {
	var d net.Dialer
	opt.Dialer = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &faultyConn{Conn: c, f: f}, nil
	}
}

// LoseReply arms the fault "the request reached the server, its answer was
// lost": the next request containing marker is sent as usual; the server
// runs it and answers; then then (if not nil) runs, standing for whatever
// other clients do meanwhile, and the connection fails when the client
// reads the answer (it reads the error, never the answer).
func (f *Faults) LoseReply(marker string, then func()) { f.arm(marker, faultLoseReply, then) }

// FailSend arms the fault "the connection broke as the request was being
// sent": the next request containing marker is not sent and fails.
func (f *Faults) FailSend(marker string) { f.arm(marker, faultFailSend, nil) }

// Fired returns how many armed faults have fired.
func (f *Faults) Fired() int { return int(f.fired.Load()) }

func (f *Faults) arm(marker string, m faultMode, then func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.marker, f.mode, f.then = []byte(marker), m, then
}

// take returns the armed fault if p matches it, disarming it.
func (f *Faults) take(p []byte) (faultMode, func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.mode == faultNone || !bytes.Contains(p, f.marker) {
		return faultNone, nil
	}
	m, then := f.mode, f.then
	f.mode, f.marker, f.then = faultNone, nil, nil
	f.fired.Add(1)
	return m, then
}

type faultyConn struct {
	net.Conn
	f    *Faults
	lose atomic.Pointer[func()] // set before a request whose answer is to be lost is written
}

func (c *faultyConn) Write(p []byte) (int, error) {
	switch m, then := c.f.take(p); m {
	case faultFailSend:
		c.Conn.Close()
		return 0, ErrInjected
	case faultLoseReply:
		if then == nil {
			then = func() {}
		}
		c.lose.Store(&then)
	}
	return c.Conn.Write(p)
}

func (c *faultyConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if then := c.lose.Swap(nil); then != nil {
		// The server has answered (or the connection failed anyway): drop
		// the answer and the connection.
		(*then)()
		c.Conn.Close()
		return 0, ErrInjected
	}
	return n, err
}

func freeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}
