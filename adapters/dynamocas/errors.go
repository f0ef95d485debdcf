package dynamocas

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"
	"github.com/occkit/occkit/cas"
)

// Error codes of throttling and of transaction contention: the server
// refused the request before applying anything, and asks to be asked again.
var transientCodes = map[string]bool{
	"ProvisionedThroughputExceededException": true,
	"ThrottlingException":                    true,
	"RequestLimitExceeded":                   true,
	"TransactionConflictException":           true,
	"TransactionInProgressException":         true,
	"ReplicatedWriteConflictException":       true,
}

// Cancellation reason codes of a TransactionCanceledException that make
// the whole transaction worth trying again.
var transientReasons = map[string]bool{
	"TransactionConflict":           true,
	"ThrottlingError":               true,
	"ProvisionedThroughputExceeded": true,
	"ReplicatedWriteConflict":       true,
	"TransactionInProgress":         true,
	"RequestLimitExceeded":          true,
	"None":                          true, // this item was fine
	"":                              true,
}

// Retryable is the package's one classifier of transient failures: it
// reports whether err certainly applied nothing (a request refused or
// never served, or a read), so that trying the operation again is safe
// and may succeed. Pass it to occ.WithRetryable. It is true for
//
//   - throttling (ProvisionedThroughputExceeded, ThrottlingException,
//     RequestLimitExceeded) and a transaction refused because of another
//     transaction on the same items (TransactionCanceledException with
//     reason TransactionConflict, TransactionConflictException);
//   - a server error (HTTP 5xx) and a connection that could not be made;
//   - a read (Get) that failed in transit: no answer, or an answer whose
//     body was cut or garbled (the SDK's "deserialization failed"), with
//     any status: reading again is always safe;
//   - a request the server refused (HTTP 4xx) whose answer was cut before
//     its body said why: a 4xx means the request was not applied, and the
//     next attempt learns the reason. (A single-key write first reads the
//     key: when it no longer matches the write's condition the store
//     returns the *cas.ConflictError, or *cas.FencedError, the refusal
//     most likely was.)
//
// Conflicts are not Retryable's business (occ always retries them). A
// write whose answer was lost — no answer, a 5xx, or an HTTP 200 whose
// body was cut (it applied, but its result is unknown) — goes through the
// store's write-id resolution, and when that cannot tell, the store
// returns a *cas.AmbiguousError (cas.ErrAmbiguous: it may have applied),
// which is never retryable. A context that ended is not retryable either.
func Retryable(err error) bool {
	if err == nil || errors.Is(err, cas.ErrAmbiguous) ||
		errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var re *readError
	if errors.As(err, &re) && (!answered(re.err) || unread(re.err)) {
		return true // lost in transit: reading again is safe
	}
	var tce *types.TransactionCanceledException
	if errors.As(err, &tce) {
		return cancelledTransiently(tce)
	}
	var api smithy.APIError
	if errors.As(err, &api) && transientCodes[api.ErrorCode()] {
		return true
	}
	st := httpStatus(err)
	return st >= 500 || (st >= 400 && unread(err)) || neverSent(err)
}

// neverSent reports a request that failed before reaching the server:
// the connection could not be made.
func neverSent(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// cancelledTransiently reports whether a cancelled transaction failed only
// for transient reasons (no condition failed, nothing was invalid).
func cancelledTransiently(tce *types.TransactionCanceledException) bool {
	some := false
	for _, r := range tce.CancellationReasons {
		code := aws.ToString(r.Code)
		if !transientReasons[code] {
			return false
		}
		if code != "None" && code != "" {
			some = true
		}
	}
	return some
}

// httpStatus returns the HTTP status of the response err came with, or 0
// when there was no response.
func httpStatus(err error) int {
	var re interface{ HTTPStatusCode() int }
	if errors.As(err, &re) {
		return re.HTTPStatusCode()
	}
	return 0
}

// answered reports whether the server answered the request at all.
func answered(err error) bool { return httpStatus(err) != 0 }

// unread reports an answer whose status came but whose body could not be
// read or decoded: the connection was cut after the status line, or the
// body is garbled. For a write, the status still tells a refusal (4xx:
// not applied) from a success (2xx: applied, result unknown).
func unread(err error) bool {
	var de *smithy.DeserializationError
	return answered(err) && errors.As(err, &de)
}

// definite reports whether a write that failed with err certainly did not
// apply: the server answered with a client error (HTTP 4xx: validation,
// throttling, a failed condition, a missing table...; also when the body
// saying which was cut), or no connection could be made. A server error
// (5xx), a success whose body was cut (2xx), or no answer at all (a
// timeout, a lost connection, the caller's context ending in flight) may
// hide an applied write.
func definite(err error) bool {
	st := httpStatus(err)
	return (st >= 400 && st < 500) || neverSent(err)
}

// tooLarge reports DynamoDB's refusal of an item or transaction over its
// size limits.
func tooLarge(err error) bool {
	var api smithy.APIError
	if !errors.As(err, &api) || api.ErrorCode() != "ValidationException" {
		return false
	}
	msg := strings.ToLower(api.ErrorMessage())
	return strings.Contains(msg, "size") && strings.Contains(msg, "exceed")
}

// readError is the error of a failed read. Reading again is always safe,
// so a read lost in transit is retryable, unlike a write.
type readError struct {
	key string
	err error
}

func (e *readError) Error() string {
	return fmt.Sprintf("dynamocas: get %q: %v", truncate(e.key, 64), e.err)
}

func (e *readError) Unwrap() error { return e.err }

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
