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
	// Op is "retry", "update", "txn" or "add", or the op given to WithOp
	// (such as "hybrid.update").
	Op string
	// Key is the key of an Update or Add, or the key given to WithOp;
	// empty for Retry and Txn.
	Key string
	// Number is 1 for the first attempt.
	Number int
	// Outcome is how the attempt ended: OutcomeSuccess, OutcomeConflict
	// (a conditional write lost), OutcomeRetryable (an error the call's
	// Retryable accepted) or OutcomeFailed.
	Outcome Outcome
	// Err is the attempt's error (nil on success).
	Err error
	// Latency is the attempt's own time, without the wait before it.
	Latency time.Duration
	// Exclusive reports an attempt that ran exclusively after the call (or
	// a combined batch, or a transaction) had lost too many writes in a
	// row (WithExclusiveAfter), or a transaction's commit at hot keys
	// (cas.HotCommitHint): the store held the key, or the transaction's
	// keys, from the read to the write.
	Exclusive bool
}

// Call describes a whole Retry, Update or Txn call.
type Call struct {
	// Op and Key are those of the call's attempts (Attempt).
	Op  string
	Key string
	// Attempts is how many attempts the call made.
	Attempts int
	// Outcome is OutcomeSuccess, OutcomeFailed or OutcomeGaveUp.
	Outcome Outcome
	// Err is the error the call returned.
	Err error
	// Latency is the call's whole time, its attempts and waits.
	Latency time.Duration
}

// Observer is told about every attempt and every call. Its methods run on
// the caller's goroutine, inside the loop, so they must be quick; an
// Observer given to concurrent calls must be safe for concurrent use. An
// Observer may also implement CallStarter (to be told when a call starts,
// and give it a context: a trace span) and WaitObserver (the waits
// between attempts).
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

// CallStart describes a Retry, Update, Txn or Add call about to make its
// first attempt.
type CallStart struct {
	// Op and Key are those its Attempts and its Call will carry.
	Op  string
	Key string
}

// CallStarter is an optional interface of an Observer: one that needs to
// know when a call starts (to open a trace span for it, say) implements
// it. StartCall is called once per call, on the caller's goroutine, before
// the call's first attempt, and always followed by exactly one
// ObserveCall for the same call (unless a panic leaves the call). It
// returns the context the call goes on with: the function (Retry's fn,
// Txn's fn, Update's reads and writes) runs with it, and the observers'
// methods for this call get it. It must be ctx or a context derived from
// ctx that only adds values (context.WithValue, trace.ContextWithSpan):
// the call's cancellation stays ctx's. A nil result keeps ctx.
//
// A call that goes on in a Combiner's batch (see Combiner) keeps the
// context StartCall returned for its observers, but the batch's reads and
// writes run with the batch's own context.
type CallStarter interface {
	StartCall(ctx context.Context, s CallStart) context.Context
}

// WaitKind says why a call waited between two attempts.
type WaitKind uint8

// Kinds of waits.
const (
	// WaitBackOff: the call backed off after a failed attempt, as the
	// BackOff (or the default, counted in attempt times) said.
	WaitBackOff WaitKind = iota
	// WaitTurn: the call queued for its turn at a key that is hot in this
	// process (see Update's turns).
	WaitTurn
)

// String returns "backoff" or "turn".
func (k WaitKind) String() string {
	switch k {
	case WaitBackOff:
		return "backoff"
	case WaitTurn:
		return "turn"
	}
	return "unknown"
}

// Wait describes one wait of a call between attempts, reported when it
// ends.
type Wait struct {
	// Op and Key are those of the call's attempts (Attempt).
	Op  string
	Key string
	// After is the number of attempts the call had made when it began to
	// wait (0 for a call that queued for its turn before its first
	// attempt).
	After int
	// Kind says what the call waited for: a backoff after a lost
	// attempt, or its turn at a hot key (see WaitKind's values).
	Kind WaitKind
	// Duration is how long the call waited: the backoff's wait, or less
	// when the context ended it. A retry sent at once from the state a
	// conflict carried does not wait and is not reported.
	Duration time.Duration
}

// WaitObserver is an optional interface of an Observer that wants to know
// about the waits between attempts. ObserveWait runs on the caller's
// goroutine after each wait and must be quick.
type WaitObserver interface {
	ObserveWait(ctx context.Context, w Wait)
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

func (o observers) StartCall(ctx context.Context, s CallStart) context.Context {
	return startCall(startCall(ctx, o[0], s), o[1], s)
}

func (o observers) ObserveWait(ctx context.Context, w Wait) {
	observeWait(ctx, o[0], w)
	observeWait(ctx, o[1], w)
}

// startCall tells o that a call starts, if it wants to know, and returns
// the context the call goes on with.
func startCall(ctx context.Context, o Observer, s CallStart) context.Context {
	if cs, ok := o.(CallStarter); ok {
		if n := cs.StartCall(ctx, s); n != nil {
			return n
		}
	}
	return ctx
}

// observeWait tells o about w, if it wants to know.
func observeWait(ctx context.Context, o Observer, w Wait) {
	if wo, ok := o.(WaitObserver); ok {
		wo.ObserveWait(ctx, w)
	}
}
