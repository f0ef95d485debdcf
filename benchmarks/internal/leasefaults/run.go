package leasefaults

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/occkit/occkit/benchmarks/internal/backends"

	"github.com/occkit/occkit/benchmarks/internal/linearcheck"
	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/hybrid"
	"github.com/occkit/occkit/internal/ctxwait"
	"github.com/occkit/occkit/occ"
)

// clockSkew is how far a clock-jump holder's clock is behind: more than
// any wait of a run, so that its lease never looks expired to it.
const clockSkew = time.Minute

// role is what a worker does.
type role int

const (
	plain   role = iota // hybrid.Update increments
	library             // hybrid.Update, disturbed when it may be
	rogue               // its own lease and a stale write, when it may be
)

// run is one (backend, fault) run.
type run struct {
	cfg   Config
	b     Target
	fault string
	store *watchStore
	typed *cas.Typed[int64]
	keys  []string
	opts  []occ.Option
	// maxPause bounds a disturbed holder's wait for a newer holder's write.
	maxPause time.Duration
	// skew is how far a clock-jump holder's clock is behind (clockSkew).
	skew time.Duration
	// margin is the clock-jump holders' safety margin.
	margin time.Duration
	// over is closed when the run stops starting increments: a disturbed
	// holder then stops waiting to be superseded (no one may come).
	over <-chan struct{}
	// busy marks the keys with a disturbed holder: one at a time per key,
	// so that a disturbed holder is superseded by an ordinary one (two in
	// a row would hold the key for two TTLs), and on half of the keys at
	// most, so that the others keep moving.
	busy        []atomic.Bool
	disturbing  atomic.Int64
	maxDisturbs int64

	succeeded, ambiguous, failed, disturbed atomic.Int64

	errMu   sync.Mutex
	errSeen map[string]int
}

func runOne(ctx context.Context, cfg Config, b Target, fault string) (Result, error) {
	if err := b.check(fault); err != nil {
		return Result{}, err
	}
	r := &run{
		cfg: cfg, b: b, fault: fault,
		store:    newWatchStore(b.Store),
		maxPause: 2*b.TTL + 2*time.Second,
		margin:   max(b.TTL/3, hybrid.DefaultSafetyMargin),
		errSeen:  map[string]int{},
	}
	r.skew = clockSkew
	r.typed = cas.NewTyped[int64](r.store, cas.JSON[int64]())
	id := backends.RandomHex(4)
	for i := range cfg.Keys {
		r.keys = append(r.keys, "leasefaults-"+fault+"-"+id+"-"+strconv.Itoa(i))
	}
	r.busy = make([]atomic.Bool, cfg.Keys)
	r.maxDisturbs = int64(max(1, cfg.Keys/2))
	r.opts = []occ.Option{occ.WithMaxAttempts(20)}
	if b.Retryable != nil {
		r.opts = append(r.opts, occ.WithRetryable(b.Retryable))
	}
	callTimeout := 2*r.maxPause + 10*time.Second

	// One locker per worker, made before any starts.
	var lockers []hybrid.Locker
	defer func() {
		for _, l := range lockers {
			if c, ok := l.(interface{ Close() error }); ok {
				_ = c.Close()
			}
		}
	}()
	for range cfg.Workers {
		l, err := b.NewLocker(ctx)
		if err != nil {
			return Result{}, fmt.Errorf("leasefaults: new locker: %w", err)
		}
		lockers = append(lockers, l)
	}

	rctx, cancel := context.WithTimeout(ctx, cfg.Duration)
	defer cancel()
	r.over = rctx.Done()
	var wg sync.WaitGroup
	disturbers := cfg.Workers / 3 * 2
	for w, l := range lockers {
		ro := plain
		switch {
		case w >= disturbers:
		case w%4 == 0:
			ro = library
		default:
			ro = rogue
		}
		h := &holder{inner: l}
		var locker hybrid.Locker = h
		if fault == ClockJump && ro != plain {
			h.skew = r.skew
			locker = hybrid.WithSafetyMargin(h, r.margin)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; rctx.Err() == nil; i++ {
				k := (w + i) % len(r.keys)
				key := r.keys[k]
				disturb := ro != plain && r.claim(k)
				// The end of the run stops new increments, not those in
				// flight: each has its own timeout.
				cctx, ccancel := context.WithTimeout(withClient(ctx, w), callTimeout)
				var err error
				if disturb && ro == rogue {
					err = r.rogueIncrement(cctx, h, locker, key)
				} else {
					err = r.increment(cctx, h, locker, key, disturb)
				}
				ccancel()
				if disturb {
					r.unclaim(k)
				}
				if r.count(err) {
					// A client does not hammer a failing server.
					_ = ctxwait.Sleep(rctx, failurePause)
				}
			}
		}()
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return Result{}, err
	}

	vctx, vcancel := context.WithTimeout(ctx, 30*time.Second)
	defer vcancel()
	direct := b.Direct
	if direct == nil {
		direct = b.Store
	}
	dt := cas.NewTyped(direct, cas.JSON[int64]())
	var final int64
	for _, k := range r.keys {
		call := r.store.now()
		it, err := direct.Get(vctx, k)
		ret := r.store.now()
		state := ""
		switch {
		case err == nil:
			var n int64
			if derr := dt.Decode(k, it.Value, &n); derr != nil {
				return Result{}, fmt.Errorf("leasefaults: reading %s directly: %w", k, derr)
			}
			final += n
			state = string(it.Value)
		case !errors.Is(err, cas.ErrNotFound):
			return Result{}, fmt.Errorf("leasefaults: reading %s directly: %w", k, err)
		}
		r.store.addRead(cfg.Workers, k, call, ret, 0, state) // client: none of the workers
	}
	st := r.store.counts()
	res := Result{
		Backend: b.Name, Fault: fault, Expiry: r.expiry(),
		Succeeded: r.succeeded.Load(), Ambiguous: r.ambiguous.Load(), Failed: r.failed.Load(),
		Final: final, Disturbed: r.disturbed.Load(),
		StaleWritesAccepted: st.accepted, StaleWritesRejected: st.rejected, StaleWritesOther: st.other,
		Errors: r.topErrors(5),
	}
	res.Ops = res.Succeeded + res.Ambiguous + res.Failed
	res.Lost = max(0, res.Succeeded-final)
	res.Duplicated = max(0, final-res.Succeeded-res.Ambiguous)
	r.checkHistory(&res)
	return res, nil
}

// checkHistory checks the run's history with porcupine and puts the
// verdict in res. A history with writes left out (see watchStore.unknown)
// is not checked: it is incomplete.
func (r *run) checkHistory(res *Result) {
	ops, unknown := r.store.history()
	if unknown > 0 {
		res.LinearizabilityNote = fmt.Sprintf("history incomplete: %d writes expected a version no recorded call returned", unknown)
		return
	}
	lin := linearcheck.Check(ops, linearcheck.Options{Timeout: r.cfg.CheckTimeout, MaxPerKey: r.cfg.HistoryPerKey})
	res.Linearizable, res.LinearizabilityNote = lin.OK, lin.Note
	res.CheckedCalls, res.CheckedKeys, res.CheckSeconds = lin.Checked, lin.Keys, lin.Elapsed.Seconds()
	res.lin = lin
}

// increment is one hybrid.Update increment; a disturbed one has its grant
// ended inside mutate, and waits there until it is superseded.
func (r *run) increment(ctx context.Context, h *holder, locker hybrid.Locker, key string, disturb bool) error {
	_, _, err := hybrid.Update(ctx, locker, r.typed, key, func(n int64, _ bool) (int64, error) {
		if disturb {
			disturb = false // the first attempt only
			l := h.cur
			if err := r.disturb(ctx, key, l); err != nil {
				return 0, err
			}
			r.waitSuperseded(ctx, key, l, false)
		}
		return n + 1, nil
	}, r.opts...)
	return err
}

// rogueIncrement is a holder that does not use hybrid.Update: it takes a
// lease, reads, has its grant ended and waits until it is superseded, then
// ignores its lease (a clock-jump holder checks it, and the check passes),
// reads the current version and sends its stale increment with its old
// token. If that is refused, it increments again through hybrid.Update.
func (r *run) rogueIncrement(ctx context.Context, h *holder, locker hybrid.Locker, key string) error {
	g, err := locker.Acquire(ctx, key)
	if err != nil {
		return err
	}
	l := h.cur
	release := func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = g.Release(rctx) // a lost lease may fail to release: it is gone
	}
	n, ver, err := r.typed.Get(ctx, key)
	if err != nil && !errors.Is(err, cas.ErrNotFound) {
		release()
		return err
	}
	next, err := r.typed.Encode(key, n+1)
	if err != nil {
		release()
		return err
	}
	if err := r.disturb(ctx, key, l); err != nil {
		release()
		return err
	}
	if !r.waitSuperseded(ctx, key, l, true) {
		// No one took over: an ordinary late write, with the version read.
		_, err = r.store.CompareAndSwapFenced(ctx, key, ver, g.Token(), next)
	} else if r.fault == ClockJump && !looksValid(g, r.margin) {
		err = errors.New("leasefaults: the clock-jump holder saw its lease lost") // not sent
	} else {
		err = r.staleWrite(ctx, key, g.Token(), next)
	}
	release()
	if err == nil || errors.Is(err, cas.ErrAmbiguous) {
		return err
	}
	// Refused (or never sent): the holder learns its lease is lost and
	// increments again, the right way.
	return r.increment(ctx, h, locker, key, false)
}

// staleWrite is a superseded rogue holder's write of next with its old
// token: it reads the key's current version first (a blind read, so that
// the version check cannot save the write) and reads again after a
// conflict, a few times, as a writer that means to get its value in
// would. In the mutant the write is a plain CompareAndSwap.
func (r *run) staleWrite(ctx context.Context, key string, token uint64, next []byte) error {
	var err error
	for range 5 {
		var cur cas.Item
		if cur, err = r.store.Get(ctx, key); err != nil && !errors.Is(err, cas.ErrNotFound) {
			return err
		}
		if r.cfg.unfenced {
			_, err = r.store.unfencedWrite(ctx, key, cur.Version, token, next)
		} else {
			_, err = r.store.CompareAndSwapFenced(ctx, key, cur.Version, token, next)
		}
		if !errors.Is(err, cas.ErrConflict) {
			return err
		}
	}
	return err
}

// claim reserves key k for a disturbed holder, if it may have one now.
func (r *run) claim(k int) bool {
	if !r.busy[k].CompareAndSwap(false, true) {
		return false
	}
	if r.disturbing.Add(1) > r.maxDisturbs {
		r.unclaim(k)
		return false
	}
	return true
}

func (r *run) unclaim(k int) {
	r.disturbing.Add(-1)
	r.busy[k].Store(false)
}

// disturb ends l, the grant of key, on the server, as the fault does.
func (r *run) disturb(ctx context.Context, key string, l *heldLease) error {
	r.disturbed.Add(1)
	if r.fault == PausedHolder {
		l.stopRenewals() // the process stops: its renewals stop with it
		if r.b.RunsOut {
			return nil // the grant runs out after its TTL
		}
	} else if r.b.Expire == nil {
		return nil // the holder is slow past the TTL, its clock says it may be
	}
	return r.b.Expire(ctx, key, l.inner)
}

// waitSuperseded waits until a holder with a larger token than l's has
// written key and, if noticed is set, l's own lease has noticed its loss
// (its process caught up with it), or maxPause has passed, or the run is
// over. It reports whether key was written with a larger token.
func (r *run) waitSuperseded(ctx context.Context, key string, l *heldLease, noticed bool) bool {
	deadline := time.Now().Add(r.maxPause)
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	for {
		superseded := r.store.written(key) > l.Token()
		if superseded && (!noticed || l.inner.Context().Err() != nil) {
			return true
		}
		if time.Now().After(deadline) {
			return superseded
		}
		select {
		case <-ctx.Done():
			return superseded
		case <-r.over:
			return superseded
		case <-t.C:
		}
	}
}

// expiry says how the disturbed grants ended, for Result.Expiry.
func (r *run) expiry() string {
	switch {
	case r.fault == PausedHolder && r.b.RunsOut:
		return fmt.Sprintf("renewals stopped: the grant ran out after its TTL (%v)", r.b.TTL)
	case r.fault == PausedHolder:
		return r.b.ExpireNote
	case r.b.Expire == nil:
		return fmt.Sprintf("the grant ran out after its TTL (%v); the holder's clock was %v behind", r.b.TTL, r.skew)
	default:
		return fmt.Sprintf("%s; the holder's clock was %v behind", r.b.ExpireNote, r.skew)
	}
}

// count counts an increment's outcome and reports whether it failed.
func (r *run) count(err error) (failed bool) {
	switch {
	case err == nil:
		r.succeeded.Add(1)
	case errors.Is(err, cas.ErrAmbiguous):
		r.ambiguous.Add(1)
	default:
		failed = true
		r.failed.Add(1)
		msg := err.Error()
		if len(msg) > 200 {
			msg = msg[:200] + "..."
		}
		r.errMu.Lock()
		r.errSeen[msg]++
		r.errMu.Unlock()
	}
	return failed
}

// failurePause is how long a worker waits after a failed increment.
const failurePause = 10 * time.Millisecond

func (r *run) topErrors(n int) []string {
	r.errMu.Lock()
	defer r.errMu.Unlock()
	return TopErrors(r.errSeen, n)
}

// TopErrors returns the n most frequent messages of counts, most frequent
// first (ties in message order), each as "count× message".
func TopErrors(counts map[string]int, n int) []string {
	msgs := slices.Collect(maps.Keys(counts))
	slices.SortFunc(msgs, func(a, b string) int { return cmp.Or(counts[b]-counts[a], strings.Compare(a, b)) })
	out := make([]string, 0, min(n, len(msgs)))
	for _, m := range msgs[:min(n, len(msgs))] {
		out = append(out, fmt.Sprintf("%d× %s", counts[m], m))
	}
	return out
}

func isFenced(err error) bool { return errors.Is(err, cas.ErrFenced) }
