package occ

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v4"
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
)

type config struct {
	maxAttempts int
	backOff     backoff.BackOff
	newBackOff  func() backoff.BackOff
	retryable   func(error) bool
	observer    Observer
	budget      *Budget
	sleep       func(ctx context.Context, d time.Duration) error // test hook
	cache       *Cache
	combiner    *Combiner
	writes      *atomic.Int64 // counts Update's conditional writes (a combiner's solo path)
	op          string
	key         string

	// Loop state shared by run and the Update/Txn attempt functions.
	retryNow   bool // set by an attempt whose conflict carried the current state
	retriedNow bool // the one immediate retry of the call was used
	waited     bool // the loop waited before the current attempt
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
			default:
				c.observer = observers{c.observer, o.observer}
			}
		case optBudget:
			c.budget = o.budget
		case optSleep:
			c.sleep = o.sleep
		case optCache:
			c.cache = o.cache
		case optCombiner:
			c.combiner = o.combiner
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
// ErrBackOffStopped. The default is DefaultBackOff.
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

// WithBudget makes retries draw from a budget shared with other calls.
func WithBudget(b *Budget) Option { return Option{kind: optBudget, budget: b} }

// withSleep replaces the wait between attempts (tests only).
func withSleep(f func(ctx context.Context, d time.Duration) error) Option {
	return Option{kind: optSleep, sleep: f}
}

// DefaultBackOff returns the backoff used when none is given: exponential,
// starting at 1ms, doubling up to 20ms, each wait randomised by ±50% so
// that conflicting writers spread out, and never stopping by itself (the
// attempt limit and the context bound the loop). Conflicts clear in
// microseconds to milliseconds, unlike network outages, hence the short
// first wait.
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

func (c *config) backOffForCall() backoff.BackOff {
	switch {
	case c.backOff != nil:
		c.backOff.Reset()
		return c.backOff
	case c.newBackOff != nil:
		b := c.newBackOff()
		b.Reset()
		return b
	default:
		return DefaultBackOff()
	}
}
