package lab

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/occ"
)

// worker is one goroutine's state and counters; the occ observer of its
// calls (observers run on the caller's goroutine, so no locking).
type worker struct {
	hist latencyHistogram
	workerCounts
	pendAttempts, pendFence int64
	firstErr                error
}

// workerCounts are a worker's counts, sent as they are by a --procs child.
type workerCounts struct {
	Tally               opTally
	Committed, Failed   int64
	CommittedInWindow   int64
	Stalled             int64
	Ambiguous, Declined int64
	Attempts, Fenced    int64
}

func (w *worker) ObserveAttempt(_ context.Context, a occ.Attempt) {
	if a.Err != nil && errors.Is(a.Err, cas.ErrFenced) {
		w.pendFence++
	}
}

func (w *worker) ObserveCall(_ context.Context, c occ.Call) {
	w.pendAttempts += int64(c.Attempts)
}

// runWorkers runs the cell's workers (global indices w0, w0+1, ...) from
// start until the window ends (or the operations are done), each on its
// own goroutine, and returns how long they ran.
//
// The window: warm-up, then the measured time. No operation starts after
// it; those still running at its end finish (none is cut off half-done),
// and a safety deadline cancels operations that hang. An operation is
// measured if it started in the window, however long it took: one that
// waits past the end (a starved retry loop, a lock queue) counts with its
// whole latency instead of vanishing from the figures.
func runWorkers(ctx context.Context, c Cell, wl *workloadSpec, zipf *zipfDist, ks keySpace, strat cellStrategy, workers []*worker, w0 int, start time.Time) time.Duration {
	if d := time.Until(start); d > 0 {
		time.Sleep(d)
	}
	measureFrom, end := start, time.Time{}
	runCtx := ctx
	if c.Duration > 0 {
		measureFrom = start.Add(c.Warmup)
		end = measureFrom.Add(c.Duration)
		var cancel context.CancelFunc
		runCtx, cancel = context.WithDeadline(ctx, end.Add(30*time.Second+10*c.Work))
		defer cancel()
	}
	inWindow := func(t time.Time) bool { return c.Duration <= 0 || (!t.Before(measureFrom) && t.Before(end)) }
	var issued atomic.Int64
	var wg sync.WaitGroup
	for i, wk := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(c.Seed, uint64(w0+i)+1))
			keys := make([]string, wl.KeysPerOp)
			for runCtx.Err() == nil {
				if c.Duration > 0 {
					if !time.Now().Before(end) {
						return
					}
				} else if issued.Add(1) > c.Ops {
					return
				}
				op := operation{Keys: ks.pick(rng, zipf, keys), w: wl, work: c.Work}
				if wl.Arg != nil {
					op.arg = wl.Arg(rng)
				}
				wk.pendAttempts, wk.pendFence = 0, 0
				t0 := time.Now()
				err := strat.Do(runCtx, i, op)
				t1 := time.Now()
				wk.count(err, t1.Sub(t0), inWindow(t0), inWindow(t1))
				if c.Duration > 0 && t0.Before(measureFrom) && !t1.Before(end) {
					wk.Stalled++
				}
			}
		}()
	}
	wg.Wait()
	return time.Since(start)
}

// count files one operation's outcome: always in the tally for the
// invariant, and in the measurements if it started in the window
// (measured); a commit that also ended in the window shows the worker
// was not starved.
func (w *worker) count(err error, lat time.Duration, measured, endedInWindow bool) {
	attempts := max(w.pendAttempts, 1)
	switch {
	case err == nil:
		w.Tally.Committed++
		if measured {
			w.Committed++
			w.hist.Record(lat)
		}
		if endedInWindow {
			w.CommittedInWindow++
		}
	case errors.Is(err, errDeclined):
		w.Tally.Declined++
		if measured {
			w.Declined++
		}
	default:
		amb := errors.Is(err, cas.ErrAmbiguous)
		if errors.Is(err, errNegative) {
			w.Tally.Negative++
		}
		if amb {
			w.Tally.Ambiguous++
		} else {
			w.Tally.Failed++
		}
		if measured {
			w.Failed++
			if amb {
				w.Ambiguous++
			}
			if w.firstErr == nil {
				w.firstErr = err
			}
		}
	}
	if measured {
		w.Attempts += attempts
		w.Fenced += w.pendFence
	}
}

// pickKeys fills buf with distinct keys for one operation: the first from
// the Zipf law, each next one drawn again until it differs (after 32 equal
// draws, the next key in rank order).
func pickKeys(r *rand.Rand, z *zipfDist, keys, buf []string) []string {
	var ranks [4]int
	for i := range buf {
		k := z.Next(r)
		for tries := 0; slices.Contains(ranks[:i], k); tries++ {
			if tries >= 32 {
				k = (k + 1) % len(keys)
			} else {
				k = z.Next(r)
			}
		}
		ranks[i] = k
		buf[i] = keys[k]
	}
	return buf
}
