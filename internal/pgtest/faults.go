package pgtest

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/occkit/occkit/internal/connfault"
)

// ErrInjected is the error of a connection broken by [Faults].
var ErrInjected = errors.New("pgtest: connection broken by an injected fault")

// Faults breaks the connections of a pool on purpose, to test what a client
// does when a request or its reply is lost, or when no connection can be
// made. Install it with Configure (as a configure function of Pool), then
// arm one fault at a time. LoseReply and FailSend fire on the next write
// to the server whose bytes contain the marker (a key or a parameter value
// of the statement to break), on whichever connection of the pool sends
// it; RefuseConnections and RejectSessions fire on the next new
// connections the pool makes (Pool.Reset closes its idle ones). Faults is
// safe for concurrent use.
type Faults struct {
	writes connfault.Marker // LoseReply, FailSend

	mu         sync.Mutex
	dials      int    // new connections still to break
	rejectCode string // "": refuse them; otherwise the SQLSTATE refusing their session
	rejectMsg  string
	dialFired  atomic.Int64
}

// Configure makes the pool's connections go through f.
func (f *Faults) Configure(cfg *pgxpool.Config) {
	dial := cfg.ConnConfig.DialFunc
	cfg.ConnConfig.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		if c, ok, err := f.dialFault(network); ok {
			return c, err
		}
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return f.writes.Wrap(c, ErrInjected), nil
	}
}

// LoseReply arms the fault "the request reached the server, its reply was
// lost": the next write containing marker is sent as usual; the server runs
// it and answers, and the connection then fails when the client reads that
// answer (it reads the error, never the answer).
func (f *Faults) LoseReply(marker string) { f.writes.LoseReply(marker, nil) }

// FailSend arms the fault "the connection broke before the request was
// sent": the next write containing marker is not sent and fails.
func (f *Faults) FailSend(marker string) { f.writes.FailSend(marker) }

// SendLate arms the fault "the request was held up on its way": the next
// write containing marker is held back and the client's read fails as if
// the reply was lost; the request reaches the server only at Release.
func (f *Faults) SendLate(marker string) { f.writes.SendLate(marker) }

// Release sends the request SendLate held back, waits up to timeout for
// the server's answer to it, and closes its connection.
func (f *Faults) Release(timeout time.Duration) error { return f.writes.Release(timeout) }

// RefuseConnections arms the fault "the server is down": the next n new
// connections fail to connect, refused, as against a stopped server. Each
// counts as one fault fired.
func (f *Faults) RefuseConnections(n int) { f.armDials(n, "", "") }

// RejectSessions arms the fault "the server refuses sessions": the next n
// new connections reach a server that answers the startup message with a
// FATAL error of SQLSTATE code and closes the connection, as PostgreSQL
// does with 57P03 ("the database system is shutting down") while it stops
// or starts. Each counts as one fault fired.
func (f *Faults) RejectSessions(n int, code, message string) { f.armDials(n, code, message) }

func (f *Faults) armDials(n int, code, message string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.dials, f.rejectCode, f.rejectMsg = n, code, message
}

// dialFault reports whether an armed connection fault fired, and returns
// the connection or error it makes.
func (f *Faults) dialFault(network string) (net.Conn, bool, error) {
	f.mu.Lock()
	if f.dials == 0 {
		f.mu.Unlock()
		return nil, false, nil
	}
	f.dials--
	code, msg := f.rejectCode, f.rejectMsg
	f.mu.Unlock()
	f.dialFired.Add(1)
	if code == "" {
		return nil, true, &net.OpError{Op: "dial", Net: network, Err: &os.SyscallError{Syscall: "connect", Err: syscall.ECONNREFUSED}}
	}
	client, server := net.Pipe()
	go rejectSession(server, code, msg)
	return client, true, nil
}

// Request codes of the messages that may come before the startup message.
const (
	sslRequestCode    = 80877103
	gssEncRequestCode = 80877104
)

// rejectSession plays a server refusing a session on c: it reads the
// startup message (declining encryption requests before it) and answers
// with a FATAL ErrorResponse, then closes c.
func rejectSession(c net.Conn, code, msg string) {
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	for {
		var hdr [8]byte
		if _, err := io.ReadFull(c, hdr[:]); err != nil {
			return
		}
		size := int(binary.BigEndian.Uint32(hdr[:4]))
		if size < 8 || size > 1<<16 {
			return
		}
		if size == 8 {
			if rc := binary.BigEndian.Uint32(hdr[4:]); rc == sslRequestCode || rc == gssEncRequestCode {
				if _, err := c.Write([]byte{'N'}); err != nil {
					return
				}
				continue
			}
		}
		if _, err := io.CopyN(io.Discard, c, int64(size-8)); err != nil {
			return
		}
		break
	}
	e := &pgproto3.ErrorResponse{Severity: "FATAL", SeverityUnlocalized: "FATAL", Code: code, Message: msg}
	b, err := e.Encode(nil)
	if err != nil {
		return
	}
	_, _ = c.Write(b)
}

// Fired returns how many armed faults have fired.
func (f *Faults) Fired() int { return f.writes.Fired() + int(f.dialFired.Load()) }
