package lab

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// point is a grid point of one backend and workload: how many workers,
// over how many keys, how skewed, with how much work in the critical
// section.
type point struct {
	Workers int     `json:"workers"`
	Keys    int     `json:"keys"`
	Theta   float64 `json:"theta"`
	WorkMs  float64 `json:"work_ms"`
}

// String names the point for tables and charts: "8w 1000k θ=0".
func (p point) String() string {
	s := fmt.Sprintf("%dw %dk", p.Workers, p.Keys)
	if p.Keys > 2 {
		s += " θ=" + strconv.FormatFloat(p.Theta, 'g', 3, 64)
	}
	if p.WorkMs > 0 {
		s += " work=" + strconv.FormatFloat(p.WorkMs, 'g', 3, 64) + "ms"
	}
	return s
}

// Low reports whether the point is a low-contention one in the goals'
// sense: uniform choice over at least 1000 keys.
func (p point) Low() bool { return p.Theta == 0 && p.Keys >= 1000 }

// High reports whether the point is a high-contention one: every worker
// on one key (two for a workload that needs two distinct keys).
func (p point) High() bool { return p.Keys <= 2 }

// Grid describes a run: the cross product of backends, workloads, points
// and strategies. Zero fields take the defaults of the default run.
type Grid struct {
	// Backends to run on (empty: every open backend).
	Backends []string
	// Strategies to run (empty: each backend's defaults, see
	// strategySpec.DefaultOn).
	Strategies []string
	// Workloads (empty: all registered).
	Workloads []string
	// Workers, Keys, Thetas and Works span the points. With neither Keys
	// nor Thetas, the points are the low- and high-contention pair the
	// goals are checked on: 1000 keys uniform, and 1 key. Thetas apply to
	// more than 2 keys only. A workload that needs more keys than a point
	// has (transfer needs 2) runs with its minimum instead.
	Workers []int
	Keys    []int
	Thetas  []float64
	Works   []time.Duration
	// Duration and Warmup of every cell (defaults 1 s and 200 ms); or,
	// with Ops set and no Duration, Ops operations per cell, all measured.
	Duration, Warmup time.Duration
	Ops              int64
	Seed             uint64
	MaxAttempts      int
	// Procs runs every cell's workers in this many OS processes (see
	// Cell.Procs). With more than one, lock-local (a mutex of one
	// process) and the memory backend (a store in one process) are left
	// out, with a note.
	Procs int
}

// Default values of a Grid.
const (
	DefaultWorkers  = 8
	defaultLowKeys  = 1000
	defaultDuration = time.Second
	defaultWarmup   = 200 * time.Millisecond
)

func (g Grid) points() []point {
	workers := g.Workers
	if len(workers) == 0 {
		workers = []int{DefaultWorkers}
	}
	works := g.Works
	if len(works) == 0 {
		works = []time.Duration{0}
	}
	type kt struct {
		keys  int
		theta float64
	}
	var kts []kt
	switch {
	case len(g.Keys) == 0 && len(g.Thetas) == 0:
		kts = []kt{{defaultLowKeys, 0}, {1, 0}}
	default:
		keys, thetas := g.Keys, g.Thetas
		if len(keys) == 0 {
			keys = []int{defaultLowKeys}
		}
		if len(thetas) == 0 {
			thetas = []float64{0}
		}
		for _, k := range keys {
			for _, t := range thetas {
				if k <= 2 {
					t = 0
				}
				if !slices.Contains(kts, kt{k, t}) {
					kts = append(kts, kt{k, t})
				}
			}
		}
	}
	var pts []point
	for _, w := range workers {
		for _, x := range kts {
			for _, wt := range works {
				pts = append(pts, point{Workers: w, Keys: x.keys, Theta: x.theta, WorkMs: ms(wt)})
			}
		}
	}
	return pts
}

// Plan lists the cells of g on the lab's open backends, in run order
// (backend, workload, point, then strategy, so that the strategies of one
// point run side by side), and the combinations it leaves out with the
// reason.
func (g Grid) Plan(l *Lab) ([]Cell, []skip, error) {
	backendNames := g.Backends
	if len(backendNames) == 0 {
		backendNames = l.DataBackends()
	}
	workloadNames := g.Workloads
	if len(workloadNames) == 0 {
		workloadNames = Workloads()
	}
	for _, n := range workloadNames {
		if _, ok := lookupWorkload(n); !ok {
			return nil, nil, fmt.Errorf("benchmarks: unknown workload %q (have %v)", n, Workloads())
		}
	}
	explicit := len(g.Strategies) > 0
	strategyNames := g.Strategies
	if !explicit {
		strategyNames = Strategies()
	}
	for _, n := range strategyNames {
		if _, ok := lookupStrategy(n); !ok {
			return nil, nil, fmt.Errorf("benchmarks: unknown strategy %q (have %v)", n, Strategies())
		}
	}
	strategyNames = slices.Clone(strategyNames)
	sortStrategies(strategyNames)
	dur, warm := g.Duration, g.Warmup
	switch {
	case dur < 0 || warm < 0:
		return nil, nil, errors.New("benchmarks: negative duration or warm-up")
	case g.Ops > 0 && dur == 0:
		warm = 0 // a count of operations, all measured
	default:
		// Timed cells always warm up unless told how long: the first
		// operations of a cell open connections and prepare statements,
		// and measured, they would be its tail.
		if dur == 0 {
			dur = defaultDuration
		}
		if warm == 0 {
			warm = defaultWarmup
		}
	}
	var (
		cells []Cell
		skips []skip
	)
	skip := func(name, reason string) {
		if !slices.ContainsFunc(skips, func(s skip) bool { return s.Name == name }) {
			skips = append(skips, skip{Name: name, Reason: reason})
		}
	}
	for _, b := range backendNames {
		if g.Procs > 1 && b == "memory" {
			skip(b, fmt.Sprintf("--procs %d: the in-process store cannot be shared between processes", g.Procs))
			continue
		}
		be, ok := l.backend(b)
		if !ok {
			return nil, nil, fmt.Errorf("benchmarks: backend %q is not open", b)
		}
		if be.Spec().LendsLock {
			continue // lends locks only: lock-* strategies use it from other backends
		}
		for _, wn := range workloadNames {
			wl, _ := lookupWorkload(wn)
			if why := be.Server().MultiKeyUnsupported; wl.KeysPerOp > 1 && why != "" {
				skip(b+"/"+wn, why)
				continue
			}
			var pts []point
			for _, p := range g.points() {
				if p.Keys < wl.KeysPerOp {
					p.Keys, p.Theta = wl.KeysPerOp, 0
				}
				if !slices.Contains(pts, p) {
					pts = append(pts, p)
				}
			}
			for _, p := range pts {
				for _, sn := range strategyNames {
					spec, _ := lookupStrategy(sn)
					name := b + "/" + wn + "/" + sn
					if !explicit && spec.DefaultOn != nil && !spec.DefaultOn(b, wl.KeysPerOp > 1) {
						continue
					}
					if g.Procs > 1 && sn == "lock-local" {
						skip(sn, fmt.Sprintf("--procs %d: a mutex of one process is not a lock across processes (it stays the single-process reference without --procs)", g.Procs))
						continue
					}
					if (wl.KeysPerOp == 1 && !spec.SingleKey) || (wl.KeysPerOp > 1 && !spec.MultiKey) {
						reason := "needs several keys per operation"
						if wl.KeysPerOp > 1 {
							reason = "single-key only: cannot update several keys atomically"
						}
						if explicit || spec.Kind != kindOptimistic || sn == "occ" {
							skip(name, reason)
						}
						continue
					}
					cells = append(cells, Cell{
						Backend: b, Strategy: sn, Workload: wn,
						Workers: p.Workers, Keys: p.Keys, Theta: p.Theta, Work: time.Duration(p.WorkMs * float64(time.Millisecond)),
						Duration: dur, Warmup: warm, Ops: g.Ops, Seed: g.Seed, MaxAttempts: g.MaxAttempts, Procs: g.Procs,
					})
				}
			}
		}
	}
	return cells, skips, nil
}

// outcome is what running one cell of a grid gave.
type outcome struct {
	Cell   Cell
	Result *Result // nil when the cell did not run
	Err    error   // why it did not run
}

// Skipped reports whether the cell was left out because its strategy does
// not apply (not a failure).
func (o outcome) Skipped() bool { return o.Err != nil && errors.Is(o.Err, errNotApplicable) }

// RunGrid runs cells one after the other, calling progress (if not nil)
// before each run and after the last. It stops early only when ctx ends.
//
// With repeat above 1, the strategies of each grid point (consecutive
// cells of one backend, workload and point, as Plan orders them) run
// repeat times in turn, the order rotated by one each round, so that a
// machine's slow moments fall on each strategy alike; each cell then
// reports its median round by throughput (Result.Runs lists every
// round's). A round that fails, or breaks the invariant, is reported
// instead of the median.
func (l *Lab) RunGrid(ctx context.Context, cells []Cell, repeat int, progress func(done int, next *Cell)) []outcome {
	repeat = max(repeat, 1)
	out := make([]outcome, 0, len(cells))
	done := 0
	for start := 0; start < len(cells) && ctx.Err() == nil; {
		end := start + 1
		for end < len(cells) && samePoint(cells[start], cells[end]) {
			end++
		}
		group := cells[start:end]
		rounds := make([][]outcome, len(group))
		for r := 0; r < repeat && ctx.Err() == nil; r++ {
			for j := range group {
				i := (j + r) % len(group)
				if ctx.Err() != nil {
					break
				}
				if progress != nil {
					progress(done, &group[i])
				}
				done++
				res, err := l.Run(ctx, group[i])
				o := outcome{Cell: group[i], Err: err}
				if err == nil {
					o.Result = &res
				}
				rounds[i] = append(rounds[i], o)
			}
		}
		for i := range group {
			if len(rounds[i]) > 0 {
				out = append(out, pickRound(rounds[i]))
			}
		}
		start = end
	}
	if progress != nil {
		progress(done, nil)
	}
	return out
}

// samePoint reports whether two cells are strategies of one grid point.
func samePoint(a, b Cell) bool {
	a.Strategy, b.Strategy = "", ""
	return a == b
}

// pickRound is the outcome reported for a cell run in several rounds: the
// first failed or invariant-breaking round, else the median by throughput,
// with every round's throughput in Runs.
func pickRound(rounds []outcome) outcome {
	if len(rounds) == 1 {
		return rounds[0]
	}
	for _, o := range rounds {
		if o.Err != nil || !o.Result.InvariantOK {
			return o
		}
	}
	runs := make([]float64, len(rounds))
	for i, o := range rounds {
		runs[i] = o.Result.Throughput
	}
	sorted := slices.Clone(rounds)
	slices.SortFunc(sorted, func(a, b outcome) int { return cmp.Compare(a.Result.Throughput, b.Result.Throughput) })
	med := sorted[(len(sorted)-1)/2]
	r := *med.Result
	r.Runs = runs
	med.Result = &r
	return med
}

// CellName names a cell in messages.
func CellName(c Cell) string {
	p := point{Workers: c.Workers, Keys: c.Keys, Theta: c.Theta, WorkMs: ms(c.Work)}
	return strings.Join([]string{c.Backend, c.Workload, c.Strategy, p.String()}, " ")
}
