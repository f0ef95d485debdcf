package story

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"sync"
	"time"
)

// probeInterval is how often the runner looks at a held grant on the
// server, to mark when it ended without a release.
const probeInterval = 10 * time.Millisecond

// recorder is the runner's sink: it collects every lane's events, and
// watches every grant on the server until it is released or found gone
// (an Expire event, seen by the runner rather than told by a client).
type recorder struct {
	r *run

	mu       sync.Mutex
	events   []Event
	lanes    []string
	released map[string]bool // grants being released

	ctx    context.Context // the probes' lifetime
	cancel context.CancelFunc
	probes sync.WaitGroup
}

func newRecorder(ctx context.Context) *recorder {
	rec := &recorder{released: map[string]bool{}}
	rec.ctx, rec.cancel = context.WithCancel(ctx)
	return rec
}

// lane adds a client lane, in display order.
func (rec *recorder) lane(name string) {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if !slices.Contains(rec.lanes, name) {
		rec.lanes = append(rec.lanes, name)
	}
}

func (rec *recorder) event(e Event) {
	rec.mu.Lock()
	rec.events = append(rec.events, e)
	rec.mu.Unlock()
}

func (rec *recorder) granted(e Event, ref string) {
	rec.event(e)
	rec.probe(e.Client, ref)
}

func (rec *recorder) releasing(_ context.Context, ref string) error {
	rec.mu.Lock()
	rec.released[ref] = true
	rec.mu.Unlock()
	return nil
}

func (rec *recorder) held(ctx context.Context, ref string) (bool, error) {
	if rec.r.lock == nil {
		return false, errors.New("story: this mode has no lock to hold")
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	return rec.r.lock.held(ctx, ref)
}

func (rec *recorder) isReleasing(ref string) bool {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return rec.released[ref]
}

// probe watches the grant ref of client on the server until it is
// released, or records when it is found gone.
func (rec *recorder) probe(client, ref string) {
	if rec.r.lock == nil {
		return
	}
	rec.probes.Add(1)
	go func() {
		defer rec.probes.Done()
		t := time.NewTicker(probeInterval)
		defer t.Stop()
		for {
			select {
			case <-rec.ctx.Done():
				return
			case <-t.C:
			}
			if rec.isReleasing(ref) {
				return
			}
			sent := rec.r.at()
			ctx, cancel := context.WithTimeout(rec.ctx, time.Second)
			held, err := rec.r.lock.held(ctx, ref)
			cancel()
			if err != nil || held {
				continue
			}
			if rec.isReleasing(ref) {
				return
			}
			rec.event(Event{At: sent, Client: client, Kind: Expire,
				Detail: client + "'s lock ended without a release: " + rec.r.lock.expired() + " (seen by the runner)"})
			return
		}
	}()
}

// stop ends the probes and returns the events, in time order.
func (rec *recorder) stop() ([]Event, []string) {
	rec.cancel()
	rec.probes.Wait()
	rec.mu.Lock()
	defer rec.mu.Unlock()
	ev := slices.Clone(rec.events)
	slices.SortStableFunc(ev, func(a, b Event) int { return cmp.Compare(a.At, b.At) })
	clampExpiries(ev)
	return ev, slices.Clone(rec.lanes)
}

// clampExpiries moves an Expire seen by a probe back to the first Grant
// of another client after the expired grant, when that came first: the
// lock was granted again, so it had ended by then (the probe polls every
// probeInterval and may see it a little later than the next holder).
func clampExpiries(ev []Event) {
	for i, e := range ev {
		if e.Kind != Expire {
			continue
		}
		granted := -1
		for j := i - 1; j >= 0; j-- {
			if ev[j].Client == e.Client && ev[j].Kind == Grant {
				granted = j
				break
			}
		}
		if granted < 0 {
			continue
		}
		for j := granted + 1; j < i; j++ {
			if ev[j].Kind == Grant && ev[j].Client != e.Client {
				ev[i].At = max(ev[j].At-time.Microsecond, ev[granted].At)
				break
			}
		}
	}
	slices.SortStableFunc(ev, func(a, b Event) int { return cmp.Compare(a.At, b.At) })
}
