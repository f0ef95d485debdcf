package pgtest

import (
	"bytes"
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"

	"github.com/jackc/pgx/v5/pgxpool"
)

// ErrInjected is the error of a connection broken by [Faults].
var ErrInjected = errors.New("pgtest: connection broken by an injected fault")

// Faults breaks the connections of a pool on purpose, to test what a client
// does when a request or its reply is lost. Install it with Configure (as
// a configure function of Pool), then arm one fault at a time: it fires on
// the next write to the server whose bytes contain the marker (a key or a
// parameter value of the statement to break), on whichever connection of the
// pool sends it. Faults is safe for concurrent use.
type Faults struct {
	mu     sync.Mutex
	marker []byte
	mode   faultMode
	fired  atomic.Int64
}

type faultMode uint8

const (
	faultNone faultMode = iota
	faultLoseReply
	faultFailSend
)

// Configure makes the pool's connections go through f.
func (f *Faults) Configure(cfg *pgxpool.Config) {
	dial := cfg.ConnConfig.DialFunc
	cfg.ConnConfig.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &faultyConn{Conn: c, f: f}, nil
	}
}

// LoseReply arms the fault "the request reached the server, its reply was
// lost": the next write containing marker is sent as usual; the server runs
// it and answers, and the connection then fails when the client reads that
// answer (it reads the error, never the answer).
func (f *Faults) LoseReply(marker string) { f.arm(marker, faultLoseReply) }

// FailSend arms the fault "the connection broke before the request was
// sent": the next write containing marker is not sent and fails.
func (f *Faults) FailSend(marker string) { f.arm(marker, faultFailSend) }

// Fired returns how many armed faults have fired.
func (f *Faults) Fired() int { return int(f.fired.Load()) }

func (f *Faults) arm(marker string, m faultMode) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.marker, f.mode = []byte(marker), m
}

// take returns the armed fault if p matches it, disarming it.
func (f *Faults) take(p []byte) faultMode {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.mode == faultNone || !bytes.Contains(p, f.marker) {
		return faultNone
	}
	m := f.mode
	f.mode, f.marker = faultNone, nil
	f.fired.Add(1)
	return m
}

type faultyConn struct {
	net.Conn
	f *Faults
	// lose is set before a request whose reply is to be lost is written,
	// so that a read that returns after it (a reply can only come after the
	// request) reports the fault; pgconn may already be blocked in Read on
	// another goroutine when the write starts.
	lose atomic.Bool
}

func (c *faultyConn) Write(p []byte) (int, error) {
	switch c.f.take(p) {
	case faultFailSend:
		c.Conn.Close()
		return 0, ErrInjected
	case faultLoseReply:
		c.lose.Store(true)
	}
	return c.Conn.Write(p)
}

func (c *faultyConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if c.lose.Load() {
		// The server has answered (or the connection failed anyway): drop
		// the answer and the connection.
		c.Conn.Close()
		return 0, ErrInjected
	}
	return n, err
}
