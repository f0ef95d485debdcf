package occhttp_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/occkit/occkit/adapters/memcas"
	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/occ"
	"github.com/occkit/occkit/occhttp"
)

type reply struct {
	status int
	etag   string
	body   string
}

// call sends one request; headers are name/value pairs. It may run on
// any goroutine: a failed request is reported with t.Error and answers
// status 0.
func call(t *testing.T, srv *httptest.Server, method, path, body string, headers ...string) reply {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, srv.URL+path, rd)
	if err != nil {
		t.Error(err)
		return reply{}
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Add(headers[i], headers[i+1])
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Error(err)
		return reply{}
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return reply{status: resp.StatusCode, etag: resp.Header.Get("ETag"), body: string(b)}
}

func (r reply) want(t *testing.T, what string, status int) reply {
	t.Helper()
	if r.status != status {
		t.Fatalf("%s: status %d, want %d (body %q)", what, r.status, status, r.body)
	}
	return r
}

func TestETag(t *testing.T) {
	for _, v := range []cas.Version{1, 7, 1 << 63, ^cas.Version(0)} {
		got, err := occhttp.ParseETag(occhttp.ETag(v))
		if err != nil || got != v {
			t.Errorf("ParseETag(ETag(%d)) = %d, %v", v, got, err)
		}
	}
	if occhttp.ETag(0) != "" {
		t.Errorf("ETag(0) = %q, want empty", occhttp.ETag(0))
	}
	for _, bad := range []string{``, `7`, `"7`, `W/"7"`, `"0"`, `"07"`, `"+7"`, `"abc"`, `""`, `"18446744073709551616"`, `"7"x`} {
		if v, err := occhttp.ParseETag(bad); !errors.Is(err, occhttp.ErrBadPrecondition) {
			t.Errorf("ParseETag(%q) = %d, %v; want ErrBadPrecondition", bad, v, err)
		}
	}
}

func TestReadPrecondition(t *testing.T) {
	tests := []struct {
		name    string
		headers []string
		want    string // Precondition.String(), or "bad"
	}{
		{"none", nil, "none"},
		{"one version", []string{"If-Match", `"7"`}, `If-Match: "7"`},
		{"list", []string{"If-Match", `"7", "9"`}, `If-Match: "7", "9"`},
		{"list over two lines", []string{"If-Match", `"7"`, "If-Match", `"9"`}, `If-Match: "7", "9"`},
		{"weak and foreign tags match nothing", []string{"If-Match", `W/"7", "x,y", "8"`}, `If-Match: "8"`},
		{"any", []string{"If-Match", "*"}, "If-Match: *"},
		{"create only", []string{"If-None-Match", "*"}, "If-None-Match: *"},
		{"unquoted", []string{"If-Match", "7"}, "bad"},
		{"unterminated", []string{"If-Match", `"7`}, "bad"},
		{"star and tag", []string{"If-Match", `*, "7"`}, "bad"},
		{"empty list", []string{"If-Match", " , "}, "bad"},
		{"both headers", []string{"If-Match", `"7"`, "If-None-Match", "*"}, "bad"},
		{"If-None-Match tag on a write", []string{"If-None-Match", `"7"`}, "bad"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodPut, "/", nil)
			for i := 0; i+1 < len(tt.headers); i += 2 {
				r.Header.Add(tt.headers[i], tt.headers[i+1])
			}
			p, err := occhttp.ReadPrecondition(r)
			got := p.String()
			if err != nil {
				if !errors.Is(err, occhttp.ErrBadPrecondition) {
					t.Fatalf("error %v does not match ErrBadPrecondition", err)
				}
				got = "bad"
			}
			if got != tt.want {
				t.Fatalf("got %q (err %v), want %q", got, err, tt.want)
			}
		})
	}
}

// TestStatuses walks one resource through every answer of a server that
// requires preconditions.
func TestStatuses(t *testing.T) {
	store := cas.NewTyped(memcas.New(), cas.JSON[note]())
	srv := httptest.NewServer(notes(store))
	defer srv.Close()

	call(t, srv, "GET", "/notes/a", "").want(t, "GET of a missing note", 404)
	call(t, srv, "PUT", "/notes/a", `{"text":"x"}`).want(t, "PUT without precondition", 428)
	call(t, srv, "PATCH", "/notes/a", `{"text":"x"}`).want(t, "PATCH without precondition", 428)
	call(t, srv, "DELETE", "/notes/a", "").want(t, "DELETE without precondition", 428)
	call(t, srv, "PUT", "/notes/a", `{"text":"x"}`, "If-Match", `"1"`).want(t, "PUT If-Match on a missing note", 412)
	call(t, srv, "PATCH", "/notes/a", `{"text":"x"}`, "If-Match", `*`).want(t, "PATCH If-Match: * on a missing note", 412)
	call(t, srv, "PUT", "/notes/a", `{"text":"x"}`, "If-Match", `7`).want(t, "malformed If-Match", 400)

	created := call(t, srv, "PUT", "/notes/a", `{"text":"first"}`, "If-None-Match", "*").want(t, "create", 201)
	v1, err := occhttp.ParseETag(created.etag)
	if err != nil {
		t.Fatalf("create: ETag %q: %v", created.etag, err)
	}
	again := call(t, srv, "PUT", "/notes/a", `{"text":"again"}`, "If-None-Match", "*").want(t, "second create", 412)
	if again.etag != created.etag {
		t.Fatalf("second create: ETag %q, want the current %q", again.etag, created.etag)
	}
	call(t, srv, "DELETE", "/notes/a", "", "If-None-Match", "*").want(t, "DELETE If-None-Match: *", 400)

	got := call(t, srv, "GET", "/notes/a", "").want(t, "GET", 200)
	if got.etag != created.etag {
		t.Fatalf("GET: ETag %q, want %q", got.etag, created.etag)
	}
	call(t, srv, "GET", "/notes/a", "", "If-None-Match", created.etag).want(t, "GET If-None-Match current", 304)
	call(t, srv, "GET", "/notes/a", "", "If-None-Match", `W/`+created.etag).want(t, "GET If-None-Match weak current", 304)
	call(t, srv, "GET", "/notes/a", "", "If-None-Match", `"999"`).want(t, "GET If-None-Match other", 200)
	if r := call(t, srv, "GET", "/notes/a", "", "If-Match", `"999"`).want(t, "GET If-Match other", 412); r.etag != created.etag {
		t.Fatalf("GET If-Match other: ETag %q, want the current %q", r.etag, created.etag)
	}
	call(t, srv, "GET", "/notes/a", "", "If-Match", created.etag).want(t, "GET If-Match current", 200)

	put := call(t, srv, "PUT", "/notes/a", `{"text":"second"}`, "If-Match", created.etag).want(t, "PUT If-Match current", 200)
	v2, _ := occhttp.ParseETag(put.etag)
	if v2 <= v1 {
		t.Fatalf("PUT: new version %d not after %d", v2, v1)
	}
	stale := call(t, srv, "PUT", "/notes/a", `{"text":"stale"}`, "If-Match", created.etag).want(t, "PUT If-Match stale", 412)
	if stale.etag != put.etag {
		t.Fatalf("stale PUT: ETag %q, want the current %q", stale.etag, put.etag)
	}
	call(t, srv, "PUT", "/notes/a", `{"text":"weak"}`, "If-Match", `W/`+put.etag).want(t, "PUT If-Match weak", 412)
	call(t, srv, "PATCH", "/notes/a", `{"by":"x","text":""}`, "If-Match", put.etag).want(t, "PATCH refused by the handler", 422)
	patched := call(t, srv, "PATCH", "/notes/a", `{"by":"ada","text":"third"}`, "If-Match", `"1", `+put.etag).want(t, "PATCH If-Match list", 200)
	call(t, srv, "PATCH", "/notes/a", `{"by":"bob","text":"any"}`, "If-Match", "*").want(t, "PATCH If-Match: *", 200)
	final := call(t, srv, "GET", "/notes/a", "").want(t, "GET", 200)
	var n note
	if err := json.Unmarshal([]byte(final.body), &n); err != nil || n.Text != "any" || strings.Join(n.Edits, ",") != "ada,bob" {
		t.Fatalf("note %+v (%v), want text any edited by ada,bob", n, err)
	}

	call(t, srv, "DELETE", "/notes/a", "", "If-Match", patched.etag).want(t, "DELETE If-Match stale", 412)
	call(t, srv, "DELETE", "/notes/a", "", "If-Match", `"1", `+final.etag).want(t, "DELETE If-Match list", 204)
	call(t, srv, "GET", "/notes/a", "").want(t, "GET after DELETE", 404)
	call(t, srv, "DELETE", "/notes/a", "", "If-Match", final.etag).want(t, "DELETE of a deleted note", 412)
	call(t, srv, "DELETE", "/notes/a", "", "If-Match", "*").want(t, "DELETE If-Match: * of a deleted note", 412)

	// Re-created, the note gets a version it never had: an old ETag can
	// never match again.
	re := call(t, srv, "PUT", "/notes/a", `{"text":"new"}`, "If-None-Match", "*").want(t, "re-create", 201)
	if re.etag == created.etag || re.etag == final.etag {
		t.Fatalf("re-created note reuses ETag %s", re.etag)
	}
	call(t, srv, "PUT", "/notes/a", `{"text":"old"}`, "If-Match", final.etag).want(t, "PUT with a pre-delete ETag", 412)
}

// TestUnconditionalAllowed: with AllowUnconditional a write without
// precondition goes through, missing resources answer 404, and a write
// that keeps conflicting after the server's retries answers 409.
func TestUnconditionalAllowed(t *testing.T) {
	mem := memcas.New()
	meddler := &meddlingStore{Store: mem}
	store := cas.NewTyped[note](meddler, cas.JSON[note]())
	srv := httptest.NewServer(notes(store, occhttp.AllowUnconditional(), occhttp.WithRetry(occ.WithMaxAttempts(3))))
	defer srv.Close()

	call(t, srv, "DELETE", "/notes/b", "").want(t, "unconditional DELETE of a missing note", 404)
	call(t, srv, "PUT", "/notes/b", `{"text":"x"}`).want(t, "unconditional PUT creating", 201)
	call(t, srv, "PUT", "/notes/b", `{"text":"y"}`).want(t, "unconditional PUT replacing", 200)
	call(t, srv, "PATCH", "/notes/b", `{"by":"ada","text":"z"}`).want(t, "unconditional PATCH", 200)

	meddler.meddle(true) // every write now finds the note changed under it
	call(t, srv, "PATCH", "/notes/b", `{"by":"bob","text":"w"}`).want(t, "unconditional PATCH conflicting on every attempt", 409)
	r := call(t, srv, "PATCH", "/notes/b", `{"by":"bob","text":"w"}`, "If-Match", "*").want(t, "If-Match: * PATCH conflicting on every attempt", 409)
	if r.etag != "" {
		t.Fatalf("409 carries ETag %q", r.etag)
	}
	call(t, srv, "DELETE", "/notes/b", "").want(t, "unconditional DELETE conflicting on every attempt", 409)
	meddler.meddle(false)
	call(t, srv, "DELETE", "/notes/b", "").want(t, "unconditional DELETE", 204)
}

// meddlingStore is a memcas store where, when meddling, another writer
// rewrites the key just before each conditional write: every write meets a
// conflict, as on a key hotter than the retries can win.
type meddlingStore struct {
	cas.Store
	mu sync.Mutex
	on bool
}

func (m *meddlingStore) meddle(on bool) { m.mu.Lock(); m.on = on; m.mu.Unlock() }

func (m *meddlingStore) interfere(ctx context.Context, key string) {
	m.mu.Lock()
	on := m.on
	m.mu.Unlock()
	if !on {
		return
	}
	if it, err := m.Store.Get(ctx, key); err == nil {
		_, _ = m.Store.CompareAndSwap(ctx, key, it.Version, it.Value)
	}
}

func (m *meddlingStore) CompareAndSwap(ctx context.Context, key string, expected cas.Version, value []byte) (cas.Version, error) {
	m.interfere(ctx, key)
	return m.Store.CompareAndSwap(ctx, key, expected, value)
}

func (m *meddlingStore) CompareAndDelete(ctx context.Context, key string, expected cas.Version) error {
	m.interfere(ctx, key)
	return m.Store.CompareAndDelete(ctx, key, expected)
}

// TestTwoClientsRaceAnEdit: two clients read the same version and send
// their edits at once. Exactly one wins; the other gets 412 with the
// winner's ETag, reads again, redoes its edit and succeeds: both edits are
// kept, in every round.
func TestTwoClientsRaceAnEdit(t *testing.T) {
	store := cas.NewTyped(memcas.New(), cas.JSON[note]())
	srv := httptest.NewServer(notes(store))
	defer srv.Close()

	for round := range 50 {
		path := fmt.Sprintf("/notes/race-%d", round)
		call(t, srv, "PUT", path, `{"text":"draft"}`, "If-None-Match", "*").want(t, "create", 201)
		read := call(t, srv, "GET", path, "").want(t, "GET", 200)

		var (
			start   = make(chan struct{})
			wg      sync.WaitGroup
			replies [2]reply
		)
		for i, who := range []string{"ada", "bob"} {
			wg.Go(func() {
				<-start
				replies[i] = call(t, srv, "PATCH", path, fmt.Sprintf(`{"by":%q,"text":"by %s"}`, who, who), "If-Match", read.etag)
			})
		}
		close(start)
		wg.Wait()

		winner, loser := 0, 1
		if replies[0].status != 200 {
			winner, loser = 1, 0
		}
		replies[winner].want(t, "winner", 200)
		replies[loser].want(t, "loser", 412)
		if replies[loser].etag != replies[winner].etag {
			t.Fatalf("round %d: loser's 412 carries ETag %q, want the winner's %q", round, replies[loser].etag, replies[winner].etag)
		}

		// The loser reads what the winner wrote and redoes its edit on it.
		who := []string{"ada", "bob"}[loser]
		fresh := call(t, srv, "GET", path, "").want(t, "loser's re-read", 200)
		if fresh.etag != replies[winner].etag {
			t.Fatalf("round %d: re-read ETag %q, want %q", round, fresh.etag, replies[winner].etag)
		}
		call(t, srv, "PATCH", path, fmt.Sprintf(`{"by":%q,"text":"by %s"}`, who, who), "If-Match", fresh.etag).want(t, "loser's retry", 200)

		var n note
		final := call(t, srv, "GET", path, "").want(t, "GET", 200)
		if err := json.Unmarshal([]byte(final.body), &n); err != nil {
			t.Fatal(err)
		}
		want := []string{"ada", "bob"}[winner] + "," + who
		if got := strings.Join(n.Edits, ","); got != want {
			t.Fatalf("round %d: edits %q, want %q (an edit was lost)", round, got, want)
		}
	}
}

// TestConcurrentEditorsLoseNothing: editors that each append their edits
// with GET, PATCH If-Match, and on 412 GET again, end with every edit kept.
func TestConcurrentEditorsLoseNothing(t *testing.T) {
	store := cas.NewTyped(memcas.New(), cas.JSON[note]())
	srv := httptest.NewServer(notes(store))
	defer srv.Close()
	call(t, srv, "PUT", "/notes/shared", `{"text":"start"}`, "If-None-Match", "*").want(t, "create", 201)

	const editors, edits = 6, 15
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		refused int
	)
	for e := range editors {
		wg.Go(func() {
			for i := range edits {
				for try := 0; ; try++ {
					if try == 1000 {
						t.Errorf("edit e%d-%d: still refused after %d tries", e, i, try)
						return
					}
					cur := call(t, srv, "GET", "/notes/shared", "")
					r := call(t, srv, "PATCH", "/notes/shared", fmt.Sprintf(`{"by":"e%d-%d","text":"x"}`, e, i), "If-Match", cur.etag)
					if r.status == 200 {
						break
					}
					if r.status != 412 {
						t.Errorf("PATCH: status %d (%s)", r.status, r.body)
						return
					}
					mu.Lock()
					refused++
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	var n note
	final := call(t, srv, "GET", "/notes/shared", "").want(t, "GET", 200)
	if err := json.Unmarshal([]byte(final.body), &n); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, e := range n.Edits {
		if seen[e] {
			t.Fatalf("edit %s applied twice", e)
		}
		seen[e] = true
	}
	if len(seen) != editors*edits {
		t.Fatalf("%d edits kept, want %d (%d refused with 412)", len(seen), editors*edits, refused)
	}
	t.Logf("%d edits kept, %d stale edits refused with 412 and redone", len(seen), refused)
}

func TestStatus(t *testing.T) {
	conflict := &cas.ConflictError{Key: "k", Expected: 1}
	tests := []struct {
		err  error
		want int
	}{
		{nil, 200},
		{fmt.Errorf("x: %w", occhttp.ErrBadPrecondition), 400},
		{&cas.KeyError{Op: "get", Key: "", Err: cas.ErrInvalidKey}, 400},
		{&occhttp.PreconditionError{Key: "k", Current: 3, Err: conflict}, 412},
		{fmt.Errorf("x: %w", occhttp.ErrPreconditionRequired), 428},
		{fmt.Errorf("get: %w", cas.ErrNotFound), 404},
		{&occ.GiveUpError{Reason: occ.ErrAttemptsExhausted, Attempts: 3, Last: conflict}, 409},
		{&occ.GiveUpError{Reason: occ.ErrBudgetExhausted, Attempts: 3, Last: conflict}, 503},
		{&cas.KeyError{Op: "compare-and-swap", Key: "k", Err: cas.ErrTooLarge}, 413},
		{&http.MaxBytesError{Limit: 64}, 413},
		{fmt.Errorf("read body: %w", &http.MaxBytesError{Limit: 64}), 413},
		{context.DeadlineExceeded, 503},
		{&cas.AmbiguousError{Op: "compare-and-swap", Key: "k"}, 500},
		{errors.New("boom"), 500},
	}
	for _, tt := range tests {
		if got := occhttp.Status(tt.err); got != tt.want {
			t.Errorf("Status(%v) = %d, want %d", tt.err, got, tt.want)
		}
	}
	rec := httptest.NewRecorder()
	occhttp.WriteError(rec, &occhttp.PreconditionError{Key: "k", Current: 3})
	if rec.Code != 412 || rec.Header().Get("ETag") != `"3"` {
		t.Errorf("WriteError(412): %d, ETag %q", rec.Code, rec.Header().Get("ETag"))
	}
	rec = httptest.NewRecorder()
	occhttp.WriteError(rec, errors.New("secret detail"))
	if rec.Code != 500 || strings.Contains(rec.Body.String(), "secret") {
		t.Errorf("WriteError(500): %d %q", rec.Code, rec.Body.String())
	}
}

// TestNotModified: a GET or HEAD's If-Match is evaluated first, strongly,
// and a failing one is answered 412 with the current ETag; only then does
// If-None-Match, compared weakly, answer 304.
func TestNotModified(t *testing.T) {
	tests := []struct {
		method  string
		headers []string
		status  int // 0: not answered
	}{
		{"GET", nil, 0},
		{"GET", []string{"If-Match", `"3"`}, 0},
		{"GET", []string{"If-Match", `"1", "3"`}, 0},
		{"GET", []string{"If-Match", `*`}, 0},
		{"GET", []string{"If-Match", `"1"`}, 412},
		{"HEAD", []string{"If-Match", `"1"`}, 412},
		{"GET", []string{"If-Match", `W/"3"`}, 412},
		{"GET", []string{"If-Match", `3`}, 400},
		{"GET", []string{"If-Match", `"1"`, "If-None-Match", `"3"`}, 412},
		{"GET", []string{"If-Match", `"3"`, "If-None-Match", `W/"3"`}, 304},
		{"GET", []string{"If-Match", `"3"`, "If-None-Match", `"1"`}, 0},
		{"GET", []string{"If-None-Match", `"3"`}, 304},
		{"GET", []string{"If-None-Match", `3`}, 0},
		{"PUT", []string{"If-Match", `"1"`}, 0}, // writes: ReadPrecondition
	}
	for _, tt := range tests {
		r := httptest.NewRequest(tt.method, "/notes/a", nil)
		for i := 0; i+1 < len(tt.headers); i += 2 {
			r.Header.Add(tt.headers[i], tt.headers[i+1])
		}
		w := httptest.NewRecorder()
		answered := occhttp.NotModified(w, r, 3)
		what := fmt.Sprintf("%s %v", tt.method, tt.headers)
		switch {
		case answered != (tt.status != 0):
			t.Errorf("%s: answered %v, want status %d", what, answered, tt.status)
		case answered && w.Code != tt.status:
			t.Errorf("%s: status %d, want %d", what, w.Code, tt.status)
		case answered && tt.status != 400 && w.Header().Get("ETag") != `"3"`:
			t.Errorf("%s: ETag %q, want the current \"3\"", what, w.Header().Get("ETag"))
		}
	}
	w := httptest.NewRecorder()
	r := httptest.NewRequest("GET", "/notes/a", nil)
	r.Header.Set("If-Match", `"1"`)
	if occhttp.NotModified(w, r, 0) {
		t.Errorf("If-Match on a missing resource answered %d, want it left to the handler (404)", w.Code)
	}
}

// TestRequirePreconditions: the middleware refuses blind writes before the
// handler (which here would accept them) runs.
func TestRequirePreconditions(t *testing.T) {
	store := cas.NewTyped(memcas.New(), cas.JSON[note]())
	srv := httptest.NewServer(occhttp.RequirePreconditions(notes(store, occhttp.AllowUnconditional())))
	defer srv.Close()
	call(t, srv, "PUT", "/notes/m", `{"text":"x"}`).want(t, "PUT without precondition", 428)
	call(t, srv, "PATCH", "/notes/m", `{"text":"x"}`).want(t, "PATCH without precondition", 428)
	call(t, srv, "DELETE", "/notes/m", "").want(t, "DELETE without precondition", 428)
	call(t, srv, "PUT", "/notes/m", `{"text":"x"}`, "If-Match", "x").want(t, "malformed If-Match", 400)
	if _, _, err := store.Get(context.Background(), "notes/m"); !errors.Is(err, cas.ErrNotFound) {
		t.Fatalf("a refused write reached the store: %v", err)
	}
	call(t, srv, "PUT", "/notes/m", `{"text":"x"}`, "If-None-Match", "*").want(t, "create", 201)
	call(t, srv, "GET", "/notes/m", "").want(t, "GET", 200)
}
