package occ

import (
	"context"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/occkit/occkit/cas"
)

// DefaultMaxAttempts is the attempt limit when WithMaxAttempts is not given.
const DefaultMaxAttempts = 10

// Option configures one call of Retry, Update or Txn. Options are plain
// values and applying them allocates nothing. A slice of them may be built
// once and shared by goroutines, with one exception: a WithBackOff value
// is stateful and serves one call at a time (use WithBackOffFunc in shared
// options). Shared objects passed as options (a Budget, a Cache, a
// Combiner, an Observer) are safe for concurrent use by design.
type Option struct {
	kind       optionKind
	n          int
	backOff    backoff.BackOff
	newBackOff func() backoff.BackOff
	retryable  func(error) bool
	observer   Observer
	budget     *Budget
	sleep      func(ctx context.Context, d time.Duration) error
	cache      *Cache
	combiner   *Combiner
	off        bool
	op, key    string
}

type optionKind uint8

const (
	optNone optionKind = iota
	optMaxAttempts
	optBackOff
	optBackOffFunc
	optRetryable
	optObserver
	optBudget
	optSleep
	optCache
	optCombiner
	optTurns
	optExclusiveAfter
	optOp
)

type config struct {
	maxAttempts int
	backOff     backoff.BackOff
	newBackOff  func() backoff.BackOff
	retryable   func(error) bool
	observer    Observer
	observer2   Observer // told after observer; set only if observer is
	budget      *Budget
	sleep       func(ctx context.Context, d time.Duration) error // test hook
	cache       *Cache
	combiner    *Combiner
	noTurns     bool
	// exclusiveAfter is WithExclusiveAfter's n when exclusiveSet.
	exclusiveAfter int
	exclusiveSet   bool
	writes         *atomic.Int64 // counts Update's conditional writes (a combiner's solo path)
	alone          bool          // a combined call running alone at a hot key: waits capped (combinedMaxUnits)
	// A combiner's call on a cold key: escalate makes run stop at the
	// first conflict with errEscalate (the key heats and the call goes
	// on through the combiner); resumeAt and resumeStart carry the
	// attempts made and the call's start into the loop that goes on.
	escalate    bool
	resumeAt    int
	resumeStart time.Time
	unit        time.Duration // the call's attempt time, the default backoff's unit (0: not timed yet)
	op          string
	key         string
	opName      string // WithOp's op and key, for Retry
	opKey       string
	// obsCtx is the context the call's observers get: the one their
	// StartCall returned (set when a call with an observer starts; a call
	// that goes on in a combiner's batch keeps it).
	obsCtx context.Context

	// Lines (turn.go): store is set by Update for the calls that take
	// part (those with the default backoff).
	store    cas.Store // the store of the call's key
	line     *line     // the line whose turn the call holds, if any
	handed   *ticket   // the ticket that gave the call its turn, with the state it carried
	lastErr  error     // the latest attempt's error, for a wait for a line that ends in a give-up
	leftLine bool      // the call left a line that did not move: its next attempt does not queue

	// Loop state shared by run and the Update/Txn attempt functions.
	retryNow    bool // set by an attempt whose conflict carried the current state
	retriedNow  bool // the one immediate retry of the call was used
	heldLost    int  // conflicts the call met holding its key's turn (the one that opened its line included)
	staleRecent bool // the attempt started from a remembered state (recent.go) that was stale
	waited      bool // the loop waited before the current attempt
	exclusive   bool // the current attempt runs exclusively (Attempt.Exclusive)
}

// start sets c for a call of op on key with opts. A call without options
// (an uncontended Update's hot path) skips apply.
func (c *config) start(op, key string, opts []Option) {
	if len(opts) > 0 {
		c.apply(opts)
	} else {
		c.maxAttempts = DefaultMaxAttempts
	}
	c.op, c.key = op, key
}

// apply sets c from opts. Options are data, not closures, so that c can
// stay on the caller's stack: an uncontended Update allocates nothing here.
func (c *config) apply(opts []Option) {
	c.maxAttempts = DefaultMaxAttempts
	for _, o := range opts {
		switch o.kind {
		case optMaxAttempts:
			c.maxAttempts = max(o.n, 1)
		case optBackOff:
			c.backOff, c.newBackOff = o.backOff, nil
		case optBackOffFunc:
			c.newBackOff, c.backOff = o.newBackOff, nil
		case optRetryable:
			if prev := c.retryable; prev != nil {
				f := o.retryable
				c.retryable = func(err error) bool { return prev(err) || f(err) }
			} else {
				c.retryable = o.retryable
			}
		case optObserver:
			switch {
			case o.observer == nil:
			case c.observer == nil:
				c.observer = o.observer
			case c.observer2 == nil:
				// A second observer (hybrid.Adaptive's, after the
				// caller's) goes in its own field: an observers value
				// would be one allocation per call.
				c.observer2 = o.observer
			default:
				c.observer2 = observers{c.observer2, o.observer}
			}
		case optBudget:
			c.budget = o.budget
		case optSleep:
			c.sleep = o.sleep
		case optCache:
			c.cache = o.cache
		case optCombiner:
			c.combiner = o.combiner
		case optTurns:
			c.noTurns = o.off
		case optExclusiveAfter:
			c.exclusiveAfter, c.exclusiveSet = o.n, true
		case optOp:
			c.opName, c.opKey = o.op, o.key
		}
	}
}

// WithMaxAttempts limits the calls of the function to n in all, the first
// one included. n < 1 is treated as 1 (no retry).
func WithMaxAttempts(n int) Option { return Option{kind: optMaxAttempts, n: n} }

// WithBackOff sets the wait between attempts. b is Reset before the first
// retry of each call and is then used by that call alone, so one BackOff
// value must not serve two calls at once; give concurrent calls
// WithBackOffFunc instead. backoff.Stop from b ends the loop with
// ErrBackOffStopped. The default counts its waits in the call's own
// attempt times; see Retry.
func WithBackOff(b backoff.BackOff) Option { return Option{kind: optBackOff, backOff: b} }

// WithBackOffFunc makes each call that needs to retry build its own BackOff
// with f. Use it for options shared by concurrent calls.
func WithBackOffFunc(f func() backoff.BackOff) Option {
	return Option{kind: optBackOffFunc, newBackOff: f}
}

// WithRetryable classifies more errors as retryable, in addition to
// conflicts (errors matching cas.ErrConflict), which are always retried.
// Use it for an adapter's transient errors. Several WithRetryable options
// combine: an error is retried if any of them says so.
func WithRetryable(f func(err error) bool) Option { return Option{kind: optRetryable, retryable: f} }

// WithObserver reports every attempt and every call to o. Several
// WithObserver options add up: each observer is told, in the order given.
func WithObserver(o Observer) Option { return Option{kind: optObserver, observer: o} }

// WithOp makes a Retry call report op and key to its observers (the Op
// and Key of its Attempts, its Call, its CallStart and its Waits) instead
// of "retry" and no key: for operations built on Retry, such as
// hybrid.Update ("hybrid.update", with its key) and hybrid.Txn
// ("hybrid.txn"). Keep the number of ops small: metric observers make op
// an attribute. An empty op leaves "retry". Update, Txn and Add report
// their own op and key and ignore WithOp; the last WithOp given wins.
func WithOp(op, key string) Option { return Option{kind: optOp, op: op, key: key} }

// WithTurns(false) keeps an Update or Txn call out of its process's turns
// at a hot key (see Update and Txn): it neither queues in the key's line
// nor opens one,
// and backs off between attempts instead. Calls that opt out compete with
// the line's holder for each version, so at a hot key they waste attempts
// and see a longer tail; use it for a call that must not wait behind the
// process's other calls of the key (for example one with a short
// deadline). Calls with WithBackOff or WithBackOffFunc take no turns
// either. WithTurns(true) is the default.
func WithTurns(enabled bool) Option { return Option{kind: optTurns, off: !enabled} }

// DefaultExclusiveAfter is how many conditional writes in a row a call
// may lose before its next attempt runs exclusively (WithExclusiveAfter):
// late enough that a key shared by a few processes rarely escalates (an
// exclusive attempt costs a round trip more and makes the key's other
// writers wait), early enough to cut the tail of the calls that keep
// losing. A store whose exclusive attempt costs what an optimistic one
// does may name a smaller count (cas.ExclusiveAfterHint: pgcas says 5).
// docs/benchmarks.md measures it against no escalation.
const DefaultExclusiveAfter = 8

// DefaultTxnExclusiveAfter is DefaultExclusiveAfter for Txn: how many
// commits in a row a transaction may lose before its next attempt holds
// its keys (cas.ExclusiveCommitter). Earlier than a single key's: a
// transaction's turns already serialize this process's transactions on
// its keys, so three lost commits in a row are writers elsewhere, and
// each lost commit costs a transaction's reads and commit; on two hot keys
// across processes it cut the transfers' tail (docs/performance.md,
// "Measurements behind occ's defaults").
const DefaultTxnExclusiveAfter = 3

// WithExclusiveAfter sets how many conditional writes in a row an Update
// call (or a combined batch) may lose before its next attempt runs
// exclusively, on a store that implements cas.Exclusive: the store holds
// the key from the read to the write (a row lock), so that attempt cannot
// lose, and other writers of the key wait for it in the store's own
// queue. It is what keeps a hot key written from several processes from
// making a call fail where a queueing lock would have served it; a call
// that does not lose never takes it. The escalation comes no later than
// the last attempt WithMaxAttempts allows (so it needs at least 2); n <= 0
// turns it off. The default is the store's own count when it names one
// (cas.ExclusiveAfterHint), else DefaultExclusiveAfter. Stores without
// cas.Exclusive ignore it. A Txn call escalates the same way after as
// many lost commits (by default DefaultTxnExclusiveAfter), on a store
// that implements cas.ExclusiveCommitter: the store holds the keys of its
// last attempt, in key order; n <= 0 also turns off the hot commits of
// cas.HotCommitHint.
func WithExclusiveAfter(n int) Option { return Option{kind: optExclusiveAfter, n: n} }

// exclusiveAt returns after how many lost writes in a row a call on ex
// escalates to an exclusive attempt (0: never): WithExclusiveAfter's count,
// else the store's own (cas.ExclusiveAfterHint), else
// DefaultExclusiveAfter.
func (c *config) exclusiveAt(ex cas.Exclusive) int {
	def := DefaultExclusiveAfter
	if h, ok := ex.(cas.ExclusiveAfterHint); ok && h.ExclusiveAfter() > 0 {
		def = h.ExclusiveAfter()
	}
	return c.exclusiveAtOr(def)
}

// exclusiveAtOr is exclusiveAt with def as the default count.
func (c *config) exclusiveAtOr(def int) int {
	n := def
	if c.exclusiveSet {
		n = c.exclusiveAfter
	}
	if n <= 0 || c.maxAttempts < 2 {
		return 0
	}
	return min(n, c.maxAttempts-1)
}

// WithBudget makes retries draw from a budget shared with other calls.
func WithBudget(b *Budget) Option { return Option{kind: optBudget, budget: b} }

// withSleep replaces the wait between attempts (tests only).
func withSleep(f func(ctx context.Context, d time.Duration) error) Option {
	return Option{kind: optSleep, sleep: f}
}

// DefaultBackOff returns a fixed exponential backoff: starting at 1ms,
// doubling up to 20ms, each wait randomised by ±50%, never stopping by
// itself (the attempt limit and the context bound the loop). It is what
// the loop uses when it has not yet timed an attempt of the call; once it
// has, the default waits are counted in attempt times instead (see
// Retry).
func DefaultBackOff() backoff.BackOff {
	b := &backoff.ExponentialBackOff{
		InitialInterval:     time.Millisecond,
		RandomizationFactor: 0.5,
		Multiplier:          2,
		MaxInterval:         20 * time.Millisecond,
		MaxElapsedTime:      0,
		Stop:                backoff.Stop,
		Clock:               backoff.SystemClock,
	}
	b.Reset()
	return b
}

// Bounds of the default backoff, which counts its waits in attempt times:
// the n-th wait of a call is min(2^(n-1), scaledMaxUnits) times the
// duration of the call's latest attempts (seniorUnits once the call is
// senior), randomised by ±50%, and kept within [scaledMinWait,
// scaledMaxWait].
const (
	scaledMaxUnits = 16
	scaledMinWait  = 5 * time.Microsecond
	scaledMaxWait  = 100 * time.Millisecond
)

// noteAttemptTime records how long a retry took, the unit of the default
// backoff's waits.
func (c *config) noteAttemptTime(d time.Duration) {
	if c.unit == 0 {
		c.unit = d
		return
	}
	c.unit = (c.unit + d) / 2
}

// scaledBackOff is the default backoff: exponential in units of the
// call's own attempt time, so that a conflict waits about as long as a
// few competitors' attempts take on this store (microseconds in memory,
// a millisecond or so on a database, tens of milliseconds on a far
// service) instead of a fixed schedule that is too long for one and too
// short for another. Before any attempt is timed it waits as
// DefaultBackOff does. It is a value in the retry loop, not a
// backoff.BackOff: as an interface it would move the call's config to the
// heap (one allocation per call, retried or not).
type scaledBackOff struct {
	n     int
	fixed backoff.BackOff
}

// seniorAfter is how many waits make a call senior: from then on each of
// its waits is seniorUnits attempt times (±50%) instead of 16. Young calls
// back off, which is what keeps the work wasted on a hot key low; calls
// that have lost that often stop yielding as much to them, which is what
// bounds the tail: a caller no longer waits 16 attempt times, round after
// round, while callers that arrived after it win. Shorter senior waits cut
// the tail further but cost attempts when many callers share a key (with
// 64 on one key most calls become senior): retrying senior calls at once
// from each conflict's state cut throughput there by more than half, and
// waits of one attempt time raised attempts per update from 3.3 to 6.7;
// four attempt times, 4.7.
const seniorAfter = 4

// seniorUnits is a senior call's wait, in attempt times.
const seniorUnits = 4

// combinedMaxUnits bounds the waits of a combined call running alone at a
// hot key (nobody else in its process updates the key), in attempt times:
// 1, 2, 2, 2... Such a caller meets the key's other writers only through
// the store's versions, as the holder of a turn does; waits that grew to
// 4 and 8 attempt times left a caller that had lost a few times behind
// callers that arrived after it, and set the tail. A batch's leader keeps
// the default waits: capping them too cost throughput where several
// callers of a process share a key, for no better tail
// (docs/performance.md, "Measurements behind occ's defaults").
const combinedMaxUnits = 2

// next returns the wait after the call's next conflict; unit is the
// call's attempt time (0: not timed yet).
func (b *scaledBackOff) next(unit time.Duration) time.Duration {
	return b.nextCapped(unit, scaledMaxUnits)
}

// nextCapped is next with waits of at most maxUnits attempt times.
func (b *scaledBackOff) nextCapped(unit time.Duration, maxUnits int) time.Duration {
	b.n++
	if unit <= 0 {
		if b.fixed == nil {
			b.fixed = DefaultBackOff()
		}
		return b.fixed.NextBackOff()
	}
	base := time.Duration(min(1<<min(b.n-1, 30), scaledMaxUnits)) * unit
	if b.n > seniorAfter {
		base = seniorUnits * unit
	}
	base = min(base, time.Duration(maxUnits)*unit)
	// ±50%: a uniform draw in [base/2, 3·base/2].
	d := base/2 + time.Duration(rand.Int64N(int64(base)+1))
	return min(max(d, scaledMinWait), scaledMaxWait)
}

// nextWait returns the wait before the next attempt: from the caller's
// BackOff (made, and Reset, on the call's first wait) if it gave one, else
// from the default schedule.
func (c *config) nextWait(b *backoff.BackOff, scaled *scaledBackOff) time.Duration {
	switch {
	case c.backOff == nil && c.newBackOff == nil:
		if c.alone {
			return scaled.nextCapped(c.unit, combinedMaxUnits)
		}
		return scaled.next(c.unit)
	case *b == nil && c.backOff != nil:
		*b = c.backOff
	case *b == nil:
		*b = c.newBackOff()
	default:
		return (*b).NextBackOff()
	}
	(*b).Reset()
	return (*b).NextBackOff()
}
