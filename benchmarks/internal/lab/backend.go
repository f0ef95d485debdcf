package lab

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/occkit/occkit/benchmarks/internal/backends"
	"github.com/occkit/occkit/hybrid"
)

// backend is a server of benchmarks/internal/backends the lab reached or
// started, with the lab's client of it (through the lab's proxy when it
// has one): a backend that holds the cells' data, or one that only lends
// its lock to cells on the others (ZooKeeper, Redlock's servers).
// Strategies use its client (cli) for what they need beyond the cell's
// store: a pool, a Redis client, a lock. Safe for concurrent use.
type backend struct {
	sys  system
	srv  *backends.Server
	cli  *backends.Client
	info backendInfo
	// scope is the lab's schema or database; attached is set in a
	// --procs child, which works in its parent's and leaves it.
	scope    string
	attached bool
	// locker is the lab's locker when the system shares one.
	locker      hybrid.Locker
	closeLocker func() error

	// lab finds the backend whose lock a dynamodb backend borrows;
	// lockFrom is the one chosen, at the first cell that needs a lock.
	lab      *Lab
	lockMu   sync.Mutex
	lockFrom *backend
	lockDesc string
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

// retryTuning is how optimistic strategies retry on a backend.
type retryTuning struct {
	// BackOffInitial and BackOffMax bound the exponential backoff
	// (doubling, ±50% jitter). Zero: occ's default, 1 ms to 100 ms,
	// sized for networked stores. A cell with work time uses at least the
	// work time as the first wait: a conflict means somebody was in the
	// critical section, which lasts about that long.
	BackOffInitial, BackOffMax time.Duration
	// Retryable reports transient errors that are safe to retry (the
	// adapter's own classifier), or is nil.
	Retryable func(error) bool
}

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

// openBackend reaches or starts the server of system sys and connects to
// it. An error wrapping backends.ErrUnavailable means it cannot run here
// (the reason is reported, the run goes on).
func openBackend(ctx context.Context, l *Lab, sys system) (_ *backend, err error) {
	env := &l.env
	b := &backend{sys: sys, lab: l}
	defer func() {
		if err != nil {
			_ = b.close(context.WithoutCancel(ctx))
		}
	}()
	benv := backends.Env{RepoRoot: env.RepoRoot, StartServers: env.StartServers, Log: env.log(), Getenv: env.Getenv}
	if b.srv, err = benv.Reach(ctx, sys.name); err != nil {
		return nil, err
	}
	opts := backends.ClientOptions{Proxy: env.Proxy, Delay: env.Delay}
	if sys.conns != nil {
		opts.Conns = sys.conns(env.MaxWorkers)
	}
	if sys.scopeEnv != "" {
		b.scope = "occbench_" + backends.RandomHex(6)
		if s := getenv(env, sys.scopeEnv); s != "" {
			b.scope, b.attached = s, true // a --procs child: the parent's
		}
		opts.Scope, opts.CreateScope = b.scope, !b.attached
	}
	if sys.name == backends.Etcd3 && env.proc > 0 {
		// A --procs child talks to one member, as a service instance
		// configured with one endpoint would.
		opts.Pinned, opts.Member = true, env.proc-1
	}
	if b.cli, err = b.srv.Connect(ctx, opts); err != nil {
		return nil, fmt.Errorf("%w: %w", backends.ErrUnavailable, err)
	}
	version, durable, err := b.cli.Describe(ctx)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", backends.ErrUnavailable, b.srv.Where, err)
	}
	if sys.sharedLocker {
		if b.locker, b.closeLocker, err = b.cli.NewLocker(ctx, backends.LockerConfig{Name: "lab", TTL: leaseTTL}); err != nil {
			return nil, fmt.Errorf("%w: %w", backends.ErrUnavailable, err)
		}
	}
	server := b.srv.Where
	if version != "" {
		server = version + " " + server
	}
	if b.scope != "" {
		server += ", in " + b.scope
	}
	if opts.Conns > 0 {
		server += fmt.Sprintf(", pool of %d connections", opts.Conns)
	}
	if env.Proxy {
		server += fmt.Sprintf("; every connection through a proxy adding %v each way", env.Delay)
	}
	b.info = backendInfo{Name: sys.name, Server: server, Durability: durable, Locker: sys.locker, BackOff: "—"}
	if !sys.lendsLock {
		b.info.BackOff = describeBackOff(b.tuning())
	}
	env.logf("%s: %s; %s", sys.name, b.info.Server, b.info.Durability)
	return b, nil
}

func getenv(e *Env, k string) string {
	if e.Getenv != nil {
		return e.Getenv(k)
	}
	return os.Getenv(k)
}

func (b *backend) Info() backendInfo {
	b.lockMu.Lock()
	defer b.lockMu.Unlock()
	info := b.info
	if b.lockDesc != "" {
		info.Locker = b.lockDesc
	}
	return info
}

// tuning returns the system's backoff and its adapter's Retryable.
func (b *backend) tuning() retryTuning {
	t := b.sys.tuning
	t.Retryable = b.cli.Retryable()
	return t
}

// childEnv returns the environment (NAME=value) that makes a --procs
// child's lab open the same server, on its own connections: the
// server's variables, and the lab's scope; nil for memory, which no
// other process can reach.
func (b *backend) childEnv() []string {
	env := b.srv.Env()
	if env != nil && b.sys.scopeEnv != "" {
		env = append(env, b.sys.scopeEnv+"="+b.scope)
	}
	return env
}

// localLocks reports that the backend's lease lock serves this process
// only (hybrid.NewLocalLocker): hybrid and adaptive do not apply to the
// backend with --procs.
func (b *backend) localLocks() bool {
	return !b.cli.HasLockService() && b.borrowedLocks() == nil
}

// newLocker returns the lease lock of hybrid and adaptive for a cell: the
// lab's shared one, or one of the cell's own (its keys removed with the
// cell's store). DynamoDB has no lock of its own: it borrows the redis
// backend's when Redis is open in this run, else uses the in-process
// hybrid.NewLocalLocker; the choice is made at the first cell that needs
// it, and stated in Info.
func (b *backend) newLocker(ctx context.Context, ns string) (hybrid.Locker, func(context.Context) error, error) {
	if b.locker != nil {
		return b.locker, func(context.Context) error { return nil }, nil
	}
	if from := b.borrowedLocks(); from != nil {
		return from.newLocker(ctx, ns)
	}
	l, closeFn, err := b.cli.NewLocker(ctx, backends.LockerConfig{Name: ns, TTL: leaseTTL})
	if err != nil {
		return nil, nil, err
	}
	return l, func(context.Context) error { return closeFn() }, nil
}

// borrowedLocks returns the backend that lends its locks to this one.
func (b *backend) borrowedLocks() *backend {
	if b.sys.name != backends.DynamoDB {
		return nil
	}
	b.lockMu.Lock()
	defer b.lockMu.Unlock()
	if b.lockDesc == "" {
		b.lockDesc = "hybrid.NewLocalLocker (in process, 10 s TTL): DynamoDB has no lock of its own and Redis was not open"
		if r, ok := b.lab.backend(backends.Redis); ok {
			b.lockFrom = r
			b.lockDesc = "the redis backend's rediscas.Locker (SET PX with INCR fencing tokens; waiters poll): DynamoDB has no lock of its own"
		}
	}
	return b.lockFrom
}

func (b *backend) close(ctx context.Context) error {
	var errs []error
	if b.closeLocker != nil {
		errs = append(errs, b.closeLocker())
	}
	if b.cli != nil {
		if b.scope != "" && !b.attached {
			errs = append(errs, b.cli.DropScope(ctx))
		}
		errs = append(errs, b.cli.Close())
	}
	if b.srv != nil {
		errs = append(errs, b.srv.Close(ctx))
	}
	return errors.Join(errs...)
}
