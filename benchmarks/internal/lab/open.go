package lab

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/occkit/occkit/benchmarks/internal/backends"
	"github.com/occkit/occkit/hybrid"
)

// A backend, in the lab, is a *backends.Client: the lab's client (through
// the lab's proxy when it has one) of a server of
// benchmarks/internal/backends that the lab reached or started
// (Client.Server), described by its system's backends.Spec (Client.Spec).
// Most hold the cells' data; ZooKeeper and Redlock's servers only lend
// their locks to cells on the others (Spec.LendsLock). Strategies use
// the client for what they need beyond the cell's store: a pool, a Redis
// client, a lock.

// skip records a backend or cell the lab did not run, and why.
type skip struct {
	Name   string `json:"name"`
	Reason string `json:"reason"`
}

// backendInfo describes a backend in the report.
type backendInfo struct {
	Name string `json:"name"`
	// Server says what serves the data and where: "in-process", a
	// version and address, and whether the lab started it.
	Server string `json:"server"`
	// Durability states the server's durability settings as run.
	Durability string `json:"durability"`
	// Locker names the lease lock hybrid and adaptive use on it.
	Locker string `json:"locker"`
	// BackOff describes the optimistic strategies' backoff on it.
	BackOff string `json:"backoff"`
}

// leaseTTL is the TTL of the lease locks of hybrid and adaptive.
const leaseTTL = 10 * time.Second

// Env is what backends may use to reach or start their servers.
type Env struct {
	// RepoRoot is the occkit checkout, for scripts/servers/*.sh. Empty:
	// found from the working directory.
	RepoRoot string
	// StartServers allows starting throwaway servers from installed
	// binaries (never installing anything).
	StartServers bool
	// MaxWorkers is the most workers any cell will run, for sizing
	// connection pools.
	MaxWorkers int
	// Log receives progress messages about servers (os.Stderr if nil).
	Log io.Writer
	// Getenv reads the environment (os.Getenv if nil).
	Getenv func(string) string
	// Proxy puts a TCP proxy (internal/faultproxy) in front of every
	// server the lab connects to, data stores and lock services alike,
	// which holds every byte for Delay in each direction (SetPathDelay): a
	// round trip then costs at least 2×Delay more, as over a longer
	// network path. With Delay 0 the proxy only adds its own hop.
	Proxy bool
	Delay time.Duration

	// proc is set in a --procs child: its index + 1 (a backend of several
	// servers may give each process a different one: etcd3 pins a
	// child's client to member proc-1 modulo three).
	proc int
}

func (e *Env) logf(format string, args ...any) {
	fmt.Fprintf(e.log(), format+"\n", args...)
}

func (e *Env) log() io.Writer {
	if e.Log == nil {
		return os.Stderr
	}
	return e.Log
}

func (e *Env) getenv(k string) string {
	if e.Getenv != nil {
		return e.Getenv(k)
	}
	return os.Getenv(k)
}

// Lab holds the open backends of one run. Its methods are safe for
// concurrent use, but cells are meant to run one at a time: they share
// the machine, and a ratio is only meaningful between cells that did not
// disturb each other.
type Lab struct {
	env     Env
	id      string
	seq     atomic.Int64
	mu      sync.Mutex
	open    map[string]*backends.Client
	infos   map[string]backendInfo
	order   []string
	skipped []skip

	// onDemand serialises openOnDemand; failed remembers the backends it
	// could not open, so that a run tries each once.
	onDemand sync.Mutex
	failed   map[string]error

	// lockFrom is the backend whose lease lock DynamoDB borrows (nil:
	// the in-process one), chosen at the first cell that needs one and
	// stated in lockDesc.
	lockMu   sync.Mutex
	lockFrom *backends.Client
	lockDesc string
}

// OpenLab opens the named backends (if names is empty, every one but the
// opt-in clusters, which run only when named). A backend that cannot run
// here is skipped with its reason (Skipped); OpenLab fails only on an
// unknown name or a cancelled ctx.
func OpenLab(ctx context.Context, names []string, env Env) (*Lab, error) {
	if len(names) == 0 {
		names = DefaultBackends()
	}
	l := &Lab{env: env, id: backends.RandomHex(4), open: map[string]*backends.Client{}, infos: map[string]backendInfo{}, failed: map[string]error{}}
	for _, n := range names {
		if _, ok := backends.SpecOf(n); !ok {
			return nil, fmt.Errorf("benchmarks: unknown backend %q (have %v)", n, Backends())
		}
	}
	for _, n := range names {
		if err := ctx.Err(); err != nil {
			_ = l.Close(context.Background())
			return nil, err
		}
		b, info, err := l.connect(ctx, n)
		if err != nil {
			l.skipped = append(l.skipped, skip{Name: n, Reason: err.Error()})
			continue
		}
		l.open[n], l.infos[n] = b, info
		l.order = append(l.order, n)
	}
	return l, nil
}

// connect reaches or starts the server of the system called name and
// connects to it. An error wrapping backends.ErrUnavailable means it
// cannot run here (the reason is reported, the run goes on).
func (l *Lab) connect(ctx context.Context, name string) (*backends.Client, backendInfo, error) {
	env := &l.env
	spec, _ := backends.SpecOf(name)
	benv := backends.Env{RepoRoot: env.RepoRoot, StartServers: env.StartServers, Log: env.log(), Getenv: env.Getenv}
	srv, err := benv.Reach(ctx, name)
	if err != nil {
		return nil, backendInfo{}, err
	}
	opts := backends.ClientOptions{Proxy: env.Proxy, Delay: env.Delay}
	if spec.Conns != nil {
		opts.Conns = spec.Conns(max(env.MaxWorkers, DefaultWorkers))
	}
	if spec.ScopeEnv != "" {
		// A schema or database of the lab's own, dropped when it closes;
		// a --procs child works in its parent's, and leaves it.
		if opts.Scope = env.getenv(spec.ScopeEnv); opts.Scope == "" {
			opts.Scope, opts.CreateScope = "occbench_"+backends.RandomHex(6), true
		}
	}
	if spec.SharedLocker {
		opts.Locker = &backends.LockerConfig{Name: "lab", TTL: leaseTTL}
	}
	if name == backends.Etcd3 && env.proc > 0 {
		// A --procs child talks to one member, as a service instance
		// configured with one endpoint would.
		opts.Pinned, opts.Member = true, env.proc-1
	}
	b, err := srv.Connect(ctx, opts)
	if err != nil {
		_ = srv.Close(context.WithoutCancel(ctx))
		return nil, backendInfo{}, fmt.Errorf("%w: %w", backends.ErrUnavailable, err)
	}
	version, durable, err := b.Describe(ctx)
	if err != nil {
		_ = closeBackend(context.WithoutCancel(ctx), b)
		return nil, backendInfo{}, fmt.Errorf("%w: %s: %w", backends.ErrUnavailable, srv.Where, err)
	}
	server := srv.Where
	if version != "" {
		server = version + " " + server
	}
	if opts.Scope != "" {
		server += ", in " + opts.Scope
	}
	if opts.Conns > 0 {
		server += fmt.Sprintf(", pool of %d connections", opts.Conns)
	}
	if env.Proxy {
		server += fmt.Sprintf("; every connection through a proxy adding %v each way", env.Delay)
	}
	info := backendInfo{Name: name, Server: server, Durability: durable, Locker: spec.Locker, BackOff: "—"}
	if !spec.LendsLock {
		info.BackOff = describeBackOff(spec)
	}
	env.logf("%s: %s; %s", name, info.Server, info.Durability)
	return b, info, nil
}

// closeBackend closes the lab's client of a backend (its shared lease
// lock, the lab's scope), then the server if the lab started it.
func closeBackend(ctx context.Context, b *backends.Client) error {
	return errors.Join(b.Close(), b.Server().Close(ctx))
}

// backend returns the open backend with that name.
func (l *Lab) backend(name string) (*backends.Client, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	b, ok := l.open[name]
	return b, ok
}

// openOnDemand returns the open backend called name, or opens it now and
// keeps it with the others until Close: a backend that only some
// strategies need (the five Redis servers of lock-redlock; Redis for
// lock-redis when the redis backend was not selected) is started only
// when a cell needs it. A backend that failed to open is not tried again
// in the same run: the error is returned again.
func (l *Lab) openOnDemand(ctx context.Context, name string) (*backends.Client, error) {
	l.onDemand.Lock()
	defer l.onDemand.Unlock()
	if b, ok := l.backend(name); ok {
		return b, nil
	}
	if err := l.failed[name]; err != nil {
		return nil, err
	}
	if _, ok := backends.SpecOf(name); !ok {
		return nil, fmt.Errorf("benchmarks: unknown backend %q", name)
	}
	b, info, err := l.connect(ctx, name)
	if err != nil {
		if ctx.Err() == nil {
			l.failed[name] = err
		}
		return nil, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.open == nil { // closed meanwhile
		return nil, errors.Join(errors.New("benchmarks: the lab is closed"), closeBackend(context.WithoutCancel(ctx), b))
	}
	l.open[name], l.infos[name] = b, info
	l.order = append(l.order, name)
	return b, nil
}

// Open returns the names of the open backends, in the order opened.
func (l *Lab) Open() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.order...)
}

// DataBackends returns the names of the open backends that hold data.
func (l *Lab) DataBackends() []string {
	var out []string
	for _, n := range l.Open() {
		if b, _ := l.backend(n); !b.Spec().LendsLock {
			out = append(out, n)
		}
	}
	return out
}

// Infos describes the open backends.
func (l *Lab) Infos() []backendInfo {
	var out []backendInfo
	for _, n := range l.Open() {
		l.mu.Lock()
		info := l.infos[n]
		l.mu.Unlock()
		if n == backends.DynamoDB {
			l.lockMu.Lock()
			if l.lockDesc != "" {
				info.Locker = l.lockDesc
			}
			l.lockMu.Unlock()
		}
		out = append(out, info)
	}
	return out
}

// Skipped returns the backends that could not be opened, with the reason.
func (l *Lab) Skipped() []skip {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]skip(nil), l.skipped...)
}

// Close closes every open backend, stopping the servers the lab started.
func (l *Lab) Close(ctx context.Context) error {
	l.mu.Lock()
	order, open := l.order, l.open
	l.order, l.open = nil, nil
	l.mu.Unlock()
	var errs []error
	for i := len(order) - 1; i >= 0; i-- {
		if err := closeBackend(ctx, open[order[i]]); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", order[i], err))
		}
	}
	return errors.Join(errs...)
}

// namespace returns a fresh namespace for a cell.
func (l *Lab) namespace() string {
	return fmt.Sprintf("lab_%s_%d", l.id, l.seq.Add(1))
}

// localLocks reports that b's lease lock serves this process only
// (hybrid.NewLocalLocker): hybrid and adaptive do not apply to b with
// --procs.
func (l *Lab) localLocks(b *backends.Client) bool {
	return !b.Spec().LockService && l.borrowedLocks(b) == nil
}

// newLocker returns the lease lock of hybrid and adaptive for a cell on
// b: b's shared one, or one of the cell's own (its keys removed with the
// cell's store). DynamoDB has no lock of its own: it borrows the redis
// backend's when Redis is open in this run, else uses the in-process
// hybrid.NewLocalLocker; the choice is made at the first cell that needs
// it, and stated in Infos.
func (l *Lab) newLocker(ctx context.Context, b *backends.Client, ns string) (hybrid.Locker, func(context.Context) error, error) {
	if lk := b.Locker(); lk != nil {
		return lk, func(context.Context) error { return nil }, nil
	}
	if from := l.borrowedLocks(b); from != nil {
		return l.newLocker(ctx, from, ns)
	}
	lk, closeFn, err := b.NewLocker(ctx, backends.LockerConfig{Name: ns, TTL: leaseTTL})
	if err != nil {
		return nil, nil, err
	}
	return lk, func(context.Context) error { return closeFn() }, nil
}

// borrowedLocks returns the backend that lends its locks to b, or nil.
func (l *Lab) borrowedLocks(b *backends.Client) *backends.Client {
	if b.System != backends.DynamoDB {
		return nil
	}
	l.lockMu.Lock()
	defer l.lockMu.Unlock()
	if l.lockDesc == "" {
		l.lockDesc = "hybrid.NewLocalLocker (in process, 10 s TTL): DynamoDB has no lock of its own and Redis was not open"
		if r, ok := l.backend(backends.Redis); ok {
			l.lockFrom = r
			l.lockDesc = "the redis backend's rediscas.Locker (SET PX with INCR fencing tokens; waiters poll): DynamoDB has no lock of its own"
		}
	}
	return l.lockFrom
}

// DefaultBackends returns the names of the backends of the default run:
// all but the clusters, which run only when named.
func DefaultBackends() []string { return backendNames(false) }

// Backends returns the names of the lab's backends in their order, the
// clusters (run only when named) included.
func Backends() []string { return backendNames(true) }

func backendNames(clusters bool) []string {
	var names []string
	for _, s := range backends.Systems() {
		if !s.OnDemand && (clusters || !s.Cluster) {
			names = append(names, s.Name)
		}
	}
	return names
}
