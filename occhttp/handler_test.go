package occhttp_test

import (
	"encoding/json"
	"errors"
	"net/http"

	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/occhttp"
)

// note is the resource the tests serve.
type note struct {
	Text  string   `json:"text"`
	Edits []string `json:"edits,omitempty"`
}

// errEmpty is a handler's own refusal, answered 422.
var errEmpty = errors.New("empty text")

// notes serves /notes/{id}: GET (ETag, 304), PUT (replace or create),
// PATCH (append an edit) and DELETE, every write under the request's
// precondition.
func notes(store *cas.Typed[note], opts ...occhttp.Option) http.Handler {
	mux := http.NewServeMux()
	key := func(r *http.Request) string { return "notes/" + r.PathValue("id") }
	mux.HandleFunc("GET /notes/{id}", func(w http.ResponseWriter, r *http.Request) {
		n, v, err := store.Get(r.Context(), key(r))
		if err != nil {
			occhttp.WriteError(w, err)
			return
		}
		if occhttp.NotModified(w, r, v) {
			return
		}
		occhttp.SetETag(w, v)
		_ = json.NewEncoder(w).Encode(n)
	})
	mux.HandleFunc("PUT /notes/{id}", func(w http.ResponseWriter, r *http.Request) {
		p, err := occhttp.ReadPrecondition(r)
		if err != nil {
			occhttp.WriteError(w, err)
			return
		}
		var n note
		if err := json.NewDecoder(r.Body).Decode(&n); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		v, created, err := occhttp.Put(r.Context(), store, key(r), p, n, opts...)
		if err != nil {
			occhttp.WriteError(w, err)
			return
		}
		occhttp.SetETag(w, v)
		if created {
			w.WriteHeader(http.StatusCreated)
		}
		_ = json.NewEncoder(w).Encode(n)
	})
	mux.HandleFunc("PATCH /notes/{id}", func(w http.ResponseWriter, r *http.Request) {
		p, err := occhttp.ReadPrecondition(r)
		if err != nil {
			occhttp.WriteError(w, err)
			return
		}
		var edit struct {
			By   string `json:"by"`
			Text string `json:"text"`
		}
		if err := json.NewDecoder(r.Body).Decode(&edit); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		n, v, err := occhttp.Update(r.Context(), store, key(r), p, func(cur note, exists bool) (note, error) {
			if edit.Text == "" {
				return cur, errEmpty
			}
			cur.Text = edit.Text
			cur.Edits = append(cur.Edits, edit.By)
			return cur, nil
		}, opts...)
		switch {
		case errors.Is(err, errEmpty):
			http.Error(w, err.Error(), http.StatusUnprocessableEntity)
			return
		case err != nil:
			occhttp.WriteError(w, err)
			return
		}
		occhttp.SetETag(w, v)
		_ = json.NewEncoder(w).Encode(n)
	})
	mux.HandleFunc("DELETE /notes/{id}", func(w http.ResponseWriter, r *http.Request) {
		p, err := occhttp.ReadPrecondition(r)
		if err != nil {
			occhttp.WriteError(w, err)
			return
		}
		if err := occhttp.Delete(r.Context(), store.Store(), key(r), p, opts...); err != nil {
			occhttp.WriteError(w, err)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	return mux
}
