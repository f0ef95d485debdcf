package occ

import (
	"context"
	"time"
)

// Outcome is how an attempt or a call ended.
type Outcome uint8

// Outcomes of attempts and calls.
const (
	// OutcomeSuccess: the function returned nil.
	OutcomeSuccess Outcome = iota
	// OutcomeConflict: the attempt failed with a conflict and may be retried.
	OutcomeConflict
	// OutcomeRetryable: the attempt failed with another error classified as
	// retryable (WithRetryable).
	OutcomeRetryable
	// OutcomeFailed: the function returned an error that is not retryable; the
	// call returns it as is.
	OutcomeFailed
	// OutcomeGaveUp: the call stopped while still failing with a retryable error
	// (attempt limit, budget, backoff or context); its Err is a
	// *GiveUpError. Calls only.
	OutcomeGaveUp
)

// String returns the outcome's name: "success", "conflict", "retryable",
// "failed", "gave-up".
func (o Outcome) String() string {
	switch o {
	case OutcomeSuccess:
		return "success"
	case OutcomeConflict:
		return "conflict"
	case OutcomeRetryable:
		return "retryable"
	case OutcomeFailed:
		return "failed"
	case OutcomeGaveUp:
		return "gave-up"
	}
	return "unknown"
}

// Attempt describes one call of the function.
type Attempt struct {
	// Op is "retry", "update" or "txn".
	Op string
	// Key is the key of an Update; empty for Retry and Txn.
	Key string
	// Number is 1 for the first attempt.
	Number  int
	Outcome Outcome
	// Err is the attempt's error (nil on success).
	Err     error
	Latency time.Duration
}

// Call describes a whole Retry, Update or Txn call.
type Call struct {
	Op       string
	Key      string
	Attempts int
	// Outcome is OutcomeSuccess, OutcomeFailed or OutcomeGaveUp.
	Outcome Outcome
	// Err is the error the call returned.
	Err     error
	Latency time.Duration
}

// Observer is told about every attempt and every call. Its methods run on
// the caller's goroutine, inside the loop, so they must be quick; an
// Observer given to concurrent calls must be safe for concurrent use.
type Observer interface {
	ObserveAttempt(ctx context.Context, a Attempt)
	ObserveCall(ctx context.Context, c Call)
}

// ObserverFuncs adapts functions to an Observer; a nil field ignores that
// event.
type ObserverFuncs struct {
	Attempt func(ctx context.Context, a Attempt)
	Call    func(ctx context.Context, c Call)
}

// ObserveAttempt implements Observer.
func (f ObserverFuncs) ObserveAttempt(ctx context.Context, a Attempt) {
	if f.Attempt != nil {
		f.Attempt(ctx, a)
	}
}

// ObserveCall implements Observer.
func (f ObserverFuncs) ObserveCall(ctx context.Context, c Call) {
	if f.Call != nil {
		f.Call(ctx, c)
	}
}

// observers tells two observers, a first.
type observers [2]Observer

func (o observers) ObserveAttempt(ctx context.Context, a Attempt) {
	o[0].ObserveAttempt(ctx, a)
	o[1].ObserveAttempt(ctx, a)
}

func (o observers) ObserveCall(ctx context.Context, c Call) {
	o[0].ObserveCall(ctx, c)
	o[1].ObserveCall(ctx, c)
}
