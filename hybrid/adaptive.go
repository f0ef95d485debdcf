package hybrid

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/occ"
)

// AdaptiveConfig configures an Adaptive. The zero value is usable.
type AdaptiveConfig struct {
	// HotAbove is the contention score above which a key counts as hot
	// (default 1: on average at least one other update of the key was
	// running, or had to be retried, per update).
	HotAbove float64
	// CoolBelow is the score under which a hot key counts as cool again
	// (default HotAbove/4). The gap between the two is the hysteresis that
	// keeps a key from flapping.
	CoolBelow float64
	// Alpha is the weight of the newest update in the score and in the
	// latency estimates, exponentially weighted moving averages (default
	// 0.2).
	Alpha float64
	// Epoch is the number of updates of a hot key between decisions
	// (default 32): a hot key takes one path for a whole epoch, so that
	// the path's cost is measured with every writer on it.
	Epoch int
	// MaxKeys bounds the number of keys with statistics (default 10000);
	// each costs about 150 bytes plus the key.
	MaxKeys int
	// OnSwitch, if set, is called (on the updating goroutine) each time the
	// path judged cheaper for a key changes: locked true when it is the
	// lease path (exploring epochs are not reported).
	OnSwitch func(key string, locked bool, score float64)
}

// Adaptive chooses, per key, between optimistic updates (occ.Update) and
// the lease path (Update).
//
// A cool key always goes the optimistic way: nothing beats one read and
// one conditional write when nobody else writes. Heat is judged from what
// this process sees: how many other updates of the key were running when
// an update started, plus how many attempts it needed beyond the first,
// averaged over recent updates; the gap between HotAbove and CoolBelow
// keeps a key from flapping.
//
// A hot key takes whichever path has recently run faster: the lease path
// serialises writers and wastes no attempts, but costs the lock's round
// trips and hand-offs; optimistic retries cost wasted attempts and waits.
// Which wins depends on the backend, the lock and the work inside the
// update, so Adaptive measures both. A hot key runs in epochs of Epoch
// updates, all on one path: the first on the optimistic path, the second
// on the lease path, then the faster one (updates of the key per second
// over its epochs), with one epoch in sixteen given to the other path to
// keep its figure current. Whole epochs, rather than single probes, because a
// path's cost depends on what the other writers do: a lone locked update
// among optimistic writers still meets their conflicts. A key keeps its
// path unless the other ran at least 10% faster.
//
// An Adaptive is safe for concurrent use; share one per process and
// locker.
type Adaptive struct {
	locker   Locker
	cfg      AdaptiveConfig
	shards   [32]adaptiveShard
	switches atomic.Int64
}

type adaptiveShard struct {
	mu   sync.Mutex
	keys map[string]*keyStat
}

// Paths of an update.
const (
	pathOptimistic = 0
	pathLocked     = 1
)

type keyStat struct {
	inflight int
	score    float64
	hot      bool
	locked   bool       // the path of the current epoch (when hot)
	best     bool       // the path judged cheaper (locked or not)
	rate     [2]float64 // updates per second of the key, per path; 0: unknown
	epochOps int        // updates begun in the current epoch
	epoch    int        // epochs since the key turned hot
	started  time.Time  // when the current epoch began
	reported bool       // the last state told to OnSwitch: hot and best
}

// NewAdaptive returns an Adaptive that locks hot keys with l when that is
// cheaper.
func NewAdaptive(l Locker, cfg AdaptiveConfig) *Adaptive {
	if cfg.HotAbove <= 0 {
		cfg.HotAbove = 1
	}
	if cfg.CoolBelow <= 0 || cfg.CoolBelow >= cfg.HotAbove {
		cfg.CoolBelow = cfg.HotAbove / 4
	}
	if cfg.Alpha <= 0 || cfg.Alpha > 1 {
		cfg.Alpha = 0.2
	}
	if cfg.Epoch <= 1 {
		cfg.Epoch = 32
	}
	if cfg.MaxKeys <= 0 {
		cfg.MaxKeys = 10000
	}
	a := &Adaptive{locker: l, cfg: cfg}
	for i := range a.shards {
		a.shards[i].keys = map[string]*keyStat{}
	}
	return a
}

func (a *Adaptive) shard(key string) *adaptiveShard {
	h := uint32(2166136261)
	for i := 0; i < len(key); i++ {
		h ^= uint32(key[i])
		h *= 16777619
	}
	return &a.shards[h%uint32(len(a.shards))]
}

// begin records an update's start and returns the path to take and how
// many other updates of the key were running.
func (a *Adaptive) begin(key string) (path int, others int) {
	sh := a.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	st := sh.keys[key]
	if st == nil {
		if len(sh.keys) >= a.cfg.MaxKeys/len(a.shards)+1 {
			for k, s := range sh.keys { // evict an idle key, any
				if s.inflight == 0 {
					delete(sh.keys, k)
					break
				}
			}
		}
		st = &keyStat{}
		sh.keys[key] = st
	}
	others = st.inflight
	st.inflight++
	if !st.hot {
		return pathOptimistic, others
	}
	if st.epochOps++; st.epochOps > a.cfg.Epoch {
		a.nextEpoch(st)
	}
	if st.locked {
		return pathLocked, others
	}
	return pathOptimistic, others
}

// exploreEvery is how often (in epochs) a hot key explores the path judged
// worse: rarely enough that a much slower path costs little, often enough
// to notice when the other path becomes the faster one.
const exploreEvery = 16

// nextEpoch starts a hot key's next epoch: the second explores the lease
// path, one in exploreEvery explores the path judged worse, the others
// take the path judged better.
func (a *Adaptive) nextEpoch(st *keyStat) {
	now := time.Now()
	path := pathOptimistic
	if st.locked {
		path = pathLocked
	}
	if d := now.Sub(st.started).Seconds(); d > 0 {
		r := float64(a.cfg.Epoch) / d
		if st.rate[path] == 0 {
			st.rate[path] = r
		} else {
			st.rate[path] = (r + st.rate[path]) / 2
		}
	}
	st.epoch++
	st.epochOps, st.started = 1, now
	// Judge, keeping the current best unless the other path ran at least
	// 10% faster.
	cur, other := pathOptimistic, pathLocked
	if st.best {
		cur, other = pathLocked, pathOptimistic
	}
	if st.rate[other] > 1.1*st.rate[cur] {
		st.best = !st.best
	}
	switch {
	case st.epoch == 1:
		st.locked = true // explore the lease path
	case st.epoch%exploreEvery == 0:
		st.locked = !st.best // explore the other path
	default:
		st.locked = st.best
	}
}

// end folds an update's contention into the key's score.
func (a *Adaptive) end(key string, others, extraAttempts int) {
	sh := a.shard(key)
	sh.mu.Lock()
	st := sh.keys[key]
	if st == nil { // evicted while running: forget this sample
		sh.mu.Unlock()
		return
	}
	st.inflight--
	alpha := a.cfg.Alpha
	st.score = alpha*float64(others+extraAttempts) + (1-alpha)*st.score
	switch {
	case !st.hot && st.score > a.cfg.HotAbove:
		st.hot, st.locked, st.best, st.epoch, st.epochOps = true, false, false, 0, 0
		st.rate, st.started = [2]float64{}, time.Now()
	case st.hot && st.score < a.cfg.CoolBelow:
		st.hot = false
	}
	now := st.hot && st.best
	switched := now != st.reported
	st.reported = now
	score := st.score
	if st.inflight == 0 && !st.hot && st.score < a.cfg.CoolBelow/4 {
		delete(sh.keys, key) // cold: nothing worth remembering
	}
	sh.mu.Unlock()
	if switched {
		a.switches.Add(1)
		if a.cfg.OnSwitch != nil {
			a.cfg.OnSwitch(key, now, score)
		}
	}
}

// AdaptiveStats describes an Adaptive's state.
type AdaptiveStats struct {
	// Keys is the number of keys with statistics, Locked how many of them
	// are hot and judged cheaper on the lease path.
	Keys, Locked int
	// Switches counts mode changes since the Adaptive was made.
	Switches int64
}

// Stats returns the Adaptive's counters.
func (a *Adaptive) Stats() AdaptiveStats {
	var st AdaptiveStats
	for i := range a.shards {
		sh := &a.shards[i]
		sh.mu.Lock()
		st.Keys += len(sh.keys)
		for _, k := range sh.keys {
			if k.hot && k.best {
				st.Locked++
			}
		}
		sh.mu.Unlock()
	}
	st.Switches = a.switches.Load()
	return st
}

// UpdateAdaptive is a read-modify-write of key that goes through
// occ.Update or through Update (lease plus fenced write), as a decides. Both paths give the same result
// and errors as the function they call. The typed store's Store must be a
// cas.FencedStore.
func UpdateAdaptive[T any](ctx context.Context, a *Adaptive, s *cas.Typed[T], key string, mutate func(cur T, exists bool) (T, error), opts ...occ.Option) (T, cas.Version, error) {
	if _, ok := s.Store().(cas.FencedStore); !ok {
		var zero T
		return zero, 0, fmt.Errorf("hybrid: %T: %w", s.Store(), ErrNotFenced)
	}
	path, others := a.begin(key)
	calls := 0
	defer func() { a.end(key, others, max(calls-1, 0)) }() // also if mutate panics
	counted := func(cur T, exists bool) (T, error) {
		calls++
		return mutate(cur, exists)
	}
	var (
		v   T
		ver cas.Version
		err error
	)
	if path == pathLocked {
		v, ver, err = Update(ctx, a.locker, s, key, counted, opts...)
	} else {
		v, ver, err = occ.Update(ctx, s, key, counted, opts...)
	}
	return v, ver, err
}
