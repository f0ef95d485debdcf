package lab

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/occkit/occkit/benchmarks/internal/backends"
)

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
	open    map[string]*backend
	order   []string
	skipped []skip

	// onDemand serialises openOnDemand; failed remembers the backends it
	// could not open, so that a run tries each once.
	onDemand sync.Mutex
	failed   map[string]error
}

// OpenLab opens the named backends (if names is empty, every one but the
// opt-in clusters, which run only when named). A backend that cannot run
// here is skipped with its reason (Skipped); OpenLab fails only on an
// unknown name or a cancelled ctx.
func OpenLab(ctx context.Context, names []string, env Env) (*Lab, error) {
	if len(names) == 0 {
		names = DefaultBackends()
	}
	l := &Lab{env: env, id: backends.RandomHex(4), open: map[string]*backend{}, failed: map[string]error{}}
	for _, n := range names {
		if _, ok := lookupSystem(n); !ok {
			return nil, fmt.Errorf("benchmarks: unknown backend %q (have %v)", n, Backends())
		}
	}
	for _, n := range names {
		if err := ctx.Err(); err != nil {
			_ = l.Close(context.Background())
			return nil, err
		}
		sys, _ := lookupSystem(n)
		b, err := openBackend(ctx, l, sys)
		if err != nil {
			l.skipped = append(l.skipped, skip{Name: n, Reason: err.Error()})
			continue
		}
		l.open[n] = b
		l.order = append(l.order, n)
	}
	return l, nil
}

// backend returns the open backend with that name.
func (l *Lab) backend(name string) (*backend, bool) {
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
func (l *Lab) openOnDemand(ctx context.Context, name string) (*backend, error) {
	l.onDemand.Lock()
	defer l.onDemand.Unlock()
	if b, ok := l.backend(name); ok {
		return b, nil
	}
	if err := l.failed[name]; err != nil {
		return nil, err
	}
	sys, ok := lookupSystem(name)
	if !ok {
		return nil, fmt.Errorf("benchmarks: unknown backend %q", name)
	}
	b, err := openBackend(ctx, l, sys)
	if err != nil {
		if ctx.Err() == nil {
			l.failed[name] = err
		}
		return nil, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.open == nil { // closed meanwhile
		return nil, errors.Join(errors.New("benchmarks: the lab is closed"), b.close(context.WithoutCancel(ctx)))
	}
	l.open[name] = b
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
		if b, _ := l.backend(n); !b.sys.lendsLock {
			out = append(out, n)
		}
	}
	return out
}

// Infos describes the open backends.
func (l *Lab) Infos() []backendInfo {
	var out []backendInfo
	for _, n := range l.Open() {
		b, _ := l.backend(n)
		out = append(out, b.Info())
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
		if err := open[order[i]].close(ctx); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", order[i], err))
		}
	}
	return errors.Join(errs...)
}

// namespace returns a fresh namespace for a cell.
func (l *Lab) namespace() string {
	return fmt.Sprintf("lab_%s_%d", l.id, l.seq.Add(1))
}
