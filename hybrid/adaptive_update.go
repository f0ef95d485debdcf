package hybrid

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/occ"
)

// adaptiveObserver feeds the optimistic attempts of updates into the
// model.
type adaptiveObserver struct{ a *Adaptive }

func (o adaptiveObserver) ObserveAttempt(_ context.Context, at occ.Attempt) {
	if at.Op != "update" || at.Key == "" {
		return
	}
	switch at.Outcome {
	case occ.OutcomeSuccess:
		o.a.observeAttempt(at.Key, false, at.Latency)
	case occ.OutcomeConflict:
		o.a.observeAttempt(at.Key, true, at.Latency)
	}
}

func (adaptiveObserver) ObserveCall(context.Context, occ.Call) {}

// timedLocker measures the Adaptive's lease acquisitions and releases,
// and notes when its last acquisition was granted.
type timedLocker struct {
	a       *Adaptive
	granted *time.Time
}

func (l timedLocker) Acquire(ctx context.Context, key string) (Lease, error) {
	t0 := time.Now()
	lease, err := l.a.locker.Acquire(ctx, key)
	if err == nil {
		*l.granted = time.Now()
		// The release costs about what an uncontended acquire does.
		l.a.observeLock(key, 2*l.granted.Sub(t0))
	}
	return lease, err
}

// leased is an update on the lease path (Update), timed: the time from
// the grant of the lease its successful attempt ran under to its return
// (read, mutate, fenced write, release) measures the lease path. Earlier
// attempts that were fenced off or conflicted, and the waits between
// them, are not the path's cost per update.
func leased[T any](ctx context.Context, a *Adaptive, s *cas.Typed[T], key string, mutate func(cur T, exists bool) (T, error), opts ...occ.Option) (T, cas.Version, error) {
	var granted time.Time
	v, ver, err := Update(ctx, timedLocker{a: a, granted: &granted}, s, key, mutate, opts...)
	if err == nil && !granted.IsZero() {
		a.leased.Add(1)
		a.observeLeased(key, max(time.Since(granted), time.Nanosecond))
	}
	return v, ver, err
}

// AdaptiveStats describes an Adaptive's state.
type AdaptiveStats struct {
	// Keys is the number of keys with statistics (those whose updates
	// conflicted lately), Locked how many of them take the lease path.
	Keys, Locked int
	// Switches counts path changes since the Adaptive was made.
	Switches int64
	// Leased counts the updates that succeeded on the lease path: those
	// of locked keys, and optimistic ones that ran out of attempts.
	Leased int64
	// Combiner is the optimistic path's combiner's counters.
	Combiner occ.CombinerStats
}

// Stats returns the Adaptive's counters.
func (a *Adaptive) Stats() AdaptiveStats {
	var st AdaptiveStats
	a.keys.Range(func(_, v any) bool {
		if v.(*keyStat).locked.Load() {
			st.Locked++
		}
		return true
	})
	st.Keys = int(a.nkeys.Load())
	st.Switches = a.switches.Load()
	st.Leased = a.leased.Load()
	st.Combiner = a.combiner.Stats()
	return st
}

// UpdateAdaptive is a read-modify-write of key that goes through
// occ.Update (combined with the other updates of the key in this process)
// or through Update (lease plus fenced write), as a decides; see
// Adaptive. Both paths give the same results and errors as the functions
// they call, but for the attempts a give-up counts (below). The typed
// store's Store must be a cas.FencedStore.
//
// An optimistic update that runs out of attempts on conflicts (writers
// elsewhere keep winning) is finished on the lease path, deliberately: it
// is how the lease path of a key that does not lock yet gets measured,
// and the lease serialises the update with those writers. The lease path
// gets opts, and so the attempt limit (occ.WithMaxAttempts, or
// occ.DefaultMaxAttempts), anew: such an update makes up to twice the
// limit in all, and a probe of a locked key (one optimistic attempt) up
// to one more than the limit. When the lease path gives up too, its
// *occ.GiveUpError counts the attempts of both paths.
func UpdateAdaptive[T any](ctx context.Context, a *Adaptive, s *cas.Typed[T], key string, mutate func(cur T, exists bool) (T, error), opts ...occ.Option) (T, cas.Version, error) {
	if _, ok := s.Store().(cas.FencedStore); !ok {
		var zero T
		return zero, 0, fmt.Errorf("hybrid: %T: %w", s.Store(), ErrNotFenced)
	}
	path, st := a.begin(key)
	if st != nil {
		defer st.inflight.Add(-1) // also if mutate panics
	}
	if path == pathLocked {
		return leased(ctx, a, s, key, mutate, opts...)
	}
	own := a.optimistic
	if path == pathProbe {
		// One optimistic attempt, not combined: its outcome is the
		// sample. A conflict costs this update one attempt, then it
		// takes the lease path like the others.
		own = a.probing
	}
	oopts := own
	if len(opts) > 0 {
		buf := a.optsPool.Get().(*[]occ.Option)
		oopts = append(append((*buf)[:0], opts...), own...)
		defer func() {
			clear(oopts)
			*buf = oopts[:0]
			a.optsPool.Put(buf)
		}()
	}
	v, ver, err := occ.Update(ctx, s, key, mutate, oopts...)
	var gave *occ.GiveUpError
	if err != nil && errors.Is(err, occ.ErrAttemptsExhausted) && errors.Is(err, cas.ErrConflict) && ctx.Err() == nil && errors.As(err, &gave) {
		// The optimistic path ran out of attempts against writers
		// elsewhere: the lease path serialises with them, and measures
		// itself for the key's statistics (made if an eviction took
		// them meanwhile).
		a.track(key)
		var w giveUpWatch
		v, ver, err = leased(ctx, a, s, key, mutate, append(opts[:len(opts):len(opts)], occ.WithObserver(&w))...)
		if last, ok := err.(*occ.GiveUpError); ok && w.err == err {
			// The lease path gave up: report the call's attempts, the
			// optimistic ones too, not the lease path's alone.
			err = &occ.GiveUpError{Reason: last.Reason, Attempts: gave.Attempts + last.Attempts, Last: last.Last}
		}
	}
	return v, ver, err
}

// giveUpWatch notes the error of a call that gave up, so that the lease
// path's own give-up is told from a *occ.GiveUpError that mutate returned
// (from an occ loop of its own), which is passed on untouched.
type giveUpWatch struct{ err error }

func (w *giveUpWatch) ObserveAttempt(context.Context, occ.Attempt) {}

func (w *giveUpWatch) ObserveCall(_ context.Context, c occ.Call) {
	if c.Outcome == occ.OutcomeGaveUp {
		w.err = c.Err
	}
}
