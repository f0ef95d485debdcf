// Package connfault breaks a client's connections on purpose, on the
// request that carries a marker: the part of pgtest.Faults and
// redistest.Faults that does not depend on the server's protocol.
package connfault

import (
	"bytes"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
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
}

type mode uint8

const (
	none mode = iota
	loseReply
	failSend
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
}

func (c *conn) Write(p []byte) (int, error) {
	switch md, then := c.m.take(p); md {
	case failSend:
		c.Conn.Close()
		return 0, c.err
	case loseReply:
		if then == nil {
			then = func() {}
		}
		c.lose.Store(&then)
	}
	return c.Conn.Write(p)
}

func (c *conn) Read(p []byte) (int, error) {
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
