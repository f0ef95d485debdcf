package hybrid

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/occ"
)

// AdaptiveConfig configures an Adaptive. The zero value is usable.
type AdaptiveConfig struct {
	// HotAbove is the contention score above which a key goes through the
	// lease path (default 1: on average at least one other update of the
	// key was running, or had to be retried, per update).
	HotAbove float64
	// CoolBelow is the score under which a hot key returns to optimistic
	// updates (default 0.25). The gap between the two is the hysteresis
	// that keeps a key from flapping.
	CoolBelow float64
	// Alpha is the weight of the newest update in the score, an
	// exponentially weighted moving average (default 0.2).
	Alpha float64
	// MaxKeys bounds the number of keys with statistics (default 10000);
	// each costs about 100 bytes plus the key.
	MaxKeys int
	// OnSwitch, if set, is called (on the updating goroutine) each time a
	// key switches: locked true when it goes to the lease path.
	OnSwitch func(key string, locked bool, score float64)
}

// Adaptive sends each key through optimistic updates (occ.Update) while
// it is cool and through the lease path (Update) while it is hot, judging
// heat per key from what this process sees: how many other updates of the
// key were running when an update started, plus how many attempts it
// needed beyond the first, averaged over recent updates.
//
// The signal is the same in both modes (concurrent demand is visible
// whether or not the key is locked, as the queue behind the lock), so a
// locked key cools down only when demand really drops. An Adaptive is safe
// for concurrent use; share one per process and locker.
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

type keyStat struct {
	inflight int
	score    float64
	locked   bool
}

// NewAdaptive returns an Adaptive that locks hot keys with l.
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

// begin records an update's start and returns whether to lock and how
// many other updates of the key were running.
func (a *Adaptive) begin(key string) (locked bool, others int) {
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
	return st.locked, others
}

// end folds an update's contention into the key's score and switches the
// key's mode when the score crosses a threshold.
func (a *Adaptive) end(key string, others, extraAttempts int) {
	sh := a.shard(key)
	sh.mu.Lock()
	st := sh.keys[key]
	if st == nil { // evicted while running: forget this sample
		sh.mu.Unlock()
		return
	}
	st.inflight--
	st.score = a.cfg.Alpha*float64(others+extraAttempts) + (1-a.cfg.Alpha)*st.score
	switched := false
	switch {
	case !st.locked && st.score > a.cfg.HotAbove:
		st.locked, switched = true, true
	case st.locked && st.score < a.cfg.CoolBelow:
		st.locked, switched = false, true
	}
	locked, score := st.locked, st.score
	if st.inflight == 0 && !st.locked && st.score < a.cfg.CoolBelow/4 {
		delete(sh.keys, key) // cold: nothing worth remembering
	}
	sh.mu.Unlock()
	if switched {
		a.switches.Add(1)
		if a.cfg.OnSwitch != nil {
			a.cfg.OnSwitch(key, locked, score)
		}
	}
}

// AdaptiveStats describes an Adaptive's state.
type AdaptiveStats struct {
	// Keys is the number of keys with statistics, Locked how many of them
	// currently go through the lease path.
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
			if k.locked {
				st.Locked++
			}
		}
		sh.mu.Unlock()
	}
	st.Switches = a.switches.Load()
	return st
}

// UpdateAdaptive is a read-modify-write of key that goes through
// occ.Update while the key is cool and through Update (lease plus fenced
// write) while it is hot, as a decides. Both paths give the same result
// and errors as the function they call. The typed store's Store must be a
// cas.FencedStore.
func UpdateAdaptive[T any](ctx context.Context, a *Adaptive, s *cas.Typed[T], key string, mutate func(cur T, exists bool) (T, error), opts ...occ.Option) (T, cas.Version, error) {
	if _, ok := s.Store().(cas.FencedStore); !ok {
		var zero T
		return zero, 0, fmt.Errorf("hybrid: %T: %w", s.Store(), ErrNotFenced)
	}
	locked, others := a.begin(key)
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
	if locked {
		v, ver, err = Update(ctx, a.locker, s, key, counted, opts...)
	} else {
		v, ver, err = occ.Update(ctx, s, key, counted, opts...)
	}
	return v, ver, err
}
