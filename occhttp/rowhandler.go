package occhttp

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/occkit/occkit/cas"
)

// RowHandler serves the rows of a repository table as JSON resources
// whose ETags are their versions, so that a route over a table needs no
// code of its own:
//
//	mux.Handle("/profiles/{id}", occhttp.RowHandler(profiles, func(r *http.Request) (any, error) {
//		return r.PathValue("id"), nil
//	}))
//
// key names the request's row (an error from it is answered with
// WriteError: make it match cas.ErrInvalidKey for 400). The methods:
//   - GET, HEAD: the row and its ETag, 404 when there is none, 412 with
//     the ETag when If-Match does not name its version, else 304 Not
//     Modified when If-None-Match names it (see NotModified);
//   - PUT: the body, a whole row in JSON with its key, replaces the row
//     (see UpdateRow); 201 Created when it made the row, 200 otherwise,
//     with the row as stored and its new ETag;
//   - PATCH: the body is decoded by encoding/json over the current row
//     (the fields it names change, the others keep their values) and the
//     result written as by PUT;
//   - DELETE: see DeleteRow; 204 No Content;
//   - others: 405 Method Not Allowed.
//
// Writes obey the request's precondition as UpdateRow and DeleteRow do:
// If-Match to edit the version the client read, If-None-Match: * to
// create, 412 with the current ETag when it fails, 428 without one unless
// AllowUnconditional is among opts, 400 when it is malformed. A body that
// is not a row in JSON, or that changes the row's key, is answered 400; a
// version in the body is ignored (the precondition travels in the
// header). The JSON form must be the whole row: a field it does not show
// (json:"-", unexported) is written as its zero value; serve other rows
// with UpdateRow in a handler of your own. Bodies are read whole: bound
// them with http.MaxBytesHandler (a body over its limit is answered 413
// Content Too Large).
//
// The handler is safe for concurrent use if rows is.
func RowHandler[K, T any](rows Rows[K, T], key func(r *http.Request) (K, error), opts ...Option) http.Handler {
	var c config
	c.apply(opts)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.Method {
		case http.MethodGet, http.MethodHead, http.MethodPut, http.MethodPatch, http.MethodDelete:
		default:
			w.Header().Set("Allow", "GET, HEAD, PUT, PATCH, DELETE")
			http.Error(w, http.StatusText(http.StatusMethodNotAllowed), http.StatusMethodNotAllowed)
			return
		}
		k, err := key(r)
		if err != nil {
			WriteError(w, err)
			return
		}
		ctx := r.Context()
		if r.Method == http.MethodGet || r.Method == http.MethodHead {
			row, err := rows.Get(ctx, k)
			if err != nil {
				WriteError(w, err) // 404 when missing
				return
			}
			v := rows.VersionOf(row)
			if NotModified(w, r, v) {
				return
			}
			writeRow(w, http.StatusOK, v, row)
			return
		}

		p, err := ReadPrecondition(r)
		if err == nil && p.Kind == Unconditional && !c.unconditional {
			err = required(fmt.Sprint(k)) // before reading the body
		}
		if err != nil {
			WriteError(w, err)
			return
		}
		if r.Method == http.MethodDelete {
			if err := DeleteRow(ctx, rows, k, p, opts...); err != nil {
				WriteError(w, err)
				return
			}
			w.WriteHeader(http.StatusNoContent)
			return
		}

		body, err := io.ReadAll(r.Body)
		if err != nil {
			// A body cut off by http.MaxBytesHandler is too large, not
			// malformed: the client should send less, not fix its JSON.
			code := http.StatusBadRequest
			if errors.As(err, new(*http.MaxBytesError)) {
				code = http.StatusRequestEntityTooLarge
			}
			http.Error(w, "occhttp: request body: "+err.Error(), code)
			return
		}
		var put T // the PUT's row; for a PATCH, proof that the body decodes
		if err := json.Unmarshal(body, &put); err != nil {
			http.Error(w, "occhttp: request body: "+err.Error(), http.StatusBadRequest)
			return
		}
		created := false
		row, v, err := UpdateRow(ctx, rows, k, p, func(cur T, exists bool) (T, error) {
			created = !exists
			if r.Method == http.MethodPut {
				return put, nil
			}
			// Decode over a copy of cur made from its JSON, not over cur:
			// cur may share maps, slices and pointers with rows other
			// calls hold.
			var next T
			b, err := json.Marshal(cur)
			if err == nil {
				err = json.Unmarshal(b, &next)
			}
			if err == nil {
				err = json.Unmarshal(body, &next)
			}
			return next, err
		}, opts...)
		if err != nil {
			WriteError(w, err)
			return
		}
		status := http.StatusOK
		if created {
			status = http.StatusCreated
		}
		writeRow(w, status, v, row)
	})
}

// writeRow answers with row in JSON and v's ETag.
func writeRow(w http.ResponseWriter, status int, v cas.Version, row any) {
	SetETag(w, v)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(row)
}
