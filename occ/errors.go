package occ

import (
	"errors"
	"fmt"
)

// Reasons a retry loop gives up, carried by a [*GiveUpError] and matched with
// errors.Is. A context that ends the loop is the fourth reason: then
// errors.Is(err, ctx.Err()) holds.
var (
	// ErrAttemptsExhausted: the attempt limit (WithMaxAttempts) was reached.
	ErrAttemptsExhausted = errors.New("occ: attempt limit reached")
	// ErrBudgetExhausted: the shared retry budget refused another retry.
	ErrBudgetExhausted = errors.New("occ: retry budget exhausted")
	// ErrBackOffStopped: the BackOff returned backoff.Stop.
	ErrBackOffStopped = errors.New("occ: backoff stopped")
)

// GiveUpError is the error of a retry loop that stopped while its function
// was still failing with a retryable error, or because its context ended. It matches both its Reason and
// the last error with errors.Is, so errors.Is(err, cas.ErrConflict) and
// errors.Is(err, occ.ErrAttemptsExhausted) both hold after a conflict storm.
type GiveUpError struct {
	// Reason is why the loop stopped: ErrAttemptsExhausted,
	// ErrBudgetExhausted, ErrBackOffStopped, or the context's error.
	Reason error
	// Attempts is how many times the function was called.
	Attempts int
	// Last is the function's last error; nil if the context ended before
	// the first attempt.
	Last error
}

// Error implements error.
func (e *GiveUpError) Error() string {
	if e.Last == nil {
		return fmt.Sprintf("occ: gave up after %d attempts: %v", e.Attempts, e.Reason)
	}
	return fmt.Sprintf("occ: gave up after %d attempts (%v): %v", e.Attempts, e.Reason, e.Last)
}

// Unwrap returns the reason and the last error.
func (e *GiveUpError) Unwrap() []error {
	if e.Last == nil {
		return []error{e.Reason}
	}
	return []error{e.Reason, e.Last}
}

// Permanent marks err as final: returned from the function of Retry or
// Txn, or from the mutate of Update, it ends the loop at once, whatever
// WithRetryable says and even if err matches cas.ErrConflict (a conflict
// of an inner transaction that must not restart the outer one, say). The
// loop returns err itself, without the mark, so that an outer loop that
// calls this one is not stopped by it and errors.Is/As see err as it was.
// Permanent(nil) is nil.
//
//	err := occ.Retry(ctx, func(ctx context.Context) error {
//		if err := step(ctx); errors.Is(err, errPaymentDeclined) {
//			return occ.Permanent(err) // do not retry a refusal
//		}
//		...
//	})
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &permanentError{err: err}
}

// permanentError is the mark Permanent puts on an error.
type permanentError struct{ err error }

func (e *permanentError) Error() string { return e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

// unmarkPermanent reports whether err carries Permanent's mark and returns
// the error inside it.
func unmarkPermanent(err error) (error, bool) {
	var p *permanentError
	if errors.As(err, &p) {
		return p.err, true
	}
	return err, false
}
