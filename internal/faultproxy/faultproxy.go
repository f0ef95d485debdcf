// Package faultproxy is a TCP proxy for fault-injection runs: it listens
// on a free 127.0.0.1 port, forwards every connection to one target, and
// on demand slows the traffic down, drops every live connection at once,
// or cuts connections after a number of bytes from the server (the answer
// to a request lost mid-response).
//
// Point a client at [Proxy.Addr] instead of the server; read the results
// of a run from the server directly, not through the proxy.
//
//	p, err := faultproxy.New("127.0.0.1:5432")
//	if err != nil { ... }
//	defer p.Close()
//	p.SetChunkDelay(2 * time.Millisecond) // every forwarded chunk waits 2 ms
//	p.DropAll()                           // every live connection is reset
//	p.CutAfter(10)                        // answers stop after 10 more bytes
//
// SetChunkDelay is a fault: each chunk waits in turn, so a busy connection
// slows down, and a long delay stalls it. SetPathDelay is not a fault but a
// longer network path: it holds every byte for a fixed time in each
// direction without slowing a busy connection down (the contention lab's
// --rtt).
//
// A Proxy is safe for concurrent use.
package faultproxy

import (
	"errors"
	"io"
	"net"
	"sync"
	"time"
)

// chunkSize is the largest chunk forwarded at once; SetChunkDelay's delay
// is added per chunk.
const chunkSize = 32 << 10

// Proxy forwards TCP connections from Addr to a target, with faults.
type Proxy struct {
	target string
	ln     net.Listener
	wg     sync.WaitGroup

	mu         sync.Mutex
	conns      map[*link]struct{}
	chunkDelay time.Duration // SetChunkDelay: the wait before each chunk
	pathDelay  time.Duration // SetPathDelay: the one-way delay of new connections
	clock      *clock
	cutAfter   int64 // > 0: each connection is cut after that many server bytes
	closed     bool
	accepted   int
	dropped    int
	cuts       int
}

// link is one proxied connection: the client's side and the server's.
type link struct {
	client, server net.Conn
	done           chan struct{}
	once           sync.Once

	mu        sync.Mutex
	remaining int64  // server bytes still forwarded before the cut; < 0: no cut
	clock     *clock // the proxy's, for a delayed connection
}

// close closes both sides; reset sends the client a TCP reset (SO_LINGER
// 0) instead of an orderly close.
func (l *link) close(reset bool) {
	l.once.Do(func() {
		close(l.done)
		if tc, ok := l.client.(*net.TCPConn); ok && reset {
			_ = tc.SetLinger(0) // a reset, as a broken network path looks to the client
		}
		l.client.Close()
		l.server.Close()
	})
}

// New starts a proxy on 127.0.0.1:0 that forwards to target (host:port).
// The target is dialled for each accepted connection; a connection whose
// dial fails is closed at once.
func New(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{target: target, ln: ln, conns: make(map[*link]struct{}), clock: newClock()}
	p.wg.Add(2)
	go p.accept()
	go func() { defer p.wg.Done(); p.clock.run() }()
	return p, nil
}

// Addr returns the proxy's listening address (127.0.0.1:port).
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// SetChunkDelay makes the proxy wait d before forwarding each chunk, in
// both directions, on live and new connections: the chunks of one
// connection wait one after the other, so a connection carrying many
// requests at once slows down, and a long d stalls it (nothing gets
// through, nothing is reset). 0 turns the delay off.
func (p *Proxy) SetChunkDelay(d time.Duration) {
	p.mu.Lock()
	p.chunkDelay = d
	p.mu.Unlock()
}

// SetPathDelay gives the connections accepted from now on a one-way delay of
// d in each direction, as a longer network path does: every chunk read
// from one side is written to the other d after it arrived, in order,
// while the chunks behind it are already on their way (a connection
// carrying many requests at once, as an HTTP/2 or pipelined client does,
// is not slowed down, unlike with SetChunkDelay). A round trip through the
// proxy then takes at least 2d more than without it. CutAfter does not
// apply to delayed connections. 0 turns it off for new connections.
func (p *Proxy) SetPathDelay(d time.Duration) {
	p.mu.Lock()
	p.pathDelay = max(d, 0)
	p.mu.Unlock()
}

// DropAll closes every live connection at once (with a reset towards the
// client) and returns how many it closed. New connections are accepted as
// before.
func (p *Proxy) DropAll() int {
	p.mu.Lock()
	links := make([]*link, 0, len(p.conns))
	for l := range p.conns {
		links = append(links, l)
		delete(p.conns, l)
	}
	p.dropped += len(links)
	p.mu.Unlock()
	for _, l := range links {
		l.close(true)
	}
	return len(links)
}

// CutAfter arms a cut: every live connection, and every new one, is closed
// once it has forwarded n more bytes from the server to the client (the
// n-th byte is delivered, the rest of the answer is lost). The cut stays
// armed for new connections until CutAfter is called with n <= 0, which
// disarms it everywhere.
func (p *Proxy) CutAfter(n int64) {
	if n <= 0 {
		n = -1
	}
	p.mu.Lock()
	p.cutAfter = max(n, 0)
	for l := range p.conns {
		l.mu.Lock()
		l.remaining = n
		l.mu.Unlock()
	}
	p.mu.Unlock()
}

// Stats reports how many connections the proxy accepted and how many
// DropAll closed.
func (p *Proxy) Stats() (accepted, dropped int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.accepted, p.dropped
}

// Cuts reports how many connections an armed cut (CutAfter) has closed.
func (p *Proxy) Cuts() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cuts
}

// Close stops accepting, closes every connection and waits for the
// proxy's goroutines to end. It is safe to call more than once.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	p.mu.Unlock()
	err := p.ln.Close()
	p.DropAll()
	p.clock.close()
	p.wg.Wait()
	return err
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		p.wg.Add(1)
		go p.serve(c)
	}
}

func (p *Proxy) serve(c net.Conn) {
	defer p.wg.Done()
	s, err := net.DialTimeout("tcp", p.target, 5*time.Second)
	if err != nil {
		c.Close()
		return
	}
	l := &link{client: c, server: s, done: make(chan struct{}), remaining: -1}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		l.close(false)
		return
	}
	if p.cutAfter > 0 {
		l.remaining = p.cutAfter
	}
	p.conns[l] = struct{}{}
	p.accepted++
	delay := p.pathDelay
	p.mu.Unlock()

	var copies sync.WaitGroup
	copies.Add(2)
	if delay > 0 {
		l.clock = p.clock
		go func() { defer copies.Done(); delayLine(l, s, c, delay) }()
		go func() { defer copies.Done(); delayLine(l, c, s, delay) }()
	} else {
		go func() { defer copies.Done(); p.pipe(l, s, c, false) }()
		go func() { defer copies.Done(); p.pipe(l, c, s, true) }()
	}
	copies.Wait()
	l.close(false)
	p.mu.Lock()
	delete(p.conns, l)
	p.mu.Unlock()
}

// pipe copies from src to dst until either side fails, then closes the
// link (or, when src ended with EOF, half-closes dst and leaves the other
// direction running). fromServer marks the direction the cut counts.
func (p *Proxy) pipe(l *link, dst, src net.Conn, fromServer bool) {
	buf := make([]byte, chunkSize)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if !p.delay(l) {
				l.close(false)
				return
			}
			chunk, cut := buf[:n], false
			if fromServer {
				l.mu.Lock()
				if l.remaining >= 0 {
					if int64(n) >= l.remaining {
						chunk, cut = buf[:l.remaining], true
					}
					l.remaining -= int64(len(chunk))
				}
				l.mu.Unlock()
			}
			if len(chunk) > 0 {
				if _, werr := dst.Write(chunk); werr != nil {
					l.close(false)
					return
				}
			}
			if cut {
				p.mu.Lock()
				p.cuts++
				p.mu.Unlock()
				l.close(false)
				return
			}
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				// Half-close towards dst, so that a request-response
				// exchange ending with EOF completes.
				if tc, ok := dst.(*net.TCPConn); ok && tc.CloseWrite() == nil {
					return
				}
			}
			l.close(false)
			return
		}
	}
}

// delay waits the current chunk delay, or until the link closes (false).
func (p *Proxy) delay(l *link) bool {
	p.mu.Lock()
	d := p.chunkDelay
	p.mu.Unlock()
	if d <= 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-l.done:
		return false
	}
}

// delayed is a chunk on its way through a delay line: its bytes, or the
// error that ended the reading side, and when it is due.
type delayed struct {
	b   []byte
	err error
	due time.Time
}

// delayLine copies from src to dst, each chunk d after it was read. A
// reader goroutine timestamps the chunks and queues them; this goroutine
// writes each when it is due, so that the chunks behind one are not held
// up by its wait. An EOF from src half-closes dst once the bytes before
// it are delivered, as pipe does.
func delayLine(l *link, dst, src net.Conn, d time.Duration) {
	q := make(chan delayed, 4096)
	go func() {
		defer close(q)
		for {
			buf := make([]byte, chunkSize)
			n, err := src.Read(buf)
			c := delayed{b: buf[:n], err: err, due: time.Now().Add(d)}
			select {
			case q <- c:
			case <-l.done:
				return
			}
			if err != nil {
				return
			}
		}
	}()
	for c := range q {
		if !l.clock.await(c.due, l.done) {
			return
		}
		if len(c.b) > 0 {
			if _, err := dst.Write(c.b); err != nil {
				l.close(false)
				return
			}
		}
		if c.err != nil {
			if errors.Is(c.err, io.EOF) {
				if tc, ok := dst.(*net.TCPConn); ok && tc.CloseWrite() == nil {
					return
				}
			}
			l.close(false)
			return
		}
	}
}

// clock wakes the delayed chunks of a proxy's connections when they are
// due, more precisely than Go's timers, which an idle process fires late
// by more than the sub-millisecond delays the lab asks for (measured in
// docs/benchmarks.md, "Across processes and round trips"): one goroutine
// sleeps in the operating system (sleepUntil) until the chunk at the head
// of its queue is due, then wakes it. Every chunk of a proxy has the same
// delay, so chunks fall due in the order they arrive and a FIFO queue is
// enough.
type clock struct {
	q    chan *tick
	stop chan struct{}
	once sync.Once
}

// tick is one chunk waiting for its time.
type tick struct {
	due  time.Time
	done chan struct{}
}

func newClock() *clock {
	return &clock{q: make(chan *tick, 4096), stop: make(chan struct{})}
}

func (c *clock) run() {
	for {
		select {
		case t := <-c.q:
			sleepUntil(t.due)
			close(t.done)
		case <-c.stop:
			return
		}
	}
}

// await waits until due, or returns false when cancel is closed first.
func (c *clock) await(due time.Time, cancel <-chan struct{}) bool {
	if !time.Now().Before(due) {
		return true
	}
	t := &tick{due: due, done: make(chan struct{})}
	select {
	case c.q <- t:
	case <-cancel:
		return false
	case <-c.stop:
		return false
	}
	select {
	case <-t.done:
		return true
	case <-cancel:
		return false
	case <-c.stop:
		return false
	}
}

func (c *clock) close() { c.once.Do(func() { close(c.stop) }) }
