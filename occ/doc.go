// Package occ is occkit's retry framework for optimistic concurrency: read,
// change, write only if nothing changed, and start again when something did.
//
// Three entry points cover the whole story:
//   - [Update] is a read-modify-write of one key of a *cas.Typed store;
//   - [Txn] is an optimistic transaction over several keys, committed
//     atomically through a cas.Committer;
//   - [Retry] retries any function that returns a conflict.
//
// Everything else is an [Option]: [WithMaxAttempts], [WithBackOff] (any
// github.com/cenkalti/backoff/v4 BackOff; the default, [DefaultBackOff], is
// exponential from 1ms with jitter), [WithRetryable] for an adapter's
// transient errors, [WithObserver] for metrics and traces (package
// [github.com/occkit/occkit/occ/occotel] turns them into OpenTelemetry
// metrics and spans) and [WithBudget], a retry [Budget] shared across goroutines that
// keeps a conflict storm from multiplying the load. Two shared objects,
// each one per process, make hot keys cheap: a [Cache] ([WithCache]) skips
// the read of keys whose version the process knows, and a [Combiner]
// ([WithCombiner]) makes concurrent Updates of one key share one
// conditional write (group commit).
//
// # Guarantees
//
// The function runs on the caller's goroutine, so a panic reaches the
// caller. The loop is bounded: by the attempt limit ([DefaultMaxAttempts]
// unless set), by the budget, by the BackOff and by the context, which ends
// the loop at once, also during a wait. A non-retryable error is returned
// as is; a loop that gives up returns a [*GiveUpError] that matches both why
// it stopped (errors.Is(err, ErrAttemptsExhausted), ErrBudgetExhausted,
// ErrBackOffStopped or ctx.Err()) and the last error
// (errors.Is(err, cas.ErrConflict)). No goroutine is started.
//
// # Cost
//
// An uncontended Update costs one read and one conditional write, and no
// allocation beyond the codec's and the store's. A conflict that carries
// the current state (every occkit adapter returns it when its backend can)
// restarts from that state, so a retry costs one round trip.
package occ
