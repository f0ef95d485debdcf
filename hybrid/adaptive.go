package hybrid

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/occkit/occkit/occ"
)

// AdaptiveConfig configures an Adaptive. The zero value is usable.
type AdaptiveConfig struct {
	// Alpha is the weight of the newest sample in the per-key estimates,
	// exponentially weighted moving averages (default 0.1).
	Alpha float64
	// LockAbove is how many times faster the lease path must carry a
	// key's updates than the optimistic path, by the model's estimates,
	// before the key takes the lease path (default 1.25; and at least
	// half of the key's optimistic attempts must conflict); a locked key
	// goes back when the lease path's advantage falls under LockAbove⁻¹
	// (or fewer than a quarter of its probes conflict). The gap is the
	// hysteresis that keeps a key from flapping.
	LockAbove float64
	// ProbeEvery makes one update in ProbeEvery of a locked key try one
	// optimistic attempt first, to keep measuring the optimistic path
	// (default 16); a probe that conflicts takes the lease path.
	ProbeEvery int
	// MaxKeys bounds the number of keys with statistics (default 10000;
	// keys with an update in flight that began after they got statistics
	// are not evicted, so the bound can be exceeded by their number);
	// each costs about 200 bytes plus the key.
	// Only keys whose updates conflict have statistics (see Adaptive).
	MaxKeys int
	// MaxBatch caps the updates the optimistic path combines into one
	// write (occ.WithMaxBatch; default occ.DefaultMaxBatch).
	MaxBatch int
	// OnSwitch, if set, is called (on the updating goroutine) each time a
	// key changes path: locked true when it takes the lease path. ratio
	// is the lease path's estimated rate of updates of the key divided by
	// the optimistic path's, as estimated when the key switched.
	OnSwitch func(key string, locked bool, ratio float64)
}

// Adaptive chooses, per key, between the optimistic path (occ.Update,
// with the concurrent updates of a key in this process combined into one
// write by an occ.Combiner) and the lease path (Update: a lease, then a
// fenced write), from a model of what each costs, fed by what the updates
// observe. It never spends updates exploring a path it expects to be
// slower.
//
// A key takes the lease path only when contention with writers elsewhere
// has made its optimistic attempts so slow that one update per lease
// carries more than one batch per attempt (by AdaptiveConfig.LockAbove,
// and while at least half of its attempts conflict), never merely because
// they conflict; it goes back when that no longer holds, and under a
// lasting storm it can cycle between the paths. A key whose updates do
// not conflict never locks and has no statistics: it costs the model one
// lookup that writes nothing. See docs/hybrid.md#adaptive for the model.
//
// An Adaptive is safe for concurrent use; share one per process and
// locker.
type Adaptive struct {
	locker   Locker
	cfg      AdaptiveConfig
	combiner *occ.Combiner
	keys     sync.Map     // key → *keyStat: the keys whose updates conflict
	nkeys    atomic.Int64 // entries in keys
	switches atomic.Int64
	leased   atomic.Int64 // updates that succeeded on the lease path
	obs      adaptiveObserver

	optimistic, probing []occ.Option // the paths' options, without the caller's
	optsPool            sync.Pool    // of *[]occ.Option: the caller's and a path's
}

// keyStat is what an Adaptive knows of one key. An update's path is
// chosen and closed without a lock (inflight, locked, probe); the
// estimates change under mu, once per optimistic attempt (with
// combining, once per batch), lease acquisition or update on the lease
// path.
type keyStat struct {
	mu         sync.Mutex
	inflight   atomic.Int32
	locked     atomic.Bool
	probe      atomic.Uint32 // locked updates, counted to pick the probes
	optimistic atomic.Int64  // updates that took the optimistic path

	attempts int     // optimistic attempts observed
	p        float64 // EWMA: fraction of optimistic attempts that conflicted
	d        float64 // EWMA: seconds per optimistic attempt
	b        float64 // EWMA: updates per successful optimistic attempt, the batch (0: unknown)
	lastOpt  int64   // optimistic at the last successful attempt
	h        float64 // estimate of the lock's round trips per update, seconds (0: unknown)
	dl       float64 // EWMA: seconds an update holds the lease (0: the lease path not measured)
}

// NewAdaptive returns an Adaptive that locks keys with l when the model
// says the lease path is cheaper.
func NewAdaptive(l Locker, cfg AdaptiveConfig) *Adaptive {
	if cfg.Alpha <= 0 || cfg.Alpha > 1 {
		cfg.Alpha = 0.1
	}
	if cfg.LockAbove <= 1 {
		cfg.LockAbove = 1.25
	}
	if cfg.ProbeEvery < 2 {
		cfg.ProbeEvery = 16
	}
	if cfg.MaxKeys <= 0 {
		cfg.MaxKeys = 10000
	}
	// The model takes contention within the process as free: the
	// combiner queues a key's updates from its first conflict on, and
	// keeps them queued while they come (a key cools only after lonely
	// batches over occ's cooling span), so the model sees one conflict
	// between them per heating. Queueing every update from the key's
	// first (occ.WithQueueFromStart) cost updates where keys are many and
	// calls cheap (docs/performance.md, "Measured on 2026-12-05 and not
	// kept").
	var copts []occ.CombinerOption
	if cfg.MaxBatch > 0 {
		copts = append(copts, occ.WithMaxBatch(cfg.MaxBatch))
	}
	a := &Adaptive{locker: l, cfg: cfg, combiner: occ.NewCombiner(copts...)}
	a.obs.a = a
	a.optimistic = []occ.Option{occ.WithObserver(a.obs), occ.WithCombiner(a.combiner)}
	a.probing = []occ.Option{occ.WithObserver(a.obs), occ.WithMaxAttempts(1)}
	a.optsPool.New = func() any { return new([]occ.Option) }
	return a
}

// stat returns key's statistics, if it has any.
func (a *Adaptive) stat(key string) *keyStat {
	if v, ok := a.keys.Load(key); ok {
		return v.(*keyStat)
	}
	return nil
}

// track returns key's statistics, made on its first conflict. At MaxKeys
// it first evicts a key with no update in flight.
func (a *Adaptive) track(key string) *keyStat {
	if st := a.stat(key); st != nil {
		return st
	}
	if a.nkeys.Load() >= int64(a.cfg.MaxKeys) {
		a.keys.Range(func(k, v any) bool {
			if v.(*keyStat).inflight.Load() != 0 {
				return true
			}
			if a.keys.CompareAndDelete(k, v) {
				a.nkeys.Add(-1)
				return false
			}
			return true // someone else removed it: look further
		})
	}
	v, loaded := a.keys.LoadOrStore(key, &keyStat{})
	if !loaded {
		a.nkeys.Add(1)
	}
	return v.(*keyStat)
}

// untrackBelow is the conflict rate under which an optimistic key's
// statistics are dropped: its updates then cost the model nothing until
// it conflicts again.
const untrackBelow = 0.01

// Paths of an update.
const (
	pathOptimistic = iota // combined occ.Update
	pathLocked            // Update: lease and fenced write
	pathProbe             // one optimistic attempt on a locked key
)

// begin records an update's start and returns its path and the key's
// statistics (nil for a key without: it is optimistic), whose inflight
// count the caller must decrement when done. A key without statistics
// costs one lookup that writes nothing; a known key, atomic operations.
func (a *Adaptive) begin(key string) (int, *keyStat) {
	st := a.stat(key)
	if st == nil {
		return pathOptimistic, nil
	}
	st.inflight.Add(1) // (an eviction that raced with it costs this update's samples)
	if !st.locked.Load() {
		st.optimistic.Add(1)
		return pathOptimistic, st
	}
	if st.probe.Add(1)%uint32(a.cfg.ProbeEvery) == 0 {
		return pathProbe, st
	}
	return pathLocked, st
}

// minSamples is how many optimistic attempts of a key the model needs
// before it may lock the key.
const minSamples = 8

// judge applies the model to st (its mutex held): it reports
// whether the key switched path, and the lease path's estimated rate of
// updates over the optimistic path's.
func (a *Adaptive) judge(st *keyStat) (bool, float64) {
	if st.attempts < minSamples || st.dl == 0 {
		return false, 0
	}
	h := st.h
	if h == 0 {
		// Not measured yet: a lock costs at least an acquire and a
		// release, each a round trip like the attempt's two.
		h = st.d
	}
	// One update on the lease path: its acquire (h counts a release too,
	// which dℓ holds) and the time it holds the lease.
	lease := h/2 + st.dl
	if lease <= 0 {
		return false, 0
	}
	// An optimistic attempt time lets one batch through; a lease one
	// update per lease.
	ratio := st.d / (max(st.b, 1) * lease)
	locked := st.locked.Load()
	switch {
	case !locked && ratio > a.cfg.LockAbove && st.p >= 0.5:
		st.probe.Store(0)
		st.locked.Store(true)
		return true, ratio
	case locked && (ratio < 1/a.cfg.LockAbove || st.p < 0.25):
		st.locked.Store(false)
		// Measure the lease path again before locking again: the
		// conditions that made it faster may be gone.
		st.dl = 0
		return true, ratio
	}
	return false, ratio
}

// switched reports a path change judged for key.
func (a *Adaptive) switched(key string, locked bool, ratio float64) {
	a.switches.Add(1)
	if a.cfg.OnSwitch != nil {
		a.cfg.OnSwitch(key, locked, ratio)
	}
}

// observeAttempt folds one optimistic attempt of key into its estimates
// and judges the key's path.
func (a *Adaptive) observeAttempt(key string, conflict bool, latency time.Duration) {
	st := a.stat(key)
	switch {
	case st != nil:
	case !conflict:
		return // a key without conflicts: nothing to model
	default:
		st = a.track(key)
	}
	quiet := false
	a.fold(key, st, func(st *keyStat) {
		a.foldAttempt(st, conflict, latency)
		quiet = !conflict && st.attempts >= minSamples && st.p < untrackBelow && !st.locked.Load()
	})
	if quiet && a.keys.CompareAndDelete(key, st) {
		a.nkeys.Add(-1)
	}
}

// observe folds a sample into key's estimates with fold. A key without
// statistics (evicted, or it never conflicted) is left alone.
func (a *Adaptive) observe(key string, fold func(st *keyStat)) {
	if st := a.stat(key); st != nil {
		a.fold(key, st, fold)
	}
}

// fold folds a sample into st with fold (under st's mutex), judges the
// key's path and reports a switch.
func (a *Adaptive) fold(key string, st *keyStat, fold func(st *keyStat)) {
	st.mu.Lock()
	fold(st)
	sw, ratio := a.judge(st)
	locked := st.locked.Load()
	st.mu.Unlock()
	if sw {
		a.switched(key, locked, ratio)
	}
}

// foldAttempt folds one optimistic attempt into st.
func (a *Adaptive) foldAttempt(st *keyStat, conflict bool, latency time.Duration) {
	x := 0.0
	if conflict {
		x = 1
	}
	alpha := a.cfg.Alpha
	if st.attempts == 0 {
		st.p, st.d = x, latency.Seconds()
	} else {
		st.p = alpha*x + (1-alpha)*st.p
		st.d = alpha*latency.Seconds() + (1-alpha)*st.d
	}
	st.attempts++
	if !conflict && !st.locked.Load() {
		// The updates begun since the key's last successful write are
		// about what this one carried. (While the key is locked the
		// successes are probes, one update each: the estimate keeps the
		// batch the optimistic path had.)
		n := st.optimistic.Load()
		x := float64(n - st.lastOpt)
		st.lastOpt = n
		if st.b == 0 {
			st.b = x
		} else {
			st.b = alpha*x + (1-alpha)*st.b
		}
	}
}

// observeLeased folds the time one update held key's lease (its read,
// mutate and fenced write, and the release) into the lease path's
// estimate, and judges the key's path.
func (a *Adaptive) observeLeased(key string, held time.Duration) {
	a.observe(key, func(st *keyStat) {
		x := held.Seconds()
		if st.dl == 0 {
			st.dl = x
		} else {
			st.dl = a.cfg.Alpha*x + (1-a.cfg.Alpha)*st.dl
		}
	})
}

// observeLock folds the latency of one acquire and release of key's lease
// (twice the acquire's: the lease itself is not wrapped, so that it keeps
// every capability it has) into the overhead estimate, and judges the
// key's path. Waits in the lock's queue are contention, paid by both
// paths, not overhead: the estimate follows the fastest grants (a sample
// above twice the estimate moves it only slowly).
func (a *Adaptive) observeLock(key string, latency time.Duration) {
	a.observe(key, func(st *keyStat) {
		x := latency.Seconds()
		switch {
		case st.h == 0 || x < st.h:
			st.h = x
		case x < 2*st.h:
			st.h = a.cfg.Alpha*x + (1-a.cfg.Alpha)*st.h
		default:
			st.h *= 1.01
		}
	})
}
