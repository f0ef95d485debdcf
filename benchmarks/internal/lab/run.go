package lab

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v4"
	"golang.org/x/sync/errgroup"

	"github.com/occkit/occkit/benchmarks/internal/backends"
	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/occ"
)

// DefaultMaxAttempts is the attempt limit of a cell's operations when the
// cell sets none: high enough that an operation on one hot key rarely
// gives up, so that throughput and latency measure the strategy, not the
// limit; gave-up operations are reported as failed.
const DefaultMaxAttempts = 50

// Cell is one measurement: a workload run by a strategy on a backend at
// one level of contention.
type Cell struct {
	Backend  string
	Strategy string
	Workload string
	// Workers is the number of goroutines issuing operations.
	Workers int
	// Keys is the number of keys; Theta the Zipf exponent of key choice
	// (0: uniform).
	Keys  int
	Theta float64
	// Work is the time spent inside the critical section, between the
	// read and the write (a sleep: time spent waiting for something
	// else, not CPU).
	Work time.Duration
	// Duration is the measured time. Operations completing during the
	// Warmup before it run but are not measured.
	Duration, Warmup time.Duration
	// Ops, when Duration is 0, runs this many operations in all and
	// measures them all.
	Ops int64
	// Seed makes key choice and parameters reproducible.
	Seed uint64
	// MaxAttempts limits each operation's attempts (0:
	// DefaultMaxAttempts).
	MaxAttempts int
	// Initial is every key's starting value (0: the workload's).
	Initial int64
	// Procs runs the workers in this many OS processes (the binary run
	// again, see ChildMain), Workers/Procs each (0 or 1: goroutines of
	// this process). Each process has its own strategy: its own combiner,
	// cache and connections, as replicas of a service would.
	Procs int
}

// Result is a cell's measurements. The JSON names are those of
// results.json.
type Result struct {
	Backend  string  `json:"backend"`
	Strategy string  `json:"strategy"`
	Workload string  `json:"workload"`
	Workers  int     `json:"workers"`
	Keys     int     `json:"keys"`
	Theta    float64 `json:"theta"`
	WorkMs   float64 `json:"work_ms"`
	// Procs is the number of OS processes the workers ran in (--procs).
	Procs int `json:"procs"`
	// Proxy says that every connection went through a proxy adding
	// DelayMs in each direction (--rtt).
	Proxy   bool    `json:"proxy"`
	DelayMs float64 `json:"delay_ms"`
	// Ops is the number of committed operations that started in the
	// measured window, Throughput those per second of the window.
	Ops        int64   `json:"ops"`
	Throughput float64 `json:"throughput"`
	// Latency of committed operations, retries and lock waits included.
	P50Ms  float64 `json:"p50_ms"`
	P99Ms  float64 `json:"p99_ms"`
	P999Ms float64 `json:"p999_ms"`
	// AttemptsPerOp is attempts (of all operations) per committed one.
	AttemptsPerOp   float64 `json:"attempts_per_op"`
	FenceRejections int64   `json:"fence_rejections"`
	InvariantOK     bool    `json:"invariant_ok"`

	MaxMs float64 `json:"max_ms"`
	// FailedOps gave up or failed (started in the window); AmbiguousOps are the
	// failed ones that may have been applied; DeclinedOps were refused
	// by the workload (sold out, balance too small).
	FailedOps    int64 `json:"failed_ops"`
	AmbiguousOps int64 `json:"ambiguous_ops"`
	DeclinedOps  int64 `json:"declined_ops"`
	// TotalFailedOps counts every operation of the cell that gave up or
	// failed (ambiguous ones included), whenever it started: warm-up and
	// operations still running after the window too, as the invariant's
	// tally counts them.
	TotalFailedOps int64 `json:"total_failed_ops"`
	// WorkersCommitted counts the workers that committed at least one
	// operation within the measured window (a starved worker did not).
	WorkersCommitted int `json:"workers_committed"`
	// StalledOps were running through the whole measured window: started
	// before it, done after it (a starved retry loop, a stuck lock wait).
	// They appear in no other figure.
	StalledOps int64 `json:"stalled_ops"`
	// Contention is the probability that two operations pick the same
	// key (Σ p², 1/keys when uniform): the charts' x axis.
	Contention float64 `json:"contention"`
	MeasuredS  float64 `json:"measured_s"`
	// Invariant says how the invariant was broken (empty when it held).
	Invariant string `json:"invariant,omitempty"`
	// Error is the first error of a failed operation.
	Error string `json:"error,omitempty"`
	// Runs is the throughput of every round when the grid ran with
	// --repeat (RunGrid's repeat): the other figures are those of the
	// median round.
	Runs []float64 `json:"runs,omitempty"`
	// OfBlindWrite is the throughput as a fraction of blind-write's at
	// the same point (the server's physical limit), when blind-write ran
	// there; 0 otherwise.
	OfBlindWrite float64 `json:"of_blind_write,omitempty"`
}

// Point identifies a result's grid point within its backend and
// workload.
func (r Result) Point() point {
	return point{Workers: r.Workers, Keys: r.Keys, Theta: r.Theta, WorkMs: r.WorkMs}
}

// Run runs one cell: a fresh store in its own namespace, seeded with every
// key's initial value; the workers for the warm-up and the measured
// window; then the invariant check over every key. An error means the
// cell could not be run (setup failed, or the strategy does not apply:
// errors.Is(err, errNotApplicable)); a broken invariant is not an error but
// a Result with InvariantOK false.
func (l *Lab) Run(ctx context.Context, c Cell) (Result, error) {
	c, wl, spec, be, err := l.check(c)
	if err != nil {
		return Result{}, err
	}
	zipf, err := newZipf(c.Keys, c.Theta)
	if err != nil {
		return Result{}, err
	}
	ns := l.namespace()
	store, err := be.CreateStore(ctx, ns)
	if err != nil {
		return Result{}, fmt.Errorf("benchmarks: %s: new store: %w", c.Backend, err)
	}
	defer func() { _ = be.Drop(context.WithoutCancel(ctx), ns) }()
	h, ks := newHarness(l, c, wl, be, store, ns)
	seed := h.Keys
	if spec.OwnTable {
		seed = nil // the data lives in the strategy's own table, which its New seeds
	}
	if err := h.seed(ctx, seed, c.Initial); err != nil {
		return Result{}, err
	}
	workers := h.newWorkers()
	defer func() { _ = h.close(context.WithoutCancel(ctx)) }()
	// spec is the entry of strategySpecs named c.Strategy (in
	// strategies*.go): its New makes the cellStrategy whose Do the
	// workers call.
	strat, err := spec.New(ctx, h)
	if err != nil {
		return Result{}, fmt.Errorf("%s on %s: %w", c.Strategy, c.Backend, err)
	}

	var (
		elapsed  time.Duration
		closeErr error
	)
	if c.Procs > 1 {
		// The workers run in child processes; the strategy made here
		// is not used (its set-up checked that it applies).
		closeErr = strat.Close(context.WithoutCancel(ctx))
		if elapsed, err = l.runProcs(ctx, c, ns, workers); err != nil {
			return Result{}, fmt.Errorf("%s on %s, %d processes: %w", c.Strategy, c.Backend, c.Procs, err)
		}
	} else {
		elapsed = runWorkers(ctx, c, wl, zipf, ks, strat, workers, 0, time.Now())
		closeErr = strat.Close(context.WithoutCancel(ctx))
	}
	res, tally := l.result(c, zipf, elapsed, workers)
	read := func(ctx context.Context, k string) (int64, error) {
		v, _, err := h.Values.Get(ctx, k)
		return v, err
	}
	if spec.OwnTable {
		vr, ok := strat.(valueReader)
		if !ok {
			return Result{}, fmt.Errorf("%s keeps its own table but cannot read it back (no Value method)", c.Strategy)
		}
		read = vr.Value
	}
	res.Invariant = checkInvariant(ctx, c, wl, h.Keys, read, tally)
	res.InvariantOK = res.Invariant == ""
	if res.InvariantOK && closeErr != nil && res.Error == "" {
		res.Error = "closing the strategy: " + closeErr.Error()
	}
	return res, nil
}

// check returns cell c with its defaults filled in, its workload,
// strategy and backend, or why it cannot run.
func (l *Lab) check(c Cell) (Cell, *workloadSpec, strategySpec, *backends.Client, error) {
	wl, ok := lookupWorkload(c.Workload)
	if !ok {
		return c, nil, strategySpec{}, nil, fmt.Errorf("benchmarks: unknown workload %q", c.Workload)
	}
	spec, ok := lookupStrategy(c.Strategy)
	if !ok {
		return c, nil, strategySpec{}, nil, fmt.Errorf("benchmarks: unknown strategy %q", c.Strategy)
	}
	be, ok := l.backend(c.Backend)
	var err error
	switch {
	case !ok || be.Spec().LendsLock:
		err = fmt.Errorf("benchmarks: backend %q is not open", c.Backend)
	case c.Workers < 1:
		err = fmt.Errorf("benchmarks: %d workers", c.Workers)
	case c.Keys < wl.KeysPerOp:
		err = fmt.Errorf("benchmarks: workload %s needs at least %d keys, cell has %d", wl.Name, wl.KeysPerOp, c.Keys)
	case c.Duration <= 0 && c.Ops <= 0:
		err = errors.New("benchmarks: a cell needs a duration or an operation count")
	case wl.KeysPerOp == 1 && !spec.SingleKey, wl.KeysPerOp > 1 && !spec.MultiKey:
		err = fmt.Errorf("%s on %s: %w", c.Strategy, c.Workload, errNotApplicable)
	case wl.KeysPerOp > 1 && be.Server().MultiKeyUnsupported != "":
		err = fmt.Errorf("%s on %s: %s: %w", c.Workload, c.Backend, be.Server().MultiKeyUnsupported, errNotApplicable)
	}
	if c.MaxAttempts <= 0 {
		c.MaxAttempts = DefaultMaxAttempts
	}
	if c.Initial == 0 {
		c.Initial = wl.Initial
	}
	return c, wl, spec, be, err
}

// newHarness returns the harness of cell c on store, in namespace ns, and
// the cell's keys.
func newHarness(l *Lab, c Cell, wl *workloadSpec, be *backends.Client, store cas.Store, ns string) (*harness, keySpace) {
	ks := newKeySpace(be.Spec().KeyGroup, wl, c.Keys)
	return &harness{
		Cell: c, Workload: wl, Backend: be, Store: store,
		Values: cas.NewTyped(store, cas.JSON[int64]()),
		Keys:   ks.names, NS: ns, lab: l,
	}, ks
}

// seed writes every key's initial value, remembers what it wrote (to
// start version caches warm), and waits until the followers or replica
// have it (postgres-replica), so that a cell does not start with reads of
// keys the replica has not seen yet.
func (h *harness) seed(ctx context.Context, keys []string, initial int64) error {
	var mu sync.Mutex
	if err := parallel(ctx, keys, func(ctx context.Context, k string) error {
		v, err := h.Values.CompareAndSwap(ctx, k, 0, initial)
		if err != nil {
			return err
		}
		b, err := h.Values.Encode(k, initial)
		if err != nil {
			return err
		}
		mu.Lock()
		h.seeded = append(h.seeded, cas.Item{Key: k, Value: b, Version: v})
		mu.Unlock()
		return nil
	}); err != nil {
		return fmt.Errorf("benchmarks: seeding %d keys: %w", len(keys), err)
	}
	if err := h.Backend.CatchUp(ctx); err != nil {
		return fmt.Errorf("benchmarks: %s: after seeding: %w", h.Cell.Backend, err)
	}
	return nil
}

// newWorkers returns the cell's workers, each with its retry options
// (harness.Options).
func (h *harness) newWorkers() []*worker {
	workers := make([]*worker, h.Cell.Workers)
	h.opts = make([][]occ.Option, h.Cell.Workers)
	spec := h.Backend.Spec()
	for i := range workers {
		workers[i] = &worker{}
		h.opts[i] = retryOptions(h.Cell, spec, workers[i])
	}
	return workers
}

// result sums the workers' counters into the cell's Result, and returns
// the tally of every operation for the invariant.
func (l *Lab) result(c Cell, zipf *zipfDist, elapsed time.Duration, workers []*worker) (Result, opTally) {
	res := Result{
		Procs: max(c.Procs, 1), Proxy: l.env.Proxy, DelayMs: ms(l.env.Delay),
		Backend: c.Backend, Strategy: c.Strategy, Workload: c.Workload,
		Workers: c.Workers, Keys: c.Keys, Theta: c.Theta, WorkMs: ms(c.Work),
		Contention: zipf.Collision(), MeasuredS: c.Duration.Seconds(),
	}
	if c.Duration <= 0 {
		res.MeasuredS = elapsed.Seconds()
	}
	var hist latencyHistogram
	var tally opTally
	var attempts int64
	for _, wk := range workers {
		hist.Merge(&wk.hist)
		tally.add(wk.Tally)
		res.TotalFailedOps += wk.Tally.Failed + wk.Tally.Ambiguous
		res.Ops += wk.Committed
		res.FailedOps += wk.Failed
		res.AmbiguousOps += wk.Ambiguous
		res.DeclinedOps += wk.Declined
		res.FenceRejections += wk.Fenced
		res.StalledOps += wk.Stalled
		attempts += wk.Attempts
		if wk.CommittedInWindow > 0 {
			res.WorkersCommitted++
		}
		if res.Error == "" && wk.firstErr != nil {
			res.Error = wk.firstErr.Error()
		}
	}
	if res.MeasuredS > 0 {
		res.Throughput = float64(res.Ops) / res.MeasuredS
	}
	if res.Ops > 0 {
		res.AttemptsPerOp = float64(attempts) / float64(res.Ops)
	}
	res.P50Ms, res.P99Ms, res.P999Ms = ms(hist.Quantile(0.5)), ms(hist.Quantile(0.99)), ms(hist.Quantile(0.999))
	res.MaxMs = ms(hist.Max())
	return res, tally
}

// checkInvariant reads every key's final value with read and checks the
// workload's invariant with every operation of the cell (warm-up and
// late finishers included); it says how the invariant broke, or "".
func checkInvariant(ctx context.Context, c Cell, wl *workloadSpec, keys []string, read func(context.Context, string) (int64, error), tally opTally) string {
	final := make([]int64, len(keys))
	idx := make(map[string]int, len(keys))
	for i, k := range keys {
		idx[k] = i
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	if err := parallel(ctx, keys, func(ctx context.Context, k string) error {
		v, err := read(ctx, k)
		if errors.Is(err, cas.ErrNotFound) {
			return fmt.Errorf("key %s is gone", k)
		}
		final[idx[k]] = v
		return err
	}); err != nil {
		return "could not read the final values: " + err.Error()
	}
	if err := wl.Check(final, c.Initial, tally); err != nil {
		return err.Error()
	}
	return ""
}

// retryOptions are a worker's occ options for a cell on a backend of
// system t: its backoff (at least the cell's work time first: a conflict
// means somebody was in the critical section, which lasts about that
// long) and its adapter's retryable errors.
func retryOptions(c Cell, t backends.Spec, obs occ.Observer) []occ.Option {
	opts := []occ.Option{occ.WithMaxAttempts(c.MaxAttempts), occ.WithObserver(obs)}
	if initial, maxWait, ok := backOffBounds(c, t); ok {
		opts = append(opts, occ.WithBackOffFunc(func() backoff.BackOff {
			b := &backoff.ExponentialBackOff{
				InitialInterval:     initial,
				RandomizationFactor: 0.5,
				Multiplier:          2,
				MaxInterval:         maxWait,
				Stop:                backoff.Stop,
				Clock:               backoff.SystemClock,
			}
			b.Reset()
			return b
		}))
	}
	if t.Retryable != nil {
		opts = append(opts, occ.WithRetryable(t.Retryable))
	}
	return opts
}

// backOffBounds returns the backoff of a cell, or ok false for occ's
// default.
func backOffBounds(c Cell, t backends.Spec) (initial, maxWait time.Duration, ok bool) {
	if t.BackOffInitial == 0 && t.BackOffMax == 0 && c.Work <= time.Millisecond {
		return 0, 0, false
	}
	initial, maxWait = t.BackOffInitial, t.BackOffMax
	if initial == 0 {
		initial = time.Millisecond
	}
	if maxWait == 0 {
		maxWait = 100 * time.Millisecond
	}
	initial = max(initial, c.Work)
	return initial, max(maxWait, initial), true
}

// describeBackOff says in words what backoff a backend's optimistic
// strategies use.
func describeBackOff(t backends.Spec) string {
	if t.BackOffInitial == 0 && t.BackOffMax == 0 {
		return "occ default: waits counted in the call's own attempt times (1, 2, 4, 8 of them, ±50% jitter; then 4 once senior)"
	}
	return fmt.Sprintf("%v doubling to %v, ±50%% jitter (at least the work time first)", t.BackOffInitial, t.BackOffMax)
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// parallel calls f for every key from 8 goroutines and returns the first
// error.
func parallel(ctx context.Context, keys []string, f func(ctx context.Context, k string) error) error {
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(8)
	for _, k := range keys {
		if ctx.Err() != nil {
			break
		}
		g.Go(func() error { return f(ctx, k) })
	}
	return g.Wait()
}
