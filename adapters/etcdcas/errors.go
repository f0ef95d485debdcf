package etcdcas

import (
	"context"
	"errors"
	"fmt"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Retryable reports whether err is a transient etcd failure that certainly
// did not apply the request (no leader, too many requests, an unhealthy
// cluster), so that trying again is safe. Pass it to occ.WithRetryable.
// Ambiguous outcomes (cas.ErrAmbiguous) are not retryable.
func Retryable(err error) bool {
	var re *readError
	if errors.As(err, &re) {
		return re.transient()
	}
	return errors.Is(err, rpctypes.ErrNoLeader) ||
		errors.Is(err, rpctypes.ErrTooManyRequests) ||
		errors.Is(err, rpctypes.ErrUnhealthy)
}

// readError is the error of a failed read. Reading again is always safe,
// so a transient failure of a read is retryable, unlike that of a write.
type readError struct {
	key string
	err error
}

func (e *readError) Error() string { return fmt.Sprintf("etcdcas: get %q: %v", e.key, e.err) }

func (e *readError) Unwrap() error { return e.err }

func (e *readError) transient() bool {
	if errors.Is(e.err, context.Canceled) || errors.Is(e.err, context.DeadlineExceeded) {
		return false // the caller's context ended: stop
	}
	switch status.Code(unwrapEtcd(e.err)) {
	case codes.Unavailable, codes.DeadlineExceeded, codes.ResourceExhausted, codes.Aborted:
		return true
	}
	return errors.Is(e.err, rpctypes.ErrNoLeader) || errors.Is(e.err, rpctypes.ErrTimeout) ||
		errors.Is(e.err, rpctypes.ErrLeaderChanged) || errors.Is(e.err, rpctypes.ErrStopped)
}

// definite reports errors the server returns before applying anything.
func definite(err error) bool {
	if Retryable(err) {
		return true
	}
	for _, e := range []error{rpctypes.ErrRequestTooLarge, rpctypes.ErrTooManyOps, rpctypes.ErrDuplicateKey,
		rpctypes.ErrNoSpace, rpctypes.ErrNotCapable, rpctypes.ErrPermissionDenied, rpctypes.ErrInvalidAuthToken,
		rpctypes.ErrEmptyKey, rpctypes.ErrCompacted, rpctypes.ErrFutureRev} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// ambiguous reports whether a write that failed with err may have been
// applied: the request may have reached the server and the answer was lost
// (timeouts, a stopped server, a lost connection, the caller's context
// ending in flight).
func ambiguous(ctx context.Context, err error) bool {
	if err == nil || definite(err) {
		return false
	}
	if ctx.Err() != nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	switch status.Code(unwrapEtcd(err)) {
	case codes.Unavailable, codes.DeadlineExceeded, codes.Canceled, codes.Unknown, codes.Internal, codes.Aborted:
		return true
	}
	for _, e := range []error{rpctypes.ErrTimeout, rpctypes.ErrTimeoutDueToLeaderFail, rpctypes.ErrTimeoutDueToConnectionLost,
		rpctypes.ErrTimeoutWaitAppliedIndex, rpctypes.ErrLeaderChanged, rpctypes.ErrStopped} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// unwrapEtcd turns an rpctypes.EtcdError back into something status.Code
// understands; other errors are returned as they are.
func unwrapEtcd(err error) error {
	var ee rpctypes.EtcdError
	if errors.As(err, &ee) {
		return status.Error(ee.Code(), ee.Error())
	}
	return err
}
