package occhttp_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"

	_ "modernc.org/sqlite" // registers "sqlite"

	"github.com/occkit/occkit/adapters/memcas"
	"github.com/occkit/occkit/adapters/sqlcas"
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
		if occhttp.NotModified(w, r, v) {
			return // 412 for a stale If-Match, 304 for a current If-None-Match
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

// A repository table's rows served with no handler code of their own: GET
// answers a row with its version as the ETag, a write applies only under
// an If-Match naming the version the client read, and a stale one is
// refused with 412 and the current ETag. The table is a sqlcas.Table on
// SQLite; a pgcas.Table or a dynamocas.Table serves the same way.
func ExampleRowHandler() {
	type profile struct {
		ID      string      `db:"id" json:"id"`
		Name    string      `db:"name" json:"name"`
		Version cas.Version `db:"version" json:"-"` // the ETag
	}
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "occhttp-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "app.db")+"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_txlock=immediate")
	if err != nil {
		panic(err)
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, `CREATE TABLE profiles (id TEXT PRIMARY KEY, name TEXT NOT NULL, version BIGINT NOT NULL)`); err != nil {
		panic(err)
	}
	profiles, err := sqlcas.NewTable[profile](db, sqlcas.TableConfig{Dialect: sqlcas.SQLite, Table: "profiles"})
	if err != nil {
		panic(err)
	}
	if err := profiles.CreateCounter(ctx); err != nil {
		panic(err)
	}

	mux := http.NewServeMux()
	mux.Handle("/profiles/{id}", occhttp.RowHandler(profiles, func(r *http.Request) (any, error) {
		return r.PathValue("id"), nil
	}))
	srv := httptest.NewServer(mux)
	defer srv.Close()

	send := func(method, body string, header ...string) {
		req, _ := http.NewRequest(method, srv.URL+"/profiles/ada", strings.NewReader(body))
		if len(header) == 2 {
			req.Header.Set(header[0], header[1])
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			panic(err)
		}
		defer resp.Body.Close()
		line := method + " " + resp.Status + " " + resp.Header.Get("ETag")
		if resp.StatusCode < 300 {
			b, _ := io.ReadAll(resp.Body)
			line += " " + string(b)
		}
		fmt.Println(strings.TrimSpace(line))
	}
	send("PUT", `{"id":"ada","name":"Ada"}`)                              // no precondition
	send("PUT", `{"id":"ada","name":"Ada"}`, "If-None-Match", "*")        // create only
	send("GET", "")                                                       // read: ETag "1"
	send("PATCH", `{"name":"Ada Lovelace"}`, "If-Match", occhttp.ETag(1)) // edit the version read
	send("PATCH", `{"name":"Ada King"}`, "If-Match", occhttp.ETag(1))     // a stale edit
	send("GET", "", "If-None-Match", occhttp.ETag(2))                     // the client's copy is current
	send("DELETE", "", "If-Match", occhttp.ETag(2))                       // delete the version read
	// Output:
	// PUT 428 Precondition Required
	// PUT 201 Created "1" {"id":"ada","name":"Ada"}
	// GET 200 OK "1" {"id":"ada","name":"Ada"}
	// PATCH 200 OK "2" {"id":"ada","name":"Ada Lovelace"}
	// PATCH 412 Precondition Failed "2"
	// GET 304 Not Modified "2"
	// DELETE 204 No Content
}
