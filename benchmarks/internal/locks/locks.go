// Package locks holds the lab's baseline locks, written once for the lab's
// lock strategies (benchmarks/internal/lab, which hold a lock around a
// read-modify-write) and the lock stories (benchmarks/story, which watch
// a grant end on the server and inject its end early): a hand-written
// Redis lock (SET NX PX, with or without a watchdog), Redlock (redsync),
// ZooKeeper's lock recipe, etcd's concurrency.Mutex, MySQL's GET_LOCK, a
// mutex per name in one process, and any hybrid.Locker (PostgreSQL
// advisory locks, etcdcas, rediscas) as a Locker.
//
// A lock is acquired by name and held as a Grant, which names itself on
// the server (Ref) and says what its client knows of it: its fencing
// token, its expiry, and whether the client learned that it was lost. The
// SELECT ... FOR UPDATE baselines are no locks of this kind (the row lock
// lives inside the transaction that writes) and stay lab strategies.
package locks

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"
)

// ErrNotHeld is returned by a Release that found the lock no longer held
// by its grant (it expired, and maybe went to another client): nothing
// was released.
var ErrNotHeld = errors.New("locks: the lock was no longer held by this grant")

// Locker takes named locks. The lockers of this package are safe for
// concurrent use unless their doc says otherwise.
type Locker interface {
	// Acquire waits until the caller holds the lock called name, or ctx
	// ends (its error is returned).
	Acquire(ctx context.Context, name string) (*Grant, error)
}

// Grant is one acquisition of a lock: what its client knows of it, and
// how to give it back. Its methods are safe for concurrent use.
type Grant struct {
	// Ref names the grant on the lock's servers (a random value, a node
	// path, a session id, a token), for a look at the server.
	Ref string
	// Token is the grant's fencing token, 0 when the lock has none.
	Token uint64

	release func(ctx context.Context) error
	expires func() (time.Time, bool) // nil: not known
	lost    <-chan struct{}          // nil: the client never learns of a loss
	cause   func() string
	halt    func() // stops the grant's watch (nil: none)
}

// Release gives this grant back, never another client's.
func (g *Grant) Release(ctx context.Context) error {
	if g.halt != nil {
		g.halt()
	}
	return g.release(ctx)
}

// Expires returns when the grant ends unless renewed, as the client last
// learned it, and whether the client renews it.
func (g *Grant) Expires() (at time.Time, renewed bool) {
	if g.expires == nil {
		return time.Time{}, false
	}
	return g.expires()
}

// Lost is closed when the client learns that the grant is lost; nil when
// it never learns.
func (g *Grant) Lost() <-chan struct{} { return g.lost }

// LostCause says how the client learned that the grant is lost (""
// before).
func (g *Grant) LostCause() string {
	if g.cause == nil {
		return ""
	}
	return g.cause()
}

// watch is a grant's background watch (a watchdog, a keepalive, a watch
// on its node), which closes lost when it finds the grant gone.
type watch struct {
	lost  chan struct{}
	once  sync.Once
	cause atomic.Pointer[string]
	stop  chan struct{}
	done  chan struct{}
}

// watch runs f as g's watch, on a goroutine of its own until f returns;
// f returns when stop is closed (Release), or after lose.
func (g *Grant) watch(f func(w *watch)) {
	w := &watch{lost: make(chan struct{}), stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		f(w)
	}()
	var once sync.Once
	g.lost, g.halt = w.lost, func() {
		once.Do(func() { close(w.stop) })
		<-w.done
	}
	g.cause = func() string {
		if c := w.cause.Load(); c != nil {
			return *c
		}
		return ""
	}
}

// lose records cause and closes lost, once.
func (w *watch) lose(cause string) {
	w.once.Do(func() {
		w.cause.Store(&cause)
		close(w.lost)
	})
}

// tick calls step after d, then after each duration step returns, until
// stop is closed or step returns 0.
func (w *watch) tick(d time.Duration, step func() time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	for d > 0 {
		select {
		case <-w.stop:
			return
		case <-t.C:
		}
		d = step()
		t.Reset(d)
	}
}
