package occhttp_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/occkit/occkit/adapters/memcas"
	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/occhttp"
)

// A PUT carries the ETag its client read in If-Match: an edit made on a
// version someone else has replaced meanwhile is refused with 412 and the
// current ETag, instead of silently overwriting the other edit.
func Example() {
	type profile struct {
		Name string `json:"name"`
	}
	profiles := cas.NewTyped(memcas.New(), cas.JSON[profile]())

	mux := http.NewServeMux()
	mux.HandleFunc("GET /profiles/{id}", func(w http.ResponseWriter, r *http.Request) {
		p, v, err := profiles.Get(r.Context(), r.PathValue("id"))
		if err != nil {
			occhttp.WriteError(w, err) // 404 when missing
			return
		}
		occhttp.SetETag(w, v)
		_ = json.NewEncoder(w).Encode(p)
	})
	mux.HandleFunc("PUT /profiles/{id}", func(w http.ResponseWriter, r *http.Request) {
		pre, err := occhttp.ReadPrecondition(r)
		if err != nil {
			occhttp.WriteError(w, err) // 400
			return
		}
		var p profile
		if err := json.NewDecoder(r.Body).Decode(&p); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		v, created, err := occhttp.Put(r.Context(), profiles, r.PathValue("id"), pre, p)
		if err != nil {
			occhttp.WriteError(w, err) // 412 with the current ETag, 428 without If-Match
			return
		}
		occhttp.SetETag(w, v)
		if created {
			w.WriteHeader(http.StatusCreated)
		}
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()

	put := func(body string, header ...string) {
		req, _ := http.NewRequest("PUT", srv.URL+"/profiles/ada", strings.NewReader(body))
		if len(header) == 2 {
			req.Header.Set(header[0], header[1])
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			panic(err)
		}
		resp.Body.Close()
		fmt.Println(strings.TrimSpace(resp.Status + " " + resp.Header.Get("ETag")))
	}
	put(`{"name":"Ada"}`)                                        // no precondition
	put(`{"name":"Ada"}`, "If-None-Match", "*")                  // create only
	put(`{"name":"Ada Lovelace"}`, "If-Match", occhttp.ETag(1))  // the version the client read
	put(`{"name":"Ada King"}`, "If-Match", occhttp.ETag(1))      // a stale edit
	put(`{"name":"Ada King-Noel"}`, "If-Match", occhttp.ETag(2)) // redone on the current version
	// Output:
	// 428 Precondition Required
	// 201 Created "1"
	// 200 OK "2"
	// 412 Precondition Failed "2"
	// 200 OK "3"
}
