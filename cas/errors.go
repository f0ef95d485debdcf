package cas

import (
	"errors"
	"fmt"
)

// Sentinel errors returned by every [Store]. Match them with [errors.Is]:
// adapters wrap them and keep the backend's native error reachable with
// [errors.As].
var (
	// ErrConflict reports that a conditional write did not apply because the
	// key's version was not the expected one. The concrete error is a
	// [*ConflictError].
	ErrConflict = errors.New("cas: version conflict")

	// ErrNotFound reports that a key does not exist.
	ErrNotFound = errors.New("cas: key not found")

	// ErrAmbiguous reports that a write may or may not have been applied:
	// the request reached the backend but its answer was lost. Retrying a
	// non-idempotent mutation after it can apply the mutation twice.
	ErrAmbiguous = errors.New("cas: outcome of write is unknown")

	// ErrFenced reports that a fenced write carried a fencing token smaller
	// than one that has already written the key: its holder lost the lease.
	ErrFenced = errors.New("cas: stale fencing token")

	// ErrTooLarge reports a value (or a commit) over the store's limits.
	// Nothing was sent to the backend.
	ErrTooLarge = errors.New("cas: too large")

	// ErrInvalidKey reports a key the store cannot hold: empty, not valid
	// UTF-8, containing a NUL byte, or longer than the store's limit.
	ErrInvalidKey = errors.New("cas: invalid key")

	// ErrInvalidVersion reports a version that cannot be meant, such as
	// deleting with expected version 0 (a key that does not exist).
	ErrInvalidVersion = errors.New("cas: invalid version")

	// ErrInvalidCommit reports a malformed multi-key commit: no operations,
	// the same key twice, or an unknown operation kind.
	ErrInvalidCommit = errors.New("cas: invalid commit")

	// ErrNilContext reports a call made with a nil context.Context: it is
	// refused before anything is sent, instead of panicking.
	ErrNilContext = errors.New("cas: nil context")
)

// ConflictError is the error of a conditional write whose expected version
// did not match. errors.Is(err, ErrConflict) is true for it.
//
// When the backend returned the key's current state in the same round trip
// (PostgreSQL, etcd and DynamoDB do), HasCurrent is true and Current holds it;
// Current.Version == 0 then means the key does not exist, and
// errors.Is(err, ErrNotFound) is true as well. A retry can start from
// Current without reading the key again.
type ConflictError struct {
	// Key is the key whose version did not match.
	Key string
	// Expected is the version the write expected.
	Expected Version
	// Current is the key's state when the write was refused; valid only if
	// HasCurrent is true.
	Current Item
	// HasCurrent reports whether Current was returned by the backend.
	HasCurrent bool
	// Err is the backend's native error, if any (for example a
	// *pgconn.PgError with SQLSTATE 40001); reachable with errors.As.
	Err error
}

// Error implements error.
func (e *ConflictError) Error() string {
	msg := fmt.Sprintf("cas: version conflict on key %q: expected version %d", e.Key, e.Expected)
	if e.HasCurrent {
		if e.Current.Version == 0 {
			msg += ", key does not exist"
		} else {
			msg += fmt.Sprintf(", current version %d", e.Current.Version)
		}
	}
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

// Is reports whether target is ErrConflict, or ErrNotFound when the key is
// known to be absent.
func (e *ConflictError) Is(target error) bool {
	switch target {
	case ErrConflict:
		return true
	case ErrNotFound:
		return e.HasCurrent && e.Current.Version == 0
	}
	return false
}

// Unwrap returns the backend's native error, if any.
func (e *ConflictError) Unwrap() error { return e.Err }

// KeyError is the error for a key or value that failed validation, or for a
// key-specific failure. It matches its Err (ErrInvalidKey, ErrTooLarge,
// ErrFenced, ErrNotFound, ...) with errors.Is.
type KeyError struct {
	// Op is the operation: "get", "compare-and-swap", "compare-and-delete",
	// "commit".
	Op string
	// Key is the key concerned (possibly invalid, shown quoted).
	Key string
	// Err is the cause, usually one of the sentinel errors.
	Err error
}

// Error implements error.
func (e *KeyError) Error() string {
	return fmt.Sprintf("%s %q: %v", e.Op, truncate(e.Key, 64), e.Err)
}

// Unwrap returns the cause.
func (e *KeyError) Unwrap() error { return e.Err }

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// FencedError is the error of a fenced write whose token is smaller than
// the largest token that has written the key. errors.Is(err, ErrFenced) is
// true for it. It is never retryable with the same token: the writer's lease
// was lost and a newer holder has written.
type FencedError struct {
	Key string
	// Token is the token the write carried.
	Token uint64
	// Highest is the largest token that has written the key, when the
	// backend reported it (0 otherwise).
	Highest uint64
	// Err is the backend's native error, if any.
	Err error
}

// Error implements error.
func (e *FencedError) Error() string {
	msg := fmt.Sprintf("cas: stale fencing token on key %q: token %d", truncate(e.Key, 64), e.Token)
	if e.Highest != 0 {
		msg += fmt.Sprintf(", key already written with token %d", e.Highest)
	}
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

// Is reports whether target is ErrFenced.
func (e *FencedError) Is(target error) bool { return target == ErrFenced }

// Unwrap returns the backend's native error, if any.
func (e *FencedError) Unwrap() error { return e.Err }

// AmbiguousError is the error of a write whose outcome is unknown: the
// request may have reached the backend, but its answer was lost (a dropped
// connection, a timeout, a leader change). errors.Is(err, ErrAmbiguous) is
// true for it. Adapters that tag writes with a write id first try to
// resolve the outcome by reading the key back (their own write id found:
// success; the expected version gone without their write: a conflict) and
// return an AmbiguousError only when they cannot tell.
type AmbiguousError struct {
	// Op is the operation: "compare-and-swap", "compare-and-delete",
	// "commit".
	Op string
	// Key is the key written (the first key of a commit).
	Key string
	// WriteID identifies the write in the backend, when the adapter tags
	// writes (empty otherwise). A later read that finds it proves the write
	// applied.
	WriteID string
	// Err is the transport or backend error, reachable with errors.As.
	Err error
}

// Error implements error.
func (e *AmbiguousError) Error() string {
	msg := fmt.Sprintf("cas: outcome of %s on key %q is unknown", e.Op, truncate(e.Key, 64))
	if e.WriteID != "" {
		msg += " (write id " + e.WriteID + ")"
	}
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

// Is reports whether target is ErrAmbiguous.
func (e *AmbiguousError) Is(target error) bool { return target == ErrAmbiguous }

// Unwrap returns the transport or backend error.
func (e *AmbiguousError) Unwrap() error { return e.Err }
