package lab

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/occkit/occkit/benchmarks/internal/backends"
	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/hybrid"
	"github.com/occkit/occkit/internal/faultproxy"
)

// errUnavailable marks a backend whose server the lab can neither reach
// nor start here; the lab skips it and says why.
var errUnavailable = backends.ErrUnavailable

// service is an open connection to a server the lab reached or started:
// a Backend that holds data, or a service that only lends its locks to
// cells on other backends (ZooKeeper). Implementations are safe for
// concurrent use.
//
// The systems are opened through benchmarks/internal/backends
// (backend_systems.go) and listed in backendSpecs; strategies that need
// one (a lock) find it with harness.Service and a type assertion on an
// interface it exports, such as EtcdService.
type service interface {
	// Info describes the service for the report.
	Info() backendInfo
	// Close releases the service and stops any server the lab started
	// for it.
	Close(ctx context.Context) error
}

// dataBackend is a service that holds a cell's data.
type dataBackend interface {
	service
	// tuning returns the retry settings optimistic strategies use on it.
	tuning() retryTuning
	// NewStore returns a fresh, empty store for one cell, in a namespace
	// of its own (ns is short, lower-case letters, digits and '_'), and
	// the function that removes it.
	NewStore(ctx context.Context, ns string) (cas.Store, func(context.Context) error, error)
	// openStore returns a store over the namespace ns that another
	// process's NewStore made (a --procs child's view of its parent's
	// store); it creates and removes nothing.
	openStore(ctx context.Context, ns string) (cas.Store, error)
	// NewLocker returns the backend's own lease lock (hybrid.Locker) for
	// one cell, used by the hybrid and adaptive strategies on this
	// backend, and the function that closes it.
	NewLocker(ctx context.Context, ns string) (hybrid.Locker, func(context.Context) error, error)
	// localLocks reports that NewLocker's lock works in this process
	// only (hybrid.NewLocalLocker): hybrid and adaptive do not apply to
	// the backend with --procs.
	localLocks() bool
	// multiKeyUnsupported says why the server cannot commit several keys
	// atomically (dynalite has no TransactWriteItems), or returns "": the
	// lab marks the cells of multi-key workloads on it not applicable,
	// with that reason, instead of running them.
	multiKeyUnsupported() string
	// keyGroup is, on a backend that commits several keys atomically
	// only within a group (Redis Cluster: one hash slot), how many keys
	// make a group; 0: any keys commit together. Multi-key workloads on
	// it name their keys with a hash tag per group and pick an
	// operation's keys within one group (keyspace.go).
	keyGroup() int
	// followerStore returns a store over namespace ns (NewStore's, here
	// or in the parent process) that reads from a follower or replica
	// and writes to the leader or primary, for occ-follower-reads; an
	// error matching errors.ErrUnsupported on a backend without.
	followerStore(ns string) (cas.Store, error)
	// catchUp waits until the followers or replica have applied what
	// was written so far (postgres-replica's replica; nothing
	// elsewhere). Run calls it after seeding.
	catchUp(ctx context.Context) error
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

	// proxies are the proxies Proxy made, closed with the lab.
	proxies *proxySet
	// lookup finds another open service of the lab (set by OpenLab), for
	// a backend that borrows a lock from another service.
	lookup func(name string) (service, bool)
}

// proxySet holds the proxies of a lab.
type proxySet struct {
	mu   sync.Mutex
	list []*faultproxy.Proxy
}

// dial returns the address (host:port) clients use to reach the server at
// hostport: hostport itself, or with Env.Proxy a new proxy in front of it
// (one per server, shared by all its connections).
func (e *Env) dial(hostport string) (string, error) {
	if !e.Proxy {
		return hostport, nil
	}
	p, err := faultproxy.New(hostport)
	if err != nil {
		return "", fmt.Errorf("proxy for %s: %w", hostport, err)
	}
	p.SetPathDelay(e.Delay)
	if e.proxies == nil {
		e.proxies = &proxySet{}
	}
	e.proxies.mu.Lock()
	e.proxies.list = append(e.proxies.list, p)
	e.proxies.mu.Unlock()
	return p.Addr(), nil
}

// via says, for a server's description, how the lab reaches it.
func (e *Env) via() string {
	if !e.Proxy {
		return ""
	}
	return fmt.Sprintf("; every connection through a proxy adding %v each way", e.Delay)
}

// closeProxies closes the proxies dial made.
func (e *Env) closeProxies() {
	if e.proxies == nil {
		return
	}
	e.proxies.mu.Lock()
	list := e.proxies.list
	e.proxies.list = nil
	e.proxies.mu.Unlock()
	for _, p := range list {
		p.Close()
	}
}

// service returns another open service of the lab by name.
func (e *Env) service(name string) (service, bool) {
	if e.lookup == nil {
		return nil, false
	}
	return e.lookup(name)
}

func (e *Env) logf(format string, args ...any) {
	w := e.Log
	if w == nil {
		w = os.Stderr
	}
	fmt.Fprintf(w, format+"\n", args...)
}

// repoRoot returns RepoRoot, or the checkout above the working directory.
func (e *Env) repoRoot() (string, error) { return e.backendsEnv().Root() }

// backendsEnv returns how benchmarks/internal/backends reaches or starts
// the lab's servers.
func (e *Env) backendsEnv() backends.Env {
	log := e.Log
	if log == nil {
		log = os.Stderr
	}
	return backends.Env{RepoRoot: e.RepoRoot, StartServers: e.StartServers, Log: log, Getenv: e.Getenv}
}

func (e *Env) getenv(k string) string {
	if e.Getenv != nil {
		return e.Getenv(k)
	}
	return os.Getenv(k)
}

// backendSpec describes a backend, or a lock-only service.
type backendSpec struct {
	// Name is the backend's name in flags, results and charts.
	Name string
	// About is a one-line description.
	About string
	// Open reaches or starts the server and returns a Backend, or a
	// Service for one that only lends locks. An error wrapping
	// errUnavailable means it cannot run here (the reason is reported,
	// the run goes on).
	Open func(ctx context.Context, env *Env) (service, error)
	// OptIn says the backend runs only when named (OpenLab's names,
	// --backends), not in the default run: the clusters, each several
	// servers, whose cells are measured beside each other
	// (docs/benchmarks.md, "Clusters").
	OptIn bool
}

// backendSpecs are the lab's backends and lock-only services, in their
// order: one list, written out, instead of registrations.
var backendSpecs = []backendSpec{
	systemSpec(backends.Memory), systemSpec(backends.Etcd), systemSpec(backends.Postgres), systemSpec(backends.Redis), systemSpec(backends.DynamoDB),
	{Name: backends.ZooKeeper, About: "ZooKeeper, lock service only (lock-zookeeper): OCCKIT_ZK_ADDR, or a standalone server started from Debian's zookeeper package", Open: openZooKeeper},
	systemSpec(backends.MySQL), systemSpec(backends.SQLite),
	optIn(systemSpec(backends.RedisCluster)), optIn(systemSpec(backends.Etcd3)), optIn(systemSpec(backends.PostgresReplica)),
}

// optIn marks a backend that runs only when named.
func optIn(s backendSpec) backendSpec {
	s.OptIn = true
	return s
}

// DefaultBackends returns the names of the backends of the default run:
// all but the opt-in ones.
func DefaultBackends() []string {
	var names []string
	for _, s := range backendSpecs {
		if !s.OptIn {
			names = append(names, s.Name)
		}
	}
	return names
}

// Backends returns the names of the lab's backends in their order, the
// opt-in ones (run only when named) included.
func Backends() []string {
	names := make([]string, 0, len(backendSpecs))
	for _, s := range backendSpecs {
		names = append(names, s.Name)
	}
	return names
}

func lookupBackend(name string) (backendSpec, bool) {
	for _, s := range backendSpecs {
		if s.Name == name {
			return s, true
		}
	}
	return backendSpec{}, false
}

// skip records a backend or cell the lab did not run, and why.
type skip struct {
	Name   string `json:"name"`
	Reason string `json:"reason"`
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
	open    map[string]service
	order   []string
	skipped []skip

	// onDemand serialises OpenService; failed remembers the services it
	// could not open, so that a run tries each once.
	onDemand sync.Mutex
	failed   map[string]error
}

// OpenLab opens the named backends (if names is empty, every one but the
// opt-in clusters, which run only when named). A backend that cannot run here is skipped with its reason
// (Skipped); OpenLab fails only on an unknown name or a cancelled ctx.
func OpenLab(ctx context.Context, names []string, env Env) (*Lab, error) {
	if len(names) == 0 {
		names = DefaultBackends()
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	l := &Lab{env: env, id: hex.EncodeToString(b[:]), open: map[string]service{}, failed: map[string]error{}}
	l.env.lookup = l.Service
	if l.env.proxies == nil {
		l.env.proxies = &proxySet{}
	}
	for _, n := range names {
		if _, ok := lookupBackend(n); !ok {
			return nil, fmt.Errorf("benchmarks: unknown backend %q (have %v)", n, Backends())
		}
	}
	for _, n := range names {
		if err := ctx.Err(); err != nil {
			_ = l.Close(context.Background())
			return nil, err
		}
		spec, _ := lookupBackend(n)
		be, err := spec.Open(ctx, &l.env)
		if err != nil {
			l.skipped = append(l.skipped, skip{Name: n, Reason: err.Error()})
			continue
		}
		l.open[n] = be
		l.order = append(l.order, n)
	}
	return l, nil
}

// Service returns the open service (or backend) with that name.
func (l *Lab) Service(name string) (service, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	s, ok := l.open[name]
	return s, ok
}

// OpenService returns the open service called name, or opens it now with
// open (reaching or starting its server as a backend's Open does) and
// keeps it with the others until Close: a service that only some
// strategies need (the five Redis servers of lock-redlock; Redis for
// lock-redis when the redis backend was not selected) is started only
// when a cell needs it. A service that failed to open is not tried again
// in the same run: the error is returned again.
func (l *Lab) OpenService(ctx context.Context, name string, open func(ctx context.Context, env *Env) (service, error)) (service, error) {
	l.onDemand.Lock()
	defer l.onDemand.Unlock()
	if s, ok := l.Service(name); ok {
		return s, nil
	}
	if err := l.failed[name]; err != nil {
		return nil, err
	}
	s, err := open(ctx, &l.env)
	if err != nil {
		if ctx.Err() == nil {
			l.failed[name] = err
		}
		return nil, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.open == nil { // closed meanwhile
		return nil, errors.Join(errors.New("benchmarks: the lab is closed"), s.Close(context.WithoutCancel(ctx)))
	}
	l.open[name] = s
	l.order = append(l.order, name)
	return s, nil
}

// serverOwner is implemented by the services of one server of
// benchmarks/internal/backends (not by Redlock's five).
type serverOwner interface{ server() *backends.Server }

// Server returns the server of the open service called name, as it
// listens (not through the lab's proxy), for clients of their own (the
// stories').
func (l *Lab) Server(name string) (*backends.Server, bool) {
	s, _ := l.Service(name)
	o, ok := s.(serverOwner)
	if !ok {
		return nil, false
	}
	return o.server(), true
}

// Backend returns the open backend with that name: a service that holds
// data.
func (l *Lab) Backend(name string) (dataBackend, bool) {
	s, _ := l.Service(name)
	b, ok := s.(dataBackend)
	return b, ok
}

// Open returns the names of the open services, backends included, in the
// order opened.
func (l *Lab) Open() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.order...)
}

// DataBackends returns the names of the open backends that hold data.
func (l *Lab) DataBackends() []string {
	var out []string
	for _, n := range l.Open() {
		if _, ok := l.Backend(n); ok {
			out = append(out, n)
		}
	}
	return out
}

// Infos describes the open services and backends.
func (l *Lab) Infos() []backendInfo {
	var out []backendInfo
	for _, n := range l.Open() {
		s, _ := l.Service(n)
		out = append(out, s.Info())
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
		if err := open[order[i]].Close(ctx); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", order[i], err))
		}
	}
	l.env.closeProxies()
	return errors.Join(errs...)
}

// childEnver is implemented by a service whose server a --procs child can
// reach: childEnv returns the environment (NAME=value) that makes the
// child's lab open the same server, on its own connections.
type childEnver interface {
	childEnv() []string
}

// namespace returns a fresh namespace for a cell.
func (l *Lab) namespace() string {
	return fmt.Sprintf("lab_%s_%d", l.id, l.seq.Add(1))
}

// redactURL drops a password from a URL for the report.
func redactURL(u string) string {
	p, err := url.Parse(u)
	if err != nil {
		return "(unparsable URL)"
	}
	return p.Redacted()
}

// infoField returns a field of a Redis INFO reply, or "?".
func infoField(info, name string) string {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+":"); ok {
			return v
		}
	}
	return "?"
}

// envRedisURL names the Redis server the lab uses.
const envRedisURL = backends.EnvRedisURL
