package occ

import (
	"context"
	"time"

	"github.com/cenkalti/backoff/v4"
)

// DefaultMaxAttempts is the attempt limit when WithMaxAttempts is not given.
const DefaultMaxAttempts = 10

// Option configures one call of Retry, Update or Txn. Options are plain
// values: a slice of them may be built once and shared by goroutines.
type Option func(*config)

type config struct {
	maxAttempts int
	backOff     backoff.BackOff
	newBackOff  func() backoff.BackOff
	retryable   func(error) bool
	observer    Observer
	budget      *Budget
	sleep       func(ctx context.Context, d time.Duration) error // test hook
	op          string
	key         string
}

func (c *config) apply(opts []Option) {
	c.maxAttempts = DefaultMaxAttempts
	for _, o := range opts {
		if o != nil {
			o(c)
		}
	}
}

// WithMaxAttempts limits the calls of the function to n in all, the first
// one included. n < 1 is treated as 1 (no retry).
func WithMaxAttempts(n int) Option {
	return func(c *config) { c.maxAttempts = max(n, 1) }
}

// WithBackOff sets the wait between attempts. b is Reset before the first
// retry of each call and is then used by that call alone, so one BackOff
// value must not serve two calls at once; give concurrent calls
// WithBackOffFunc instead. backoff.Stop from b ends the loop with
// ErrBackOffStopped. The default is DefaultBackOff.
func WithBackOff(b backoff.BackOff) Option {
	return func(c *config) { c.backOff, c.newBackOff = b, nil }
}

// WithBackOffFunc makes each call that needs to retry build its own BackOff
// with f. Use it for options shared by concurrent calls.
func WithBackOffFunc(f func() backoff.BackOff) Option {
	return func(c *config) { c.newBackOff, c.backOff = f, nil }
}

// WithRetryable classifies more errors as retryable, in addition to
// conflicts (errors matching cas.ErrConflict), which are always retried.
// Use it for an adapter's transient errors. Several WithRetryable options
// combine: an error is retried if any of them says so.
func WithRetryable(f func(err error) bool) Option {
	return func(c *config) {
		if prev := c.retryable; prev != nil {
			c.retryable = func(err error) bool { return prev(err) || f(err) }
			return
		}
		c.retryable = f
	}
}

// WithObserver reports every attempt and every call to o.
func WithObserver(o Observer) Option {
	return func(c *config) { c.observer = o }
}

// WithBudget makes retries draw from a budget shared with other calls.
func WithBudget(b *Budget) Option {
	return func(c *config) { c.budget = b }
}

// withSleep replaces the wait between attempts (tests only).
func withSleep(f func(ctx context.Context, d time.Duration) error) Option {
	return func(c *config) { c.sleep = f }
}

// DefaultBackOff returns the backoff used when none is given: exponential,
// starting at 1ms, doubling up to 100ms, each wait randomised by ±50% so
// that conflicting writers spread out, and never stopping by itself (the
// attempt limit and the context bound the loop). Conflicts clear in
// microseconds to milliseconds, unlike network outages, hence the short
// first wait.
func DefaultBackOff() backoff.BackOff {
	b := &backoff.ExponentialBackOff{
		InitialInterval:     time.Millisecond,
		RandomizationFactor: 0.5,
		Multiplier:          2,
		MaxInterval:         100 * time.Millisecond,
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
