package occhttp_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	_ "modernc.org/sqlite" // registers "sqlite"

	"github.com/occkit/occkit/adapters/sqlcas"
	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/cas/tabletest"
	"github.com/occkit/occkit/occ"
	"github.com/occkit/occkit/occhttp"
)

// A repository table is Rows as it is.
var _ occhttp.Rows[any, tabletest.Row] = (*sqlcas.Table[tabletest.Row])(nil)

// openSQLite opens a fresh SQLite file database, as sqlcas's tests do
// (WAL, a busy timeout, several connections).
func openSQLite(t testing.TB) *sql.DB {
	t.Helper()
	path := filepath.Join(t.TempDir(), "rows.db")
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)&_txlock=immediate")
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(8)
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// newRows returns an empty sqlcas table of tabletest.Row on SQLite.
func newRows(t testing.TB) *sqlcas.Table[tabletest.Row] {
	t.Helper()
	ctx := context.Background()
	db := openSQLite(t)
	if _, err := db.ExecContext(ctx, `CREATE TABLE rows_t (id TEXT NOT NULL PRIMARY KEY, n BIGINT NOT NULL, version BIGINT NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	tbl, err := sqlcas.NewTable[tabletest.Row](db, sqlcas.TableConfig{Dialect: sqlcas.SQLite, Table: "rows_t"})
	if err != nil {
		t.Fatal(err)
	}
	if err := tbl.CreateCounter(ctx); err != nil {
		t.Fatal(err)
	}
	return tbl
}

// serveRows serves /rows/{id} of tbl with RowHandler.
func serveRows(t *testing.T, tbl *sqlcas.Table[tabletest.Row], opts ...occhttp.Option) *httptest.Server {
	t.Helper()
	mux := http.NewServeMux()
	mux.Handle("/rows/{id}", occhttp.RowHandler(tbl, func(r *http.Request) (any, error) {
		return r.PathValue("id"), nil
	}, opts...))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

// stored returns the row id as the table holds it (Version 0: absent).
func stored(t *testing.T, tbl *sqlcas.Table[tabletest.Row], id string) tabletest.Row {
	t.Helper()
	row, err := tbl.Get(context.Background(), id)
	if err != nil && !errors.Is(err, cas.ErrNotFound) {
		t.Fatal(err)
	}
	return row
}

// unchanged fails unless row id is still want.
func unchanged(t *testing.T, tbl *sqlcas.Table[tabletest.Row], id string, want tabletest.Row, after string) {
	t.Helper()
	if got := stored(t, tbl, id); got != want {
		t.Fatalf("after %s: row %+v, want it unchanged at %+v", after, got, want)
	}
}

// row decodes a reply's body.
func (r reply) row(t *testing.T) tabletest.Row {
	t.Helper()
	var row tabletest.Row
	if err := json.Unmarshal([]byte(r.body), &row); err != nil {
		t.Fatalf("body %q: %v", r.body, err)
	}
	return row
}

// TestRowHandlerGet: GET answers the row with the strong ETag of its
// version, and 304 to an If-None-Match that names it.
func TestRowHandlerGet(t *testing.T) {
	tbl := newRows(t)
	srv := serveRows(t, tbl)
	call(t, srv, "GET", "/rows/a", "").want(t, "GET of a missing row", 404)

	in, err := tbl.Insert(context.Background(), tabletest.Row{ID: "a", N: 7})
	if err != nil {
		t.Fatal(err)
	}
	etag := occhttp.ETag(in.Version)
	r := call(t, srv, "GET", "/rows/a", "").want(t, "GET", 200)
	if r.etag != etag || r.row(t) != in {
		t.Fatalf("GET: ETag %q body %q, want %q and %+v", r.etag, r.body, etag, in)
	}
	if h := call(t, srv, "HEAD", "/rows/a", "").want(t, "HEAD", 200); h.etag != etag || h.body != "" {
		t.Fatalf("HEAD: ETag %q body %q", h.etag, h.body)
	}
	for _, inm := range []string{etag, "*", `"1", ` + etag, "W/" + etag} {
		r := call(t, srv, "GET", "/rows/a", "", "If-None-Match", inm).want(t, "GET If-None-Match: "+inm, 304)
		if r.etag != etag || r.body != "" {
			t.Fatalf("304: ETag %q body %q, want %q and no body", r.etag, r.body, etag)
		}
	}
	stale := occhttp.ETag(in.Version + 1000)
	if r := call(t, srv, "GET", "/rows/a", "", "If-None-Match", stale).want(t, "GET If-None-Match of another version", 200); r.etag != etag {
		t.Fatalf("ETag %q, want %q", r.etag, etag)
	}
	resp, err := srv.Client().Post(srv.URL+"/rows/a", "application/json", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if allow := resp.Header.Get("Allow"); resp.StatusCode != 405 || allow != "GET, HEAD, PUT, PATCH, DELETE" {
		t.Fatalf("POST: status %d, Allow %q; want 405 and the methods served", resp.StatusCode, allow)
	}
}

// TestRowHandlerGetIfMatch: a GET or HEAD evaluates If-Match too (RFC
// 9110 13.1.1), strongly and before If-None-Match: one that does not name
// the row's version is answered 412 with the current ETag, not the row
// or 304.
func TestRowHandlerGetIfMatch(t *testing.T) {
	tbl := newRows(t)
	srv := serveRows(t, tbl)
	call(t, srv, "GET", "/rows/a", "", "If-Match", `"1"`).want(t, "GET If-Match of a missing row", 404)

	ctx := context.Background()
	in, err := tbl.Insert(ctx, tabletest.Row{ID: "a", N: 1})
	if err != nil {
		t.Fatal(err)
	}
	row, err := tbl.Modify(ctx, any("a"), func(cur tabletest.Row, _ bool) (tabletest.Row, error) {
		cur.N++
		return cur, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	etag, old := occhttp.ETag(row.Version), occhttp.ETag(in.Version)
	for _, tt := range []struct {
		method  string
		headers []string
		status  int
	}{
		{"GET", []string{"If-Match", old}, 412},
		{"HEAD", []string{"If-Match", old}, 412},
		{"GET", []string{"If-Match", "W/" + etag}, 412}, // weak: never matches
		{"GET", []string{"If-Match", `"x"`}, 412},
		{"GET", []string{"If-Match", old, "If-None-Match", etag}, 412}, // If-Match first
		{"GET", []string{"If-Match", "7"}, 400},
		{"GET", []string{"If-Match", etag}, 200},
		{"HEAD", []string{"If-Match", etag}, 200},
		{"GET", []string{"If-Match", old + ", " + etag}, 200},
		{"GET", []string{"If-Match", "*"}, 200},
		{"GET", []string{"If-Match", etag, "If-None-Match", etag}, 304},
		{"GET", []string{"If-Match", "*", "If-None-Match", old}, 200},
	} {
		what := fmt.Sprintf("%s %v", tt.method, tt.headers)
		r := call(t, srv, tt.method, "/rows/a", "", tt.headers...).want(t, what, tt.status)
		if tt.status != 400 && r.etag != etag {
			t.Fatalf("%s: ETag %q, want the current %q", what, r.etag, etag)
		}
		if tt.status == 412 && strings.Contains(r.body, `"N"`) {
			t.Fatalf("%s: 412 carries the row: %q", what, r.body)
		}
	}
	unchanged(t, tbl, "a", row, "conditional GETs")
}

// TestRowHandlerBodyTooLarge: a body over http.MaxBytesHandler's limit,
// which RowHandler's documentation tells callers to set, is answered 413,
// not 400 as if it were malformed, and writes nothing.
func TestRowHandlerBodyTooLarge(t *testing.T) {
	tbl := newRows(t)
	mux := http.NewServeMux()
	mux.Handle("/rows/{id}", http.MaxBytesHandler(occhttp.RowHandler(tbl, func(r *http.Request) (any, error) {
		return r.PathValue("id"), nil
	}), 64))
	srv := httptest.NewServer(mux)
	defer srv.Close()

	in, err := tbl.Insert(context.Background(), tabletest.Row{ID: "a", N: 1})
	if err != nil {
		t.Fatal(err)
	}
	etag := occhttp.ETag(in.Version)
	pad := strings.Repeat(" ", 100)
	call(t, srv, "PUT", "/rows/a", `{"ID":"a","N":2}`+pad, "If-Match", etag).want(t, "PUT over the limit", 413)
	call(t, srv, "PATCH", "/rows/a", `{"N":2}`+pad, "If-Match", etag).want(t, "PATCH over the limit", 413)
	call(t, srv, "PUT", "/rows/b", `{"ID":"b","N":2}`+pad, "If-None-Match", "*").want(t, "create over the limit", 413)
	unchanged(t, tbl, "a", in, "writes over the limit")
	unchanged(t, tbl, "b", tabletest.Row{}, "a create over the limit")
	call(t, srv, "PUT", "/rows/a", `{"ID":"a","N":2}`, "If-Match", etag).want(t, "PUT under the limit", 200)
}

// TestRowHandlerWrites walks a row through every answer to a write:
// created under If-None-Match: *, edited under a matching If-Match with a
// new ETag each time, and left unchanged by a stale If-Match (412, the
// current ETag), a missing precondition (428) and a malformed one (400).
func TestRowHandlerWrites(t *testing.T) {
	tbl := newRows(t)
	srv := serveRows(t, tbl)

	call(t, srv, "PUT", "/rows/a", `{"ID":"a","N":1}`).want(t, "PUT without precondition", 428)
	call(t, srv, "PATCH", "/rows/a", `{"N":1}`).want(t, "PATCH without precondition", 428)
	call(t, srv, "PUT", "/rows/a", `{"ID":"a","N":1}`, "If-Match", `"1"`).want(t, "PUT If-Match on a missing row", 412)
	if r := call(t, srv, "PATCH", "/rows/a", `{"N":1}`, "If-Match", "*").want(t, "PATCH If-Match: * on a missing row", 412); r.etag != "" {
		t.Fatalf("412 for a missing row carries ETag %q", r.etag)
	}
	unchanged(t, tbl, "a", tabletest.Row{}, "refused writes of a missing row")

	// Create.
	r := call(t, srv, "PUT", "/rows/a", `{"ID":"a","N":1}`, "If-None-Match", "*").want(t, "create", 201)
	v1 := stored(t, tbl, "a")
	if v1.N != 1 || r.etag != occhttp.ETag(v1.Version) || r.row(t) != v1 {
		t.Fatalf("create: ETag %q body %q; stored %+v", r.etag, r.body, v1)
	}
	r = call(t, srv, "PUT", "/rows/a", `{"ID":"a","N":2}`, "If-None-Match", "*").want(t, "second create", 412)
	if r.etag != occhttp.ETag(v1.Version) {
		t.Fatalf("second create: 412 ETag %q, want %q", r.etag, occhttp.ETag(v1.Version))
	}
	unchanged(t, tbl, "a", v1, "a second create")

	// Edit at the version read.
	r = call(t, srv, "PATCH", "/rows/a", `{"N":2}`, "If-Match", occhttp.ETag(v1.Version)).want(t, "PATCH If-Match current", 200)
	v2 := stored(t, tbl, "a")
	if v2.N != 2 || v2.Version == v1.Version || r.etag != occhttp.ETag(v2.Version) || r.row(t) != v2 {
		t.Fatalf("PATCH: ETag %q body %q; stored %+v (was %+v)", r.etag, r.body, v2, v1)
	}

	// Stale, missing and malformed preconditions change nothing.
	for _, tt := range []struct {
		method, body string
		headers      []string
		status       int
	}{
		{"PUT", `{"ID":"a","N":9}`, []string{"If-Match", occhttp.ETag(v1.Version)}, 412},
		{"PATCH", `{"N":9}`, []string{"If-Match", occhttp.ETag(v1.Version)}, 412},
		{"PATCH", `{"N":9}`, []string{"If-Match", `W/` + occhttp.ETag(v2.Version)}, 412}, // weak: never matches
		{"DELETE", ``, []string{"If-Match", occhttp.ETag(v1.Version)}, 412},
		{"PUT", `{"ID":"a","N":9}`, nil, 428},
		{"PATCH", `{"N":9}`, nil, 428},
		{"DELETE", ``, nil, 428},
		{"PUT", `{"ID":"a","N":9}`, []string{"If-Match", "7"}, 400},
		{"DELETE", ``, []string{"If-None-Match", "*"}, 400},
		{"PUT", `{"ID":"b","N":9}`, []string{"If-Match", occhttp.ETag(v2.Version)}, 400}, // another key
		{"PATCH", `{"ID":"b"}`, []string{"If-Match", occhttp.ETag(v2.Version)}, 400},
		{"PATCH", `{"N":"nine"}`, []string{"If-Match", occhttp.ETag(v2.Version)}, 400},
	} {
		what := fmt.Sprintf("%s %s %v", tt.method, tt.body, tt.headers)
		r := call(t, srv, tt.method, "/rows/a", tt.body, tt.headers...).want(t, what, tt.status)
		if tt.status == 412 && r.etag != occhttp.ETag(v2.Version) {
			t.Fatalf("%s: 412 ETag %q, want the current %q", what, r.etag, occhttp.ETag(v2.Version))
		}
		unchanged(t, tbl, "a", v2, what)
	}

	// Replace, edit under If-Match: *, delete at the current version.
	r = call(t, srv, "PUT", "/rows/a", `{"ID":"a","N":3,"Version":99}`, "If-Match", `"1", `+occhttp.ETag(v2.Version)).want(t, "PUT If-Match list", 200)
	v3 := stored(t, tbl, "a")
	if v3.N != 3 || v3.Version == v2.Version || v3.Version == 99 || r.etag != occhttp.ETag(v3.Version) {
		t.Fatalf("PUT: ETag %q; stored %+v", r.etag, v3)
	}
	call(t, srv, "PATCH", "/rows/a", `{"N":4}`, "If-Match", "*").want(t, "PATCH If-Match: *", 200)
	v4 := stored(t, tbl, "a")
	call(t, srv, "DELETE", "/rows/a", "", "If-Match", occhttp.ETag(v4.Version)).want(t, "DELETE If-Match current", 204)
	call(t, srv, "GET", "/rows/a", "").want(t, "GET after DELETE", 404)

	// A PATCH creating under If-None-Match: * gets the key from the URL.
	r = call(t, srv, "PATCH", "/rows/b", `{"N":5}`, "If-None-Match", "*").want(t, "PATCH create", 201)
	if b := stored(t, tbl, "b"); b.ID != "b" || b.N != 5 || r.etag != occhttp.ETag(b.Version) {
		t.Fatalf("PATCH create: ETag %q; stored %+v", r.etag, b)
	}
}

// TestRowHandlerUnconditional: with AllowUnconditional, writes without a
// precondition go through (last writer wins).
func TestRowHandlerUnconditional(t *testing.T) {
	tbl := newRows(t)
	srv := serveRows(t, tbl, occhttp.AllowUnconditional())
	call(t, srv, "PUT", "/rows/a", `{"ID":"a","N":1}`).want(t, "unconditional PUT creating", 201)
	call(t, srv, "PUT", "/rows/a", `{"ID":"a","N":2}`).want(t, "unconditional PUT replacing", 200)
	r := call(t, srv, "PATCH", "/rows/a", `{"N":3}`).want(t, "unconditional PATCH", 200)
	if a := stored(t, tbl, "a"); a.N != 3 || r.etag != occhttp.ETag(a.Version) {
		t.Fatalf("ETag %q; stored %+v", r.etag, a)
	}
	call(t, srv, "DELETE", "/rows/a", "").want(t, "unconditional DELETE", 204)
	call(t, srv, "DELETE", "/rows/a", "").want(t, "unconditional DELETE of a missing row", 404)
}

// TestRowHandlerConcurrentWriters: writers that all hold the same ETag
// send their edits at once. Exactly one wins; every other gets 412 with
// the winner's ETag, and the row holds the winner's edit; also when the
// handler's WithRetry gives the server's retries a combiner and a version
// cache (UpdateRow keeps them out of If-Match writes).
func TestRowHandlerConcurrentWriters(t *testing.T) {
	for _, tt := range []struct {
		name string
		opts func(tbl *sqlcas.Table[tabletest.Row]) []occhttp.Option
	}{
		{"defaults", func(*sqlcas.Table[tabletest.Row]) []occhttp.Option { return nil }},
		{"combined and cached", func(tbl *sqlcas.Table[tabletest.Row]) []occhttp.Option {
			return []occhttp.Option{occhttp.WithRetry(occ.WithCombiner(occ.NewCombiner()), occ.WithCache(tbl.NewCache(16)))}
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tbl := newRows(t)
			srv := serveRows(t, tbl, tt.opts(tbl)...)
			call(t, srv, "PUT", "/rows/hot", `{"ID":"hot","N":0}`, "If-None-Match", "*").want(t, "create", 201)

			const writers = 8
			for round := range 10 {
				read := call(t, srv, "GET", "/rows/hot", "").want(t, "GET", 200)
				var (
					start   = make(chan struct{})
					wg      sync.WaitGroup
					replies [writers]reply
				)
				for i := range writers {
					wg.Go(func() {
						<-start
						replies[i] = call(t, srv, "PATCH", "/rows/hot", fmt.Sprintf(`{"N":%d}`, round*100+i), "If-Match", read.etag)
					})
				}
				close(start)
				wg.Wait()

				winner := -1
				for i, r := range replies {
					switch r.status {
					case 200:
						if winner >= 0 {
							t.Fatalf("round %d: writers %d and %d both won with ETag %s", round, winner, i, read.etag)
						}
						winner = i
					case 412:
					default:
						t.Fatalf("round %d: writer %d: status %d (%s)", round, i, r.status, r.body)
					}
				}
				if winner < 0 {
					t.Fatalf("round %d: no writer won", round)
				}
				for i, r := range replies {
					if i != winner && r.etag != replies[winner].etag {
						t.Fatalf("round %d: loser %d's 412 carries ETag %q, want the winner's %q", round, i, r.etag, replies[winner].etag)
					}
				}
				got := stored(t, tbl, "hot")
				if got.N != int64(round*100+winner) || occhttp.ETag(got.Version) != replies[winner].etag {
					t.Fatalf("round %d: stored %+v, want the winner's edit N=%d at ETag %s", round, got, round*100+winner, replies[winner].etag)
				}
			}
		})
	}
}

// TestUpdateRow checks the errors UpdateRow returns, and that edit never
// runs on a row at a version the precondition does not name.
func TestUpdateRow(t *testing.T) {
	ctx := context.Background()
	tbl := newRows(t)
	in, err := tbl.Insert(ctx, tabletest.Row{ID: "a", N: 1})
	if err != nil {
		t.Fatal(err)
	}
	calls := 0
	inc := func(cur tabletest.Row, exists bool) (tabletest.Row, error) {
		calls++
		cur.N++
		return cur, nil
	}

	_, _, err = occhttp.UpdateRow(ctx, tbl, any("a"), occhttp.IfMatch(in.Version+1000), inc)
	var pe *occhttp.PreconditionError
	if !errors.As(err, &pe) || pe.Current != in.Version || pe.Key != "a" ||
		!errors.Is(err, occhttp.ErrPreconditionFailed) || !errors.Is(err, cas.ErrConflict) || occhttp.Status(err) != 412 {
		t.Fatalf("stale If-Match: %v, want a *PreconditionError at version %d (412)", err, in.Version)
	}
	if calls != 0 {
		t.Fatalf("edit ran %d times on a row at another version", calls)
	}
	unchanged(t, tbl, "a", in, "a stale If-Match")

	_, _, err = occhttp.UpdateRow(ctx, tbl, any("a"), occhttp.Precondition{}, inc)
	if !errors.Is(err, occhttp.ErrPreconditionRequired) || calls != 0 {
		t.Fatalf("no precondition: %v (edit ran %d times), want ErrPreconditionRequired", err, calls)
	}
	_, _, err = occhttp.UpdateRow(ctx, tbl, any("a"), occhttp.Precondition{Kind: 99}, inc)
	if !errors.Is(err, occhttp.ErrBadPrecondition) {
		t.Fatalf("unknown kind: %v, want ErrBadPrecondition", err)
	}
	errEdit := errors.New("refused by edit")
	_, _, err = occhttp.UpdateRow(ctx, tbl, any("a"), occhttp.IfMatch(in.Version), func(tabletest.Row, bool) (tabletest.Row, error) {
		return tabletest.Row{}, errEdit
	})
	if !errors.Is(err, errEdit) {
		t.Fatalf("edit's error: %v", err)
	}
	unchanged(t, tbl, "a", in, "edit's error")

	row, v, err := occhttp.UpdateRow(ctx, tbl, any("a"), occhttp.IfMatch(in.Version), inc)
	if err != nil || row.N != 2 || v == in.Version || v != row.Version || calls != 1 {
		t.Fatalf("If-Match current: %+v, %d, %v (edit ran %d times)", row, v, err, calls)
	}
	unchanged(t, tbl, "a", row, "If-Match current")

	_, _, err = occhttp.UpdateRow(ctx, tbl, any("b"), occhttp.Precondition{Kind: occhttp.CreateOnly}, func(cur tabletest.Row, exists bool) (tabletest.Row, error) {
		if exists || cur.ID != "b" {
			t.Errorf("create: edit got %+v, exists %v; want the absent row with its key", cur, exists)
		}
		cur.N = 10
		return cur, nil
	})
	if err != nil || stored(t, tbl, "b").N != 10 {
		t.Fatalf("create: %v, stored %+v", err, stored(t, tbl, "b"))
	}
}

// TestDeleteRow checks DeleteRow's refusals and that they delete nothing.
func TestDeleteRow(t *testing.T) {
	ctx := context.Background()
	tbl := newRows(t)
	in, err := tbl.Insert(ctx, tabletest.Row{ID: "a", N: 1})
	if err != nil {
		t.Fatal(err)
	}
	var pe *occhttp.PreconditionError
	for _, p := range []occhttp.Precondition{
		occhttp.IfMatch(in.Version + 1000),                                                    // one version: the table's conflict says the current one
		{Kind: occhttp.MatchVersion, Versions: []cas.Version{in.Version + 1, in.Version + 2}}, // a list: read, then compare
		{Kind: occhttp.MatchVersion},                                                          // only weak tags: matches nothing
	} {
		err := occhttp.DeleteRow(ctx, tbl, any("a"), p)
		if !errors.As(err, &pe) || pe.Current != in.Version {
			t.Fatalf("DeleteRow %s: %v, want a *PreconditionError at version %d", p, err, in.Version)
		}
		unchanged(t, tbl, "a", in, "DeleteRow "+p.String())
	}
	if err := occhttp.DeleteRow(ctx, tbl, any("a"), occhttp.Precondition{}); !errors.Is(err, occhttp.ErrPreconditionRequired) {
		t.Fatalf("no precondition: %v", err)
	}
	p := occhttp.Precondition{Kind: occhttp.MatchVersion, Versions: []cas.Version{in.Version + 1, in.Version}}
	if err := occhttp.DeleteRow(ctx, tbl, any("a"), p); err != nil {
		t.Fatalf("DeleteRow %s: %v", p, err)
	}
	if err := occhttp.DeleteRow(ctx, tbl, any("a"), occhttp.IfMatch(in.Version)); !errors.As(err, &pe) || pe.Current != 0 {
		t.Fatalf("DeleteRow of a deleted row: %v, want a *PreconditionError with no current version", err)
	}
	if err := occhttp.DeleteRow(ctx, tbl, any("a"), occhttp.Precondition{}, occhttp.AllowUnconditional()); !errors.Is(err, cas.ErrNotFound) {
		t.Fatalf("unconditional DeleteRow of a deleted row: %v, want cas.ErrNotFound", err)
	}
}

// TestRowHandlerKeyError: the key function's error is answered with
// WriteError, before the table is asked anything.
func TestRowHandlerKeyError(t *testing.T) {
	tbl := newRows(t)
	h := occhttp.RowHandler(tbl, func(r *http.Request) (any, error) {
		return nil, &cas.KeyError{Op: "route", Key: r.URL.Path, Err: cas.ErrInvalidKey}
	})
	for _, method := range []string{"GET", "PUT", "DELETE"} {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(method, "/rows/x", strings.NewReader(`{"ID":"x"}`)))
		if w.Code != http.StatusBadRequest {
			t.Errorf("%s with a malformed key: status %d, want 400", method, w.Code)
		}
	}
}
