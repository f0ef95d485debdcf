package occhttp

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/occ"
)

// Errors of conditional requests, matched with errors.Is.
var (
	// ErrPreconditionFailed reports a write refused because its
	// precondition did not hold: the resource is not at a version If-Match
	// named, does not exist under If-Match: *, or exists under
	// If-None-Match: *. The concrete error is a *PreconditionError; the
	// answer is 412 Precondition Failed.
	ErrPreconditionFailed = errors.New("occhttp: precondition failed")

	// ErrPreconditionRequired reports a write sent without If-Match or
	// If-None-Match where one is required; the answer is 428 Precondition
	// Required.
	ErrPreconditionRequired = errors.New("occhttp: precondition required")

	// ErrBadPrecondition reports a malformed If-Match or If-None-Match, or
	// a combination this package does not serve; the answer is 400 Bad
	// Request.
	ErrBadPrecondition = errors.New("occhttp: malformed precondition")
)

// PreconditionError is the error of a write whose precondition did not
// hold. It matches ErrPreconditionFailed and cas.ErrConflict with
// errors.Is, and its Err (the refused write's *cas.ConflictError, when the
// refusal came from the store) with errors.As.
type PreconditionError struct {
	// Key is the resource's key.
	Key string
	// Precondition is what the request asked for.
	Precondition Precondition
	// Current is the resource's version when the write was refused (0: it
	// does not exist). WriteError sends it as the ETag.
	Current cas.Version
	// Err is the store's refusal, if the write reached the store.
	Err error
}

// Error implements error.
func (e *PreconditionError) Error() string {
	msg := fmt.Sprintf("occhttp: precondition %s failed on %q", e.Precondition, e.Key)
	if e.Current == 0 {
		return msg + ": resource does not exist"
	}
	return msg + fmt.Sprintf(": current version %d", e.Current)
}

// Is reports whether target is ErrPreconditionFailed or cas.ErrConflict.
func (e *PreconditionError) Is(target error) bool {
	return target == ErrPreconditionFailed || target == cas.ErrConflict
}

// Unwrap returns the store's refusal, if any.
func (e *PreconditionError) Unwrap() error { return e.Err }

// preconditionFailed turns a conflict of a conditional write into a
// *PreconditionError carrying the current version: from the conflict when
// the store returned it, else from a fresh read (read returns the
// resource's version, or an error matching cas.ErrNotFound when it does
// not exist). Other errors pass.
func preconditionFailed(ctx context.Context, read versionReader, key string, p Precondition, err error) error {
	var ce *cas.ConflictError
	if !errors.As(err, &ce) {
		return err
	}
	pe := &PreconditionError{Key: key, Precondition: p, Err: err}
	if ce.HasCurrent {
		pe.Current = ce.Current.Version
	} else if v, gerr := read(ctx); gerr == nil {
		pe.Current = v
	} else if !errors.Is(gerr, cas.ErrNotFound) {
		return err // the current version is unknown: better a 409 than a wrong ETag
	}
	return pe
}

// Status returns the HTTP status that answers err:
//   - 400 Bad Request: ErrBadPrecondition, cas.ErrInvalidKey, cas.ErrInvalidVersion;
//   - 412 Precondition Failed: ErrPreconditionFailed;
//   - 428 Precondition Required: ErrPreconditionRequired;
//   - 503 Service Unavailable: occ.ErrBudgetExhausted (the retry budget
//     sheds load), a context deadline;
//   - 404 Not Found: cas.ErrNotFound;
//   - 409 Conflict: cas.ErrConflict otherwise (a write without an If-Match
//     that still conflicted after the server's retries);
//   - 413 Content Too Large: cas.ErrTooLarge, and a *http.MaxBytesError
//     (a request body over the limit of http.MaxBytesHandler or
//     http.MaxBytesReader);
//   - 500 Internal Server Error: the rest, cas.ErrAmbiguous included.
//
// Status(nil) is 200.
func Status(err error) int {
	switch {
	case err == nil:
		return http.StatusOK
	case errors.Is(err, ErrBadPrecondition), errors.Is(err, cas.ErrInvalidKey), errors.Is(err, cas.ErrInvalidVersion):
		return http.StatusBadRequest
	case errors.Is(err, ErrPreconditionFailed):
		return http.StatusPreconditionFailed
	case errors.Is(err, ErrPreconditionRequired):
		return http.StatusPreconditionRequired
	case errors.Is(err, occ.ErrBudgetExhausted), errors.Is(err, context.DeadlineExceeded):
		return http.StatusServiceUnavailable
	case errors.Is(err, cas.ErrNotFound):
		return http.StatusNotFound
	case errors.Is(err, cas.ErrConflict):
		return http.StatusConflict
	case errors.Is(err, cas.ErrTooLarge), errors.As(err, new(*http.MaxBytesError)):
		return http.StatusRequestEntityTooLarge
	}
	return http.StatusInternalServerError
}

// WriteError answers err with Status(err). A failed precondition carries
// the resource's current ETag (when it exists), so that the client can
// read it again and redo its edit. The body is err's message for 4xx
// answers and the status text for 5xx ones (which may hold internals).
func WriteError(w http.ResponseWriter, err error) {
	code := Status(err)
	var pe *PreconditionError
	if errors.As(err, &pe) && pe.Current != 0 {
		SetETag(w, pe.Current)
	}
	msg := http.StatusText(code)
	if code < 500 && err != nil {
		msg = err.Error()
	}
	http.Error(w, msg, code)
}
