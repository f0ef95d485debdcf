package lab

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/occkit/occkit/benchmarks/internal/backends"
	"github.com/occkit/occkit/benchmarks/internal/locks"
	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/hybrid"
	"github.com/occkit/occkit/occ"
)

// errNotApplicable is returned (wrapped, with the reason) by a strategy's
// New when it cannot run on a cell: a baseline that needs a server that is
// not open, a single-key primitive asked to run a multi-key workload.
var errNotApplicable = errors.New("not applicable")

// strategyKind groups strategies for the goal checks.
type strategyKind int

const (
	// Optimistic strategies write with a version check and retry on
	// conflict (occ, occ-cached, occ-txn).
	kindOptimistic strategyKind = iota + 1
	// Hybrid takes a lease lock and writes with a fenced, version-checked
	// write.
	kindHybrid
	// Adaptive goes optimistic or hybrid per key, as the key's heat says.
	kindAdaptive
	// Lock is a pessimistic baseline: a lock held across read, work and
	// write (names start with "lock-").
	kindLock
	// Reference marks a measure of the server's physical limit that is
	// not a safe choice (blind-write): reported, never a rival or a
	// yardstick in the goal checks but its own (deltas ≥ 0.8× it).
	kindReference
)

func (k strategyKind) String() string {
	if names := [...]string{"unknown", "optimistic", "hybrid", "adaptive", "lock", "reference"}; k >= 0 && int(k) < len(names) {
		return names[k]
	}
	return "unknown"
}

// cellStrategy performs operations for one cell. Do is called concurrently by
// the cell's workers, each passing its own index w (0 ≤ w < Workers); it
// must return the operation's error as is (errDeclined, errNegative,
// cas.ErrAmbiguous stay matchable with errors.Is).
type cellStrategy interface {
	Do(ctx context.Context, w int, op operation) error
	// Close releases what New set up; it is called once after the
	// workers are done.
	Close(ctx context.Context) error
}

// strategyFunc is a cellStrategy with nothing to close.
type strategyFunc func(ctx context.Context, w int, op operation) error

// Do calls f.
func (f strategyFunc) Do(ctx context.Context, w int, op operation) error { return f(ctx, w, op) }

// Close does nothing.
func (strategyFunc) Close(context.Context) error { return nil }

// strategySpec describes a strategy.
type strategySpec struct {
	// Name is the strategy's name in flags, results and charts.
	Name string
	// Kind places it in the goal checks.
	Kind strategyKind
	// About is a one-line description for the report.
	About string
	// SingleKey and MultiKey say which workloads it can run: those whose
	// operations touch one key, and those that touch several atomically.
	SingleKey, MultiKey bool
	// DefaultOn reports whether the default grid runs it on a backend,
	// for workloads whose operations touch several keys (multiKey) or
	// one (nil: always). Explicitly requested strategies run wherever
	// New accepts the cell.
	DefaultOn func(backend string, multiKey bool) bool
	// New prepares the strategy for one cell, or returns an error
	// wrapping errNotApplicable.
	New func(ctx context.Context, h *harness) (cellStrategy, error)
	// OwnTable says the strategy keeps the cell's data where repository
	// code keeps it, in a table of the application's own, not in the
	// cell's store: the lab leaves the store empty, New creates and
	// seeds the table (a --procs child's New opens its parent's, see
	// harness.Attached), and the strategy is a valueReader, through
	// which the invariant is checked.
	OwnTable bool
	// HTTP says the strategy's workers reach the data through an HTTP
	// service (strategies_http.go): it is judged against the other HTTP
	// strategies only, not against the locks taken in process.
	HTTP bool
}

// valueReader is implemented by the strategies of OwnTable specs: the
// invariant check reads every key's final value through it, after the
// strategy's Close (and before the harness's OnClose functions run).
type valueReader interface {
	// Value returns the value of key; an error matching cas.ErrNotFound
	// when the key is gone.
	Value(ctx context.Context, key string) (int64, error)
}

// strategySpecs are the lab's strategies: one list, written out, instead
// of registrations. Tests may append their own before opening a lab.
var strategySpecs = slices.Concat(coreStrategies, tableStrategies, gormStrategies, httpStrategies, clusterStrategies, postgresStrategies, etcdStrategies, redisStrategies, redlockStrategies, zookeeperStrategies, mysqlStrategies, deltaStrategies)

// strategyOrder is the order of the strategies in tables and
// charts; others follow by name.
var strategyOrder = []string{
	"occ", "occ-follower-reads", "occ-no-turns", "occ-no-exclusive", "occ-cached", "occ-combine", "occ-table", "occ-table-combine", "occ-table-txn", "occ-tables-txn", "occ-gorm", "occ-http", "occ-http-modify", "occ-txn", "occ-txn-serial-reads", "hybrid", "adaptive", "delta", "delta-unbatched", "delta-table", "blind-write",
	"lock-local", "lock-pg-for-update", "lock-pg-advisory", "lock-etcd-mutex",
	"lock-redis", "lock-redlock", "lock-zookeeper", "lock-mysql-for-update", "lock-mysql-get-lock", "lock-http",
}

// lookupStrategy returns the strategy with that name.
func lookupStrategy(name string) (strategySpec, bool) {
	for _, s := range strategySpecs {
		if s.Name == name {
			return s, true
		}
	}
	return strategySpec{}, false
}

// Strategies returns the names of the lab's strategies in the lab's
// order.
func Strategies() []string {
	names := make([]string, 0, len(strategySpecs))
	for _, s := range strategySpecs {
		names = append(names, s.Name)
	}
	sortStrategies(names)
	return names
}

func strategyRank(name string) int {
	if i := slices.Index(strategyOrder, name); i >= 0 {
		return i
	}
	return len(strategyOrder)
}

func sortStrategies(names []string) {
	sort.SliceStable(names, func(i, j int) bool {
		ri, rj := strategyRank(names[i]), strategyRank(names[j])
		if ri != rj {
			return ri < rj
		}
		return names[i] < names[j]
	})
}

// harness is what a strategy gets for one cell: the data, the backend
// holding it, the other open backends (for locks from another service),
// and the retry options that feed the cell's measurements.
type harness struct {
	// Cell is the cell being run.
	Cell Cell
	// Workload is the cell's workload.
	Workload *workloadSpec
	// Backend holds the data: the lab's client of its server.
	Backend *backends.Client
	// Store is the cell's fresh store, seeded with every key's initial
	// value; Values is the same store with the workload's codec.
	Store  cas.Store
	Values *cas.Typed[int64]
	// Keys are the cell's keys; the hottest (Zipf rank 0) first.
	Keys []string
	// NS is the cell's namespace: prefix lock names with NS + "/"
	// so that cells never share a lock.
	NS string
	// Attached is set in a --procs child: the cell's data exists, made
	// and seeded by the parent's harness (an OwnTable strategy opens its
	// table instead of creating it, and leaves it to the parent).
	Attached bool

	lab     *Lab
	opts    [][]occ.Option
	seeded  []cas.Item // what seeding wrote, to start version caches warm
	mu      sync.Mutex
	locker  hybrid.Locker
	cache   *occ.Cache
	closers []func(context.Context) error
}

// Options returns worker w's retry options: the attempt limit, the
// backend's backoff and retryable errors, and the observer that counts
// attempts and fence rejections. Pass them to every occ or hybrid call,
// and wrap a lock strategy's attempt in occ.Retry with them so that its
// attempts are counted alike.
func (h *harness) Options(w int) []occ.Option { return h.opts[w] }

// withOptions returns each worker's options followed by extra.
func (h *harness) withOptions(extra ...occ.Option) [][]occ.Option {
	perWorker := make([][]occ.Option, h.Cell.Workers)
	for w := range perWorker {
		perWorker[w] = append(slices.Clone(h.Options(w)), extra...)
	}
	return perWorker
}

// updating runs each operation as occ.Update of its key with its worker's
// options.
func updating(h *harness, perWorker [][]occ.Option) cellStrategy {
	return strategyFunc(func(ctx context.Context, w int, op operation) error {
		_, _, err := occ.Update(ctx, h.Values, op.Keys[0], mutateOne(op), perWorker[w]...)
		return err
	})
}

// cacheOption returns a version cache for the cell's store, one per
// process, as the option to add, on networked backends; on memory, where
// a read costs what a cache lookup does, none.
func (h *harness) cacheOption() []occ.Option {
	if h.Backend.System == backends.Memory {
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.cache == nil {
		h.cache = h.newCache()
	}
	return []occ.Option{occ.WithCache(h.cache)}
}

// newCache returns a version cache for the cell's store that knows what
// seeding wrote, as the cache of a service that has been running for a
// while knows its keys: a cell measures the steady state, not the
// cache's warm-up (docs/benchmarks.md, "What a cell reports", says what a
// cold cache did to short cells).
func (h *harness) newCache() *occ.Cache {
	c := occ.NewCache(h.Store, 2*len(h.Keys)+16)
	c.Remember(h.seeded...)
	return c
}

// OnClose registers f to run after the cell, after the strategy's Close.
func (h *harness) OnClose(f func(context.Context) error) {
	h.mu.Lock()
	h.closers = append(h.closers, f)
	h.mu.Unlock()
}

// Locker returns the data backend's own lease lock for this cell (made on
// first use, closed after the cell), with lock names in the cell's
// namespace.
func (h *harness) Locker(ctx context.Context) (hybrid.Locker, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.locker != nil {
		return h.locker, nil
	}
	if h.lab.localLocks(h.Backend) && h.Cell.Procs > 1 {
		return nil, fmt.Errorf("%s's lease lock is a lock of one process: its leases and fencing tokens mean nothing in another (--procs %d): %w",
			h.Backend.System, h.Cell.Procs, errNotApplicable)
	}
	l, closeFn, err := h.lab.newLocker(ctx, h.Backend, h.NS)
	if err != nil {
		return nil, err
	}
	h.closers = append(h.closers, closeFn)
	h.locker = nsLocker{l: l, ns: h.NS + "/"}
	return h.locker, nil
}

func (h *harness) close(ctx context.Context) error {
	h.mu.Lock()
	closers := h.closers
	h.closers = nil
	h.mu.Unlock()
	var errs []error
	for i := len(closers) - 1; i >= 0; i-- {
		errs = append(errs, closers[i](ctx))
	}
	return errors.Join(errs...)
}

// nsLocker puts lock names in a cell's namespace.
type nsLocker struct {
	l  hybrid.Locker
	ns string
}

func (n nsLocker) Acquire(ctx context.Context, key string) (hybrid.Lease, error) {
	return n.l.Acquire(ctx, n.ns+key)
}

// ReadApplyWrite is the body of a pessimistic strategy, to run while it
// holds the locks on op's keys: read every key, apply the operation, and
// write the new values (one compare-and-swap for one key, one atomic
// commit for several when the store has one). Under a correct lock the
// versions read are still current, so the writes cost what plain writes
// cost; if they are not, the write fails with cas.ErrConflict instead of
// losing an update, and the caller's retry loop counts another attempt.
func (h *harness) ReadApplyWrite(ctx context.Context, op operation) error {
	var (
		vals [4]int64
		vers [4]cas.Version
	)
	if len(op.Keys) > len(vals) {
		return fmt.Errorf("benchmarks: %d keys in one operation, at most %d", len(op.Keys), len(vals))
	}
	for i, k := range op.Keys {
		v, ver, err := h.Values.Get(ctx, k)
		if err != nil && !errors.Is(err, cas.ErrNotFound) {
			return err
		}
		vals[i], vers[i] = v, ver
	}
	n := len(op.Keys)
	if err := op.Apply(vals[:n]); err != nil {
		return err
	}
	if n == 1 {
		_, err := h.Values.CompareAndSwap(ctx, op.Keys[0], vers[0], vals[0])
		return err
	}
	ops := make([]cas.Op, n)
	for i, k := range op.Keys {
		b, err := h.Values.Encode(k, vals[i])
		if err != nil {
			return err
		}
		ops[i] = cas.Put(k, vers[i], b)
	}
	if c, ok := h.Store.(cas.Committer); ok {
		_, err := c.Commit(ctx, ops)
		return err
	}
	for _, o := range ops {
		if _, err := h.Store.CompareAndSwap(ctx, o.Key, o.Expected, o.Value); err != nil {
			return err
		}
	}
	return nil
}

// lockedRows are the rows a SELECT ... FOR UPDATE baseline locked (key,
// value), as pgx and database/sql return them.
type lockedRows interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
}

// applyLocked is the body of a SELECT ... FOR UPDATE baseline once its
// query ran: it reads the locked rows (a NULL value is a tombstone, 0),
// closes them with closeRows, applies op, and writes every key with
// write (found: its row was locked; else write creates it, and a
// concurrent create is a conflict).
func applyLocked(op operation, codec cas.Codec[int64], rows lockedRows, closeRows func(), write func(k string, b []byte, found bool) error) error {
	vals := make([]int64, len(op.Keys))
	found := make([]bool, len(op.Keys))
	err := func() error {
		defer closeRows()
		for rows.Next() {
			var (
				k string
				b []byte
			)
			if err := rows.Scan(&k, &b); err != nil {
				return err
			}
			i := slices.Index(op.Keys, k)
			if i < 0 {
				continue
			}
			found[i] = true
			if b != nil {
				if err := codec.Unmarshal(b, &vals[i]); err != nil {
					return err
				}
			}
		}
		return rows.Err()
	}()
	if err != nil {
		return err
	}
	if err := op.Apply(vals); err != nil {
		return err
	}
	for i, k := range op.Keys {
		b, err := codec.Marshal(vals[i])
		if err != nil {
			return err
		}
		if err := write(k, b, found[i]); err != nil {
			return err
		}
	}
	return nil
}

// sortedKeys returns op's keys in lock order (sorted), so that strategies
// holding several locks never deadlock.
func sortedKeys(op operation) []string {
	if len(op.Keys) == 1 {
		return op.Keys
	}
	ks := slices.Clone(op.Keys)
	slices.Sort(ks)
	return ks
}

// lockedPerWorker is lockedDo with a locker per worker, opened with open
// (which also returns how to close it) and closed after the cell: a lock
// client with a session of its own, as a process would have.
func lockedPerWorker(h *harness, prefix string, open func() (locks.Locker, func(), error)) (cellStrategy, error) {
	lockers := make([]locks.Locker, h.Cell.Workers)
	for i := range lockers {
		l, closeFn, err := open()
		if err != nil {
			return nil, err
		}
		lockers[i] = l
		h.OnClose(func(context.Context) error { closeFn(); return nil })
	}
	return lockedDo(h, prefix, lockers...), nil
}

// lockedDo returns the strategy of a lock baseline: underLocks with the
// read-apply-write.
func lockedDo(h *harness, prefix string, lockers ...locks.Locker) strategyFunc {
	return underLocks(h, prefix, h.ReadApplyWrite, lockers...)
}

// underLocks returns a strategy that, in occ.Retry with the harness's
// options (so that its attempts are counted and an unexpected conflict is
// retried, never lost), takes the lock on each of op's keys in key order
// (named prefix + key: put the cell's namespace in prefix; worker w takes
// its locks from lockers[w % len(lockers)]), runs body, and releases the
// locks in reverse order.
func underLocks(h *harness, prefix string, body func(ctx context.Context, op operation) error, lockers ...locks.Locker) strategyFunc {
	return func(ctx context.Context, w int, op operation) error {
		l := lockers[w%len(lockers)]
		return occ.Retry(ctx, func(ctx context.Context) error {
			keys := sortedKeys(op)
			grants := make([]*locks.Grant, 0, len(keys))
			defer func() {
				// A release that fails leaves the lock to expire (or to
				// go with its session).
				rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
				defer cancel()
				for i := len(grants) - 1; i >= 0; i-- {
					_ = grants[i].Release(rctx)
				}
			}()
			for _, k := range keys {
				g, err := l.Acquire(ctx, prefix+k)
				if err != nil {
					return err
				}
				grants = append(grants, g)
			}
			return body(ctx, op)
		}, h.Options(w)...)
	}
}
