// Package connfault breaks a client's connections on purpose, on the
// request that carries a marker: the part of pgtest.Faults and
// redistest.Faults that does not depend on the server's protocol.
package connfault

import (
	"bytes"
	"errors"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Marker arms one fault at a time: it fires on the next write, on any
// connection that Wrap wrapped, whose bytes contain the marker (a key or
// a value of the request to break). The zero Marker has no fault armed;
// it is safe for concurrent use.
type Marker struct {
	mu     sync.Mutex
	marker []byte
	mode   mode
	then   func()
	fired  atomic.Int64
	// held and heldOn are the request SendLate held back and the
	// connection it was written to, until Release.
	held   []byte
	heldOn net.Conn
}

type mode uint8

const (
	none mode = iota
	loseReply
	failSend
	sendLate
)

// LoseReply arms the fault "the request reached the server, its reply was
// lost": the next write containing marker is sent as usual; the server
// runs it and answers; then then (if not nil) runs, standing for whatever
// other clients do meanwhile, and the connection fails when the client
// reads the reply (it reads the error of Wrap, never the reply).
func (m *Marker) LoseReply(marker string, then func()) { m.arm(marker, loseReply, then) }

// FailSend arms the fault "the connection broke as the request was being
// sent": the next write containing marker is not sent and fails.
func (m *Marker) FailSend(marker string) { m.arm(marker, failSend, nil) }

// SendLate arms the fault "the request was held up on its way (in a proxy,
// a kernel buffer) while the client gave up on its connection": the next
// write containing marker is not sent yet, and the client's connection
// fails as if the reply was lost (a read returns the error of Wrap). The
// request reaches the server only when Release is called, on the
// connection it was written to, which stays open until then.
func (m *Marker) SendLate(marker string) { m.arm(marker, sendLate, nil) }

// ErrNothingHeld is Release's error when no request is held back.
var ErrNothingHeld = errors.New("connfault: no request held back (SendLate)")

// Release sends the request SendLate held back, waits up to timeout for
// the first bytes of the server's reply (so that the server has run it),
// and closes its connection.
func (m *Marker) Release(timeout time.Duration) error {
	m.mu.Lock()
	held, c := m.held, m.heldOn
	m.held, m.heldOn = nil, nil
	m.mu.Unlock()
	if c == nil {
		return ErrNothingHeld
	}
	defer c.Close()
	// The deadlines the client set on the connection have passed.
	if err := c.SetDeadline(time.Now().Add(timeout)); err != nil {
		return err
	}
	if _, err := c.Write(held); err != nil {
		return err
	}
	_, err := c.Read(make([]byte, 1))
	return err
}

// Fired returns how many armed faults have fired.
func (m *Marker) Fired() int { return int(m.fired.Load()) }

// MinMarker is the shortest marker LoseReply and FailSend accept.
const MinMarker = 4

func (m *Marker) arm(marker string, md mode, then func()) {
	if len(marker) < MinMarker {
		panic("connfault: marker " + strconv.Quote(marker) + " is shorter than MinMarker bytes and can match unrelated traffic")
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.marker, m.mode, m.then = []byte(marker), md, then
}

// take returns the armed fault if p matches it, disarming it.
func (m *Marker) take(p []byte) (mode, func()) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.mode == none || !bytes.Contains(p, m.marker) {
		return none, nil
	}
	md, then := m.mode, m.then
	m.mode, m.marker, m.then = none, nil, nil
	m.fired.Add(1)
	return md, then
}

// Wrap returns c with the faults of m: a write or read a fault breaks
// closes c and returns err.
func (m *Marker) Wrap(c net.Conn, err error) net.Conn { return &conn{Conn: c, m: m, err: err} }

type conn struct {
	net.Conn
	m   *Marker
	err error
	// lose is set before a request whose reply is to be lost is written,
	// so that a read that returns after it (a reply can only come after
	// the request) reports the fault: the client may already be blocked
	// in Read on another goroutine when the write starts. lost stays set
	// once the fault fired.
	lose atomic.Pointer[func()]
	lost atomic.Bool
	// late is set once the connection's request was held back
	// (SendLate): Close leaves the connection open for Release.
	late atomic.Bool
}

func (c *conn) Write(p []byte) (int, error) {
	if c.late.Load() {
		// Bytes written after a request held up on its way (a driver's
		// goodbye, say) travel behind it, as TCP keeps them in order.
		c.m.mu.Lock()
		if c.m.heldOn == c.Conn {
			c.m.held = append(c.m.held, p...)
		}
		c.m.mu.Unlock()
		return len(p), nil
	}
	switch md, then := c.m.take(p); md {
	case failSend:
		c.Conn.Close()
		return 0, c.err
	case loseReply:
		if then == nil {
			then = func() {}
		}
		c.lose.Store(&then)
	case sendLate:
		c.m.mu.Lock()
		c.m.held, c.m.heldOn = bytes.Clone(p), c.Conn
		c.m.mu.Unlock()
		c.late.Store(true)
		c.lost.Store(true)
		// A client already blocked in Read gets the error now.
		_ = c.Conn.SetReadDeadline(time.Now())
		return len(p), nil
	}
	return c.Conn.Write(p)
}

func (c *conn) Close() error {
	if c.late.Load() {
		return nil // Release sends the held request on it, then closes it
	}
	return c.Conn.Close()
}

func (c *conn) Read(p []byte) (int, error) {
	if c.late.Load() {
		return 0, c.err // no reply can come: the request was not sent
	}
	n, err := c.Conn.Read(p)
	if then := c.lose.Swap(nil); then != nil {
		// The server has answered (or the connection failed anyway): drop
		// the reply and the connection.
		(*then)()
		c.Conn.Close()
		c.lost.Store(true)
	}
	if c.lost.Load() {
		return 0, c.err
	}
	return n, err
}
