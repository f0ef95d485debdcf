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
