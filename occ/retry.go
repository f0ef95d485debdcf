package occ

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/occkit/occkit/cas"
)

// Retry calls fn until it succeeds, fails with an error that is not
// retryable, or the loop gives up. Conflicts (errors matching
// cas.ErrConflict) are retryable; WithRetryable adds more. An error
// matching cas.ErrAmbiguous (the write may have applied) is not: retry it
// only for idempotent work.
//
// fn runs on the caller's goroutine (a panic propagates to the caller) with
// ctx; between attempts Retry waits as the backoff says (by default a few
// of the call's own attempt times), and a context that ends, also during
// that wait, stops the loop at once. The result is nil when an attempt
// succeeds; fn's error, unwrapped (Permanent's mark removed), when it is
// not retryable, unless ctx has ended meanwhile; otherwise a *GiveUpError
// whose errors.Is matches both why the loop stopped (ErrAttemptsExhausted,
// ErrBudgetExhausted, ErrBackOffStopped or ctx.Err()) and fn's last
// error. Prefer Update for a single key. See docs/overview.md#retries.
//
// Read inside fn and return the conflict unwrapped (or wrapped with %w):
//
//	err := occ.Retry(ctx, func(ctx context.Context) error {
//		it, err := store.Get(ctx, "stock/sku-42")
//		if err != nil {
//			return err
//		}
//		n, _ := strconv.Atoi(string(it.Value))
//		if n == 0 {
//			return ErrSoldOut // not retryable: returned as is
//		}
//		_, err = store.CompareAndSwap(ctx, "stock/sku-42", it.Version, []byte(strconv.Itoa(n-1)))
//		return err // a conflict: read again and retry
//	})
func Retry(ctx context.Context, fn func(ctx context.Context) error, opts ...Option) error {
	var c config
	c.apply(opts)
	c.op = "retry"
	if c.opName != "" {
		c.op, c.key = c.opName, c.opKey
	}
	return c.run(ctx, fn)
}

// run is the retry loop shared by Retry, Update and Txn.
func (c *config) run(ctx context.Context, fn func(ctx context.Context) error) error {
	var start time.Time
	first := 1
	switch {
	case c.resumeAt > 0:
		// The call's first attempts ran in an earlier loop (escalate).
		start, first, c.resumeAt = c.resumeStart, c.resumeAt+1, 0
	case c.observer != nil:
		start = time.Now()
	}
	if ctx == nil {
		return fmt.Errorf("occ: %s: %w", c.op, cas.ErrNilContext)
	}
	if first == 1 && c.observer != nil {
		ctx = c.startCall(ctx)
	}
	if err := ctx.Err(); err != nil {
		return c.finish(ctx, start, first-1, OutcomeGaveUp, &GiveUpError{Reason: err, Attempts: first - 1, Last: c.lastErr})
	}
	var (
		b      backoff.BackOff // the caller's, made on the first wait
		scaled scaledBackOff   // the default's state
		redone bool            // an attempt from a stale remembered state was not counted
	)
	for attempt := first; ; attempt++ {
		if c.store != nil && c.line == nil && linesOpen.Load() != 0 && !c.leftLine {
			// The key is hot in this process: queue for its turn instead
			// of barging in ahead of the calls that have waited longer.
			var w0 time.Time
			if c.observer != nil {
				w0 = time.Now()
			}
			queued, jerr := c.joinLine(ctx, false)
			if queued && c.observer != nil {
				c.observeWait(ctx, Wait{Op: c.op, Key: c.key, After: attempt - 1, Kind: WaitTurn, Duration: time.Since(w0)})
			}
			if jerr != nil {
				return c.finish(ctx, start, attempt-1, OutcomeGaveUp, &GiveUpError{Reason: jerr, Attempts: attempt - 1, Last: c.lastErr})
			}
			if queued {
				// What the call knew before the wait is stale now.
				c.waited, c.retryNow = true, false
				// A call that left a stuck line tries once on its own.
				c.leftLine = c.line == nil
			}
		} else {
			c.leftLine = false
		}
		var t0 time.Time
		if c.observer != nil || attempt > 1 || c.line != nil {
			// Retries are timed (the first attempt is not: it must cost
			// nothing extra): the default backoff counts its waits in
			// attempt times. So are a turn's: see line.fast.
			t0 = time.Now()
		}
		var err error
		c.exclusive = false
		if c.line == nil {
			err = fn(ctx)
		} else {
			err = c.attemptHolding(ctx, fn)
		}
		if attempt > 1 || c.line != nil {
			c.noteAttemptTime(time.Since(t0))
			if c.line != nil {
				c.line.fast.Store(c.unit < lineMinUnit)
			}
		}
		if attempt == 1 && c.budget != nil && !redone {
			c.budget.deposit()
		}
		if err == nil && c.observer == nil {
			if c.line != nil {
				c.leaveLine()
			}
			return nil // success, with nobody to tell: the common case, kept short
		}
		var outcome Outcome
		if c.line == nil {
			outcome = c.classify(err)
		} else {
			outcome = c.classifyHolding(err)
		}
		if outcome == OutcomeFailed {
			err, _ = unmarkPermanent(err)
		}
		if c.observer != nil {
			a := Attempt{Op: c.op, Key: c.key, Number: attempt, Outcome: outcome, Err: err, Latency: time.Since(t0), Exclusive: c.exclusive}
			if c.line == nil {
				c.observeAttempt(ctx, a)
			} else {
				c.observeHolding(ctx, a)
			}
		}
		switch outcome {
		case OutcomeSuccess:
			return c.finish(ctx, start, attempt, OutcomeSuccess, nil)
		case OutcomeFailed:
			if ctxErr := ctx.Err(); ctxErr != nil {
				return c.finish(ctx, start, attempt, OutcomeGaveUp, &GiveUpError{Reason: ctxErr, Attempts: attempt, Last: err})
			}
			return c.finish(ctx, start, attempt, OutcomeFailed, err)
		}
		if ctxErr := ctx.Err(); ctxErr != nil {
			return c.finish(ctx, start, attempt, OutcomeGaveUp, &GiveUpError{Reason: ctxErr, Attempts: attempt, Last: err})
		}
		if c.staleRecent && c.retryNow {
			// The attempt started from a remembered state (recent.go)
			// that was stale: retry from the current state at once, as
			// after the read it saved. The attempt does not count (its
			// number is used again): the call's attempt limit, immediate
			// retry, budget, escalation and turn are left untouched. A
			// call has one such attempt at most (it reads afterwards).
			c.staleRecent, c.retryNow, c.waited = false, false, false
			attempt--
			redone = true
			continue
		}
		c.staleRecent = false
		if attempt >= c.maxAttempts {
			return c.finish(ctx, start, attempt, OutcomeGaveUp, &GiveUpError{Reason: ErrAttemptsExhausted, Attempts: attempt, Last: err})
		}
		c.lastErr = err
		if c.escalate && outcome == OutcomeConflict {
			// A combiner's cold key conflicted: the call goes on through
			// the combiner, from the state the conflict carried.
			if c.budget != nil && !c.budget.withdraw() {
				return c.finish(ctx, start, attempt, OutcomeGaveUp, &GiveUpError{Reason: ErrBudgetExhausted, Attempts: attempt, Last: err})
			}
			c.resumeAt, c.resumeStart = attempt, start
			c.retryNow, c.retriedNow = false, true
			return errEscalate
		}
		if c.store != nil && c.line == nil && outcome == OutcomeConflict && c.unit >= lineMinUnit {
			var w0 time.Time
			if c.observer != nil {
				w0 = time.Now()
			}
			queued, jerr := c.joinLine(ctx, true)
			if queued && c.observer != nil {
				c.observeWait(ctx, Wait{Op: c.op, Key: c.key, After: attempt, Kind: WaitTurn, Duration: time.Since(w0)})
			}
			if jerr != nil {
				return c.finish(ctx, start, attempt, OutcomeGaveUp, &GiveUpError{Reason: jerr, Attempts: attempt, Last: err})
			}
			if queued {
				// The call waited in line, for its turn or until the
				// line's bound: what the conflict said is stale, read.
				c.retryNow, c.waited = false, true
				if c.budget != nil && !c.budget.withdraw() {
					return c.finish(ctx, start, attempt, OutcomeGaveUp, &GiveUpError{Reason: ErrBudgetExhausted, Attempts: attempt, Last: err})
				}
				continue
			}
		}
		queueing := c.line != nil && !c.line.fast.Load() // a holder of a line others may queue in
		holderNow := false
		if queueing && outcome == OutcomeConflict {
			c.heldLost++
			holderNow = c.heldLost <= holderRetriesAtOnce
		}
		if c.retryNow && (!c.retriedNow || holderNow) {
			// The attempt learned the current state from its conflict:
			// retry from it at once, before it goes stale: once per call,
			// and for the holder of the key's turn on its first
			// holderRetriesAtOnce conflicts.
			c.retryNow, c.retriedNow, c.waited = false, true, false
			if c.budget != nil && !c.budget.withdraw() {
				return c.finish(ctx, start, attempt, OutcomeGaveUp, &GiveUpError{Reason: ErrBudgetExhausted, Attempts: attempt, Last: err})
			}
			continue
		}
		c.retryNow = false
		var d time.Duration
		if queueing {
			d = holderWait(c.unit)
		} else {
			d = c.nextWait(&b, &scaled)
		}
		if d == backoff.Stop {
			return c.finish(ctx, start, attempt, OutcomeGaveUp, &GiveUpError{Reason: ErrBackOffStopped, Attempts: attempt, Last: err})
		}
		if c.budget != nil && !c.budget.withdraw() {
			return c.finish(ctx, start, attempt, OutcomeGaveUp, &GiveUpError{Reason: ErrBudgetExhausted, Attempts: attempt, Last: err})
		}
		var w0 time.Time
		if c.observer != nil {
			w0 = time.Now()
		}
		waitErr := c.wait(ctx, d)
		if c.observer != nil {
			c.observeWait(ctx, Wait{Op: c.op, Key: c.key, After: attempt, Kind: WaitBackOff, Duration: time.Since(w0)})
		}
		if waitErr != nil {
			return c.finish(ctx, start, attempt, OutcomeGaveUp, &GiveUpError{Reason: waitErr, Attempts: attempt, Last: err})
		}
		c.waited = true
	}
}

func (c *config) classify(err error) Outcome {
	switch {
	case err == nil:
		return OutcomeSuccess
	case isPermanent(err):
		return OutcomeFailed
	case errors.Is(err, cas.ErrConflict):
		return OutcomeConflict
	case c.retryable != nil && c.retryable(err):
		return OutcomeRetryable
	default:
		return OutcomeFailed
	}
}

func (c *config) finish(ctx context.Context, start time.Time, attempts int, outcome Outcome, err error) error {
	if c.line != nil {
		c.leaveLine()
	}
	if c.observer != nil {
		if c.obsCtx != nil {
			ctx = c.obsCtx
		}
		call := Call{Op: c.op, Key: c.key, Attempts: attempts, Outcome: outcome, Err: err, Latency: time.Since(start)}
		c.observer.ObserveCall(ctx, call)
		if c.observer2 != nil {
			c.observer2.ObserveCall(ctx, call)
		}
	}
	return err
}

// startCall tells the call's observers that implement CallStarter that
// the call starts, and returns (and keeps, for the observers) the context
// it goes on with.
func (c *config) startCall(ctx context.Context) context.Context {
	s := CallStart{Op: c.op, Key: c.key}
	ctx = startCall(ctx, c.observer, s)
	if c.observer2 != nil {
		ctx = startCall(ctx, c.observer2, s)
	}
	c.obsCtx = ctx
	return ctx
}

// observeWait tells the call's observers that implement WaitObserver
// about w. The holder of a turn leaves its line if an observer panics.
func (c *config) observeWait(ctx context.Context, w Wait) {
	if c.obsCtx != nil {
		ctx = c.obsCtx
	}
	done := false
	if c.line != nil {
		defer c.leaveUnless(&done)
	}
	observeWait(ctx, c.observer, w)
	if c.observer2 != nil {
		observeWait(ctx, c.observer2, w)
	}
	done = true
}

// observeAttempt tells the call's observers about a.
func (c *config) observeAttempt(ctx context.Context, a Attempt) {
	if c.obsCtx != nil {
		ctx = c.obsCtx
	}
	c.observer.ObserveAttempt(ctx, a)
	if c.observer2 != nil {
		c.observer2.ObserveAttempt(ctx, a)
	}
}

// wait sleeps for d or until ctx ends, returning ctx.Err() in that case.
func (c *config) wait(ctx context.Context, d time.Duration) error {
	if c.sleep != nil {
		return c.sleep(ctx, d)
	}
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// isPermanent reports whether err carries Permanent's mark.
func isPermanent(err error) bool {
	var p *permanentError
	return errors.As(err, &p)
}
