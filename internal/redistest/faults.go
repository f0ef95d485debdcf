package redistest

import (
	"context"
	"io"
	"net"
	"testing"
	"time"

	"github.com/occkit/occkit/internal/connfault"
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
	writes connfault.Marker
}

// Configure makes the client's connections go through f.
func (f *Faults) Configure(opt *redis.Options) {
	var d net.Dialer
	opt.Dialer = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return f.writes.Wrap(c, ErrInjected), nil
	}
}

// LoseReply arms the fault "the request reached the server, its answer was
// lost": the next request containing marker is sent as usual; the server
// runs it and answers; then then (if not nil) runs, standing for whatever
// other clients do meanwhile, and the connection fails when the client
// reads the answer (it reads the error, never the answer).
func (f *Faults) LoseReply(marker string, then func()) { f.writes.LoseReply(marker, then) }

// FailSend arms the fault "the connection broke as the request was being
// sent": the next request containing marker is not sent and fails.
func (f *Faults) FailSend(marker string) { f.writes.FailSend(marker) }

// SendLate arms the fault "the request was held up on its way while the
// client gave up on its connection": the next request containing marker
// is not sent yet and the client's connection fails as if the answer was
// lost; the request reaches the server when Release is called.
func (f *Faults) SendLate(marker string) { f.writes.SendLate(marker) }

// Release sends the request SendLate held back, waits up to timeout for
// the server's answer to it, and closes its connection.
func (f *Faults) Release(timeout time.Duration) error { return f.writes.Release(timeout) }

// Fired returns how many armed faults have fired.
func (f *Faults) Fired() int { return f.writes.Fired() }

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
