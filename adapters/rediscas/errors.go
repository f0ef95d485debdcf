package rediscas

import (
	"context"
	"errors"
	"fmt"
	"net"

	"github.com/occkit/occkit/cas"
	"github.com/redis/go-redis/v9"
)

// Retryable reports whether err is a transient Redis failure that
// certainly did not apply a write (the server is loading its data set, a
// cluster slot is moving or down, a replica was asked to write, a script
// is busy; the connection could not be made, so nothing was sent), or a
// failed read, which is always safe to repeat, that may pass on a new try.
// Pass it to occ.WithRetryable. Ambiguous outcomes (cas.ErrAmbiguous) are
// not retryable.
func Retryable(err error) bool {
	if err == nil || errors.Is(err, cas.ErrAmbiguous) {
		return false
	}
	var re *readError
	if errors.As(err, &re) {
		return re.transient()
	}
	return transientReply(err) || notSent(err) && !errors.Is(err, redis.ErrClosed)
}

// transientReply reports a server error reply that says "not now": the
// command did not run and may run later.
func transientReply(err error) bool {
	for _, p := range []string{"LOADING ", "TRYAGAIN ", "CLUSTERDOWN ", "MASTERDOWN ", "READONLY ", "BUSY ", "NOREPLICAS ", "max number of clients reached"} {
		if redis.HasErrorPrefix(err, p) {
			return true
		}
	}
	return false
}

// notSent reports errors raised before the command was sent: no
// connection could be made or taken from the pool, or the client is closed.
func notSent(err error) bool {
	if errors.Is(err, redis.ErrClosed) || errors.Is(err, redis.ErrPoolTimeout) || errors.Is(err, redis.ErrPoolExhausted) {
		return true
	}
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// mayHaveApplied reports whether a write that failed with err may have
// been applied: the request may have reached the server and its answer was
// lost (a broken connection, a timeout, the caller's context ending in
// flight). An error reply from the server is definite: the scripts check
// everything before their first write.
func mayHaveApplied(err error) bool {
	if err == nil || notSent(err) {
		return false
	}
	var rerr redis.Error
	return !errors.As(err, &rerr)
}

func wrapErr(err error) error { return fmt.Errorf("rediscas: %w", err) }

// readError is the error of a failed read, or of another request that is
// always safe to repeat (acquiring a lock). A transient failure of one is
// retryable, unlike that of a write.
type readError struct {
	op  string // "get" when empty
	key string
	err error
}

func (e *readError) Error() string {
	op := e.op
	if op == "" {
		op = "get"
	}
	return fmt.Sprintf("rediscas: %s %q: %v", op, e.key, e.err)
}

func (e *readError) Unwrap() error { return e.err }

func (e *readError) transient() bool {
	if errors.Is(e.err, context.Canceled) || errors.Is(e.err, context.DeadlineExceeded) {
		return false // the caller's context ended: stop
	}
	if errors.Is(e.err, redis.ErrClosed) {
		return false
	}
	var rerr redis.Error
	if errors.As(e.err, &rerr) {
		return transientReply(e.err)
	}
	return true // a network failure
}
