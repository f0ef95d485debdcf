package story

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/occkit/occkit/internal/ctxwait"
	"github.com/occkit/occkit/internal/faultproxy"
)

// The scripts of the stories. Each runs in the runner, with clients in
// goroutines (and gc-pause's A in a child process), and injects its fault
// for real.

// Timings of the scripts.
const (
	// settle is how long the runner lets the timeline show a state before
	// the next step (B's write before A resumes).
	settle = 150 * time.Millisecond
	// waitLimit bounds a wait for a lock that a fault should free.
	waitLimit = 30 * time.Second
)

// direct returns endpoints that reach every server directly.
func (r *run) direct() clientEndpoints {
	ep := r.spec.Endpoints
	ep.Redlock = append([]redisAddr(nil), ep.Redlock...)
	return clientEndpoints{Lock: ep, Data: ep.Redis}
}

// newClient makes an in-process client lane.
func (r *run) newClient(ctx context.Context, name string, ep clientEndpoints) (*client, error) {
	c, err := newClient(ctx, r, name, ep)
	if err != nil {
		return nil, fmt.Errorf("client %s: %w", name, err)
	}
	r.rec.lane(name)
	return c, nil
}

// note records a runner's event on a client's lane.
func (r *run) note(client string, kind Kind, detail string) {
	r.noteAt(r.at(), client, kind, detail)
}

// noteAt records a runner's event that happened at.
func (r *run) noteAt(at time.Duration, client string, kind Kind, detail string) {
	r.sink.event(Event{At: at, Client: client, Kind: kind, Detail: detail})
}

// goSale runs a sale in a goroutine; its error comes on the channel.
func goSale(ctx context.Context, c *client, h hook) <-chan error {
	done := make(chan error, 1)
	go func() { done <- c.sale(ctx, h) }()
	return done
}

// abRun is the shape of the clock-jump and partition stories: client A
// starts a sale that a gate holds after its read, while client B sells on
// direct connections.
type abRun struct {
	a, b  *client
	g     *gate
	aDone <-chan error
}

// startAB makes clients A (on epA) and B (direct) and starts A's gated
// sale; it returns once A has read. The caller closes the pair.
func (r *run) startAB(ctx context.Context, epA clientEndpoints) (*abRun, error) {
	a, err := r.newClient(ctx, "A", epA)
	if err != nil {
		return nil, err
	}
	b, err := r.newClient(ctx, "B", r.direct())
	if err != nil {
		a.close()
		return nil, err
	}
	x := &abRun{a: a, b: b, g: newGate()}
	x.aDone = goSale(ctx, a, x.g.hook)
	if err := x.g.waitReached(ctx, x.aDone); err != nil {
		x.close()
		return nil, fmt.Errorf("client A: %w", err)
	}
	return x, nil
}

func (x *abRun) close() {
	x.a.close()
	x.b.close()
}

// finish has B sell while A is held, lets the system settle, runs heal
// (if not nil), then lets A go on and returns both clients' errors.
func (x *abRun) finish(ctx context.Context, heal func()) error {
	berr := saleWithin(ctx, x.b)
	_ = ctxwait.Sleep(ctx, settle)
	if heal != nil {
		heal()
	}
	close(x.g.open)
	if err := <-x.aDone; err != nil {
		return errors.Join(berr, fmt.Errorf("client A: %w", err))
	}
	return berr
}

// gate is a hook that holds a sale after its first read until opened.
type gate struct {
	reached chan struct{}
	open    chan struct{}
	once    sync.Once
}

func newGate() *gate { return &gate{reached: make(chan struct{}), open: make(chan struct{})} }

func (g *gate) hook(ctx context.Context, attempt int) error {
	if attempt > 1 {
		return nil
	}
	g.once.Do(func() { close(g.reached) })
	select {
	case <-g.open:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// waitReached waits until the gated sale has read, or has failed; when
// it fails, the sale has ended (its clients can be closed).
func (g *gate) waitReached(ctx context.Context, done <-chan error) error {
	select {
	case <-g.reached:
		return nil
	case err := <-done:
		if err == nil {
			err = errors.New("the sale ended before its read")
		}
		return err
	case <-ctx.Done():
		<-done // the sale ends with ctx too
		return ctx.Err()
	}
}

// saleWithin runs a sale that must complete within waitLimit (it waits for
// a lock that the story's fault frees).
func saleWithin(ctx context.Context, c *client) error {
	ctx, cancel := context.WithTimeout(ctx, waitLimit)
	defer cancel()
	if err := c.sale(ctx, nil); err != nil {
		return fmt.Errorf("client %s: %w", c.name, err)
	}
	return nil
}

// gcPause: A (a child process) locks and reads, is stopped with SIGSTOP
// until B has locked (after A's lock expired on the server) and sold, and
// is resumed to write from its stale read.
func gcPause(ctx context.Context, r *run) error {
	a, err := r.startChild(ctx, "A", r.direct())
	if err != nil {
		return err
	}
	defer a.kill()
	b, err := r.newClient(ctx, "B", r.direct())
	if err != nil {
		return err
	}
	defer b.close()
	if err := a.await(ctx, stepRead); err != nil {
		return err
	}
	if err := stopProcess(a.cmd.Process); err != nil {
		return fmt.Errorf("stopping A: %w", err)
	}
	r.note("A", Pause, "SIGSTOP: A's process is frozen between its read and its write, its renewals and heartbeats with it, as in a long GC pause")
	if err := saleWithin(ctx, b); err != nil {
		return err
	}
	_ = ctxwait.Sleep(ctx, settle)
	resumed := r.at() // A's own events come after
	if err := continueProcess(a.cmd.Process); err != nil {
		return fmt.Errorf("resuming A: %w", err)
	}
	r.noteAt(resumed, "A", Resume, "SIGCONT: A goes on from where it stopped, with the stock it read before the pause")
	if err := a.send(wordGo); err != nil {
		return err
	}
	return a.finish(ctx)
}

// clockJump: A locks and reads; its lock ends early on the server (a
// Redlock node's key expires, as a forward clock jump on that node would
// make it; the other locks get the same fault on their server); B locks
// and sells; A, which still believes it holds the lock, writes.
func clockJump(ctx context.Context, r *run) error {
	epA := r.direct()
	if r.mode.Name == ModeRedlock {
		// A reaches nodes 1-3 only: nodes 4 and 5 are at closed ports.
		for i := redlockNode + 1; i < len(epA.Lock.Redlock); i++ {
			addr, err := closedAddr()
			if err != nil {
				return err
			}
			epA.Lock.Redlock[i] = epA.Lock.Redlock[i].via(addr)
		}
		r.note("A", Fault, fmt.Sprintf("A cannot reach Redis nodes %d-%d (a partition): it can lock nodes 1-%d only, a majority",
			redlockNode+2, len(epA.Lock.Redlock), redlockNode+1))
	}
	x, err := r.startAB(ctx, epA)
	if err != nil {
		return err
	}
	defer x.close()
	if r.lock != nil {
		detail, err := r.lock.expireEarly(ctx, x.a.currentRef())
		if err != nil {
			close(x.g.open)
			<-x.aDone
			return fmt.Errorf("expiring A's lock early: %w", err)
		}
		r.note("A", Fault, detail)
	} else {
		r.note("A", Note, "no lock to end early: B sells while A is between its read and its write, as it could after the jump")
	}
	return x.finish(ctx, nil)
}

// partition: A reaches the lock service through TCP proxies; after A's
// read the proxies blackhole its connections until A's lock has expired
// on the server and B has sold; then the partition heals and A writes.
func partition(ctx context.Context, r *run) error {
	epA := r.direct()
	var proxies []*faultproxy.Proxy
	defer func() {
		for _, p := range proxies {
			p.Close()
		}
	}()
	proxy := func(target string) (string, error) {
		p, err := faultproxy.New(target)
		if err != nil {
			return "", err
		}
		proxies = append(proxies, p)
		return p.Addr(), nil
	}
	var what string
	var err error
	switch r.mode.Name {
	case ModeRedlock:
		what = fmt.Sprintf("its %d Redis servers", len(epA.Lock.Redlock))
		for i, a := range epA.Lock.Redlock {
			addr, perr := proxy(a.Addr)
			if perr != nil {
				return perr
			}
			epA.Lock.Redlock[i] = a.via(addr)
		}
	case ModeZooKeeper:
		what = "the ZooKeeper server"
		epA.Lock.ZK, err = proxy(epA.Lock.ZK)
	case ModeEtcd:
		what = "etcd"
		var addr string
		addr, err = proxy(strings.TrimPrefix(strings.TrimPrefix(epA.Lock.Etcd, "http://"), "https://"))
		epA.Lock.Etcd = "http://" + addr
	case ModeMySQL:
		what = "MariaDB (A's data connection stays up)"
		epA.Lock.MySQL, err = mysqlVia(epA.Lock.MySQL, proxy)
	case ModeOCC:
		what = "the store (occ has no lock service: its data path is the one cut)"
		var addr string
		addr, err = proxy(epA.Data.Addr)
		epA.Data = epA.Data.via(addr)
	default: // the Redis locks
		what = "the lock's Redis (A's data connection stays up)"
		var addr string
		addr, err = proxy(epA.Lock.Redis.Addr)
		epA.Lock.Redis = epA.Lock.Redis.via(addr)
	}
	if err != nil {
		return err
	}
	x, err := r.startAB(ctx, epA)
	if err != nil {
		return err
	}
	defer x.close()
	for _, p := range proxies {
		p.SetChunkDelay(time.Hour) // nothing gets through, nothing is reset
	}
	r.note("A", Fault, "partition: the TCP proxy between A and "+what+" holds every packet; A's work goes on")
	return x.finish(ctx, func() {
		for _, p := range proxies {
			p.SetChunkDelay(0)
			p.DropAll() // the stuck connections are reset; new ones get through
		}
		r.note("A", Fault, "the partition heals: A's stuck connections are reset, new ones get through")
	})
}

// mysqlVia returns dsn with its address replaced by a proxy's in front of
// it.
func mysqlVia(dsn string, proxy func(target string) (string, error)) (string, error) {
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return "", err
	}
	if cfg.Addr, err = proxy(cfg.Addr); err != nil {
		return "", err
	}
	return cfg.FormatDSN(), nil
}

// contention: five clients sell two items each; A's first sale works
// longer than the TTL inside the critical section.
func contention(ctx context.Context, r *run) error {
	var clients []*client
	defer func() {
		for _, c := range clients {
			c.close()
		}
	}()
	for i := range contentionClients {
		c, err := r.newClient(ctx, string(rune('A'+i)), r.direct())
		if err != nil {
			return err
		}
		clients = append(clients, c)
	}
	errs := make([]error, len(clients))
	// The others start once A is inside its long first sale (it holds the
	// lock and has read), so that they are waiting when A outlasts its TTL
	// however the goroutines are scheduled; then staggered, B asking first.
	aInside := make(chan struct{})
	var aOnce sync.Once
	letOthersIn := func() { aOnce.Do(func() { close(aInside) }) }
	var wg sync.WaitGroup
	for i, c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if i == 0 {
				defer letOthersIn() // also when A's first sale fails
			} else {
				select {
				case <-aInside:
				case <-ctx.Done():
					errs[i] = ctx.Err()
					return
				}
			}
			if ctxwait.Sleep(ctx, time.Duration(i)*15*time.Millisecond) != nil {
				errs[i] = ctx.Err()
				return
			}
			for j := range contentionSales {
				work := contentionWork
				if i == 0 && j == 0 {
					work = contentionLongWork
				}
				err := c.sale(ctx, func(ctx context.Context, attempt int) error {
					d := work
					if attempt > 1 {
						d = contentionWork
					}
					if i == 0 && j == 0 {
						letOthersIn()
					}
					if d > r.spec.TTL {
						c.emit(Event{Kind: Note, Detail: fmt.Sprintf("works %v inside the critical section, longer than the %v TTL", d, r.spec.TTL)})
					}
					if ctxwait.Sleep(ctx, d) != nil {
						return ctx.Err()
					}
					return nil
				})
				if err != nil {
					errs[i] = fmt.Errorf("client %s: %w", c.name, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// closedAddr returns a loopback address where nothing listens.
func closedAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	addr := l.Addr().String()
	l.Close()
	return addr, nil
}
