package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/occkit/occkit/adapters/memcas"
	"github.com/occkit/occkit/adapters/pgcas"
	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/hybrid"
	"github.com/occkit/occkit/internal/pgtest"
)

type reply struct {
	status int
	etag   string
	body   string
}

func call(t *testing.T, url, method, body string, headers ...string) reply {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, url, strings.NewReader(body))
	if err != nil {
		t.Error(err)
		return reply{}
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Error(err)
		return reply{}
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return reply{resp.StatusCode, resp.Header.Get("ETag"), string(b)}
}

func (r reply) want(t *testing.T, what string, status int) reply {
	t.Helper()
	if r.status != status {
		t.Fatalf("%s: status %d, want %d (%s)", what, r.status, status, r.body)
	}
	return r
}

// TestAPI walks the API through its answers.
func TestAPI(t *testing.T) {
	svc := newService(memcas.New(), modeOCC, nil)
	srv := httptest.NewServer(svc.handler())
	defer srv.Close()
	u := srv.URL + "/items/"

	call(t, u+"mug", "GET", "").want(t, "GET missing", 404)
	call(t, u+"mug/buy", "POST", `{"quantity":1}`).want(t, "buy missing", 404)
	call(t, u+"mug", "PUT", `{"name":"mug","stock":2}`).want(t, "PUT without precondition", 428)
	created := call(t, u+"mug", "PUT", `{"name":"mug","price_cents":800,"stock":2}`, "If-None-Match", "*").want(t, "create", 201)
	call(t, u+"mug", "PUT", `{"name":"mug","stock":5}`, "If-None-Match", "*").want(t, "create again", 412)
	call(t, u+"mug", "GET", "", "If-None-Match", created.etag).want(t, "GET not modified", 304)
	call(t, u+"mug", "PATCH", `{"price_cents":900}`).want(t, "PATCH without If-Match", 428)
	edited := call(t, u+"mug", "PATCH", `{"price_cents":900}`, "If-Match", created.etag).want(t, "PATCH", 200)
	stale := call(t, u+"mug", "PATCH", `{"name":"cup"}`, "If-Match", created.etag).want(t, "stale PATCH", 412)
	if stale.etag != edited.etag {
		t.Fatalf("stale PATCH: ETag %q, want %q", stale.etag, edited.etag)
	}
	call(t, u+"mug/buy", "POST", `{"quantity":0}`).want(t, "buy 0", 400)
	call(t, u+"mug/buy", "POST", `{"quantity":-3}`).want(t, "buy -3", 400)
	call(t, u+"mug/buy", "POST", `{"quantity":3}`).want(t, "buy more than the stock", 409)
	call(t, u+"mug/buy", "POST", `{"quantity":2}`).want(t, "buy", 200)
	call(t, u+"mug/buy", "POST", `{"quantity":1}`).want(t, "buy sold out", 409)
	call(t, u+"mug/restock", "POST", `{"quantity":4}`).want(t, "restock", 200)
	got := call(t, u+"mug", "GET", "").want(t, "GET", 200)
	var it Item
	if err := json.Unmarshal([]byte(got.body), &it); err != nil {
		t.Fatal(err)
	}
	if it != (Item{SKU: "mug", Name: "mug", Price: 900, Stock: 4}) {
		t.Fatalf("item %+v", it)
	}
	// A buy changes the item's version: an edit made on the page read
	// before it is refused, not applied over the new stock.
	call(t, u+"mug", "PUT", `{"name":"mug","price_cents":900,"stock":100}`, "If-Match", edited.etag).want(t, "PUT after a buy", 412)
}

// pausedPair runs the scenario built to make a lease lock lose a sale:
// buyer A reads the last unit and is paused before its write; buyer B buys
// meanwhile; then A resumes. It returns both statuses and the stock left.
// With a lease lock, B gets the lock only once A's lease has expired: A is
// paused past its TTL by construction.
func pausedPair(t *testing.T, store cas.Store, mode string) (a, b int, left int) {
	t.Helper()
	ctx := context.Background()
	svc := newService(store, mode, hybrid.NewLocalLocker(20*time.Millisecond))
	paused, resume := make(chan struct{}), make(chan struct{})
	var once sync.Once
	svc.beforeWrite = func(ctx context.Context, _ string) {
		first := false
		once.Do(func() { first = true })
		if first {
			close(paused)
			select {
			case <-resume:
			case <-ctx.Done():
			}
		}
	}
	sku := "last-unit-" + randomHex()
	if err := svc.seed(ctx, []Item{{SKU: sku, Name: "last unit", Stock: 1}}); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(svc.handler())
	defer srv.Close()
	buy := srv.URL + "/items/" + sku + "/buy"

	done := make(chan int)
	go func() { done <- call(t, buy, "POST", `{"quantity":1}`).status }()
	<-paused
	b = call(t, buy, "POST", `{"quantity":1}`).status
	close(resume)
	a = <-done
	it, _, err := svc.items.Get(ctx, key(sku))
	if err != nil {
		t.Fatal(err)
	}
	return a, b, it.Stock
}

func testPausedHolder(t *testing.T, newStore func() cas.Store) {
	t.Run("lease", func(t *testing.T) {
		a, b, left := pausedPair(t, newStore(), modeLease)
		r := runResult{Mode: modeLease, Stock: 1, Left: left}
		for _, s := range []int{a, b} {
			if s == http.StatusOK {
				r.Accepted++
			}
		}
		if r.Lost() < 1 {
			t.Fatalf("lease lock: A %d, B %d, %d left: expected the paused holder to sell the last unit a second time", a, b, left)
		}
		t.Logf("lease lock: both buyers got the last unit (A %d, B %d), %d left: %d sale lost", a, b, left, r.Lost())
	})
	t.Run("occ", func(t *testing.T) {
		a, b, left := pausedPair(t, newStore(), modeOCC)
		if b != http.StatusOK || a != http.StatusConflict || left != 0 {
			t.Fatalf("occ: A %d (want 409 sold out), B %d (want 200), %d left (want 0)", a, b, left)
		}
	})
}

// TestPausedHolder: the same pause that makes the lease lock sell the last
// unit twice makes occkit's write fail its version check; A reads again,
// finds the item sold out and says so.
func TestPausedHolder(t *testing.T) {
	testPausedHolder(t, func() cas.Store { return memcas.New() })
}

// TestConcurrentBuyers drives both versions with concurrent buyers and
// pauses past the lease's TTL: occkit's keeps its invariant (units sold
// == orders accepted, stock never negative), with and without pauses. The
// lease lock's lost sales are logged, side by side (TestPausedHolder
// asserts that it loses them).
func TestConcurrentBuyers(t *testing.T) {
	testConcurrentBuyers(t, func() cas.Store { return memcas.New() })
}

func testConcurrentBuyers(t *testing.T, newStore func() cas.Store) {
	ctx := context.Background()
	cfg := loadConfig{Buyers: 8, Stock: 120, TTL: 20 * time.Millisecond, PauseEvery: 15, Pause: 60 * time.Millisecond}
	var table strings.Builder
	results, err := compare(ctx, &table, newStore, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("\n%s", table.String())
	if err := results[1].check(); err != nil {
		t.Fatal(err)
	}
	if results[1].Accepted != cfg.Stock || results[1].Left != 0 {
		t.Fatalf("occ: %d accepted, %d left, want every unit sold once", results[1].Accepted, results[1].Left)
	}
	cfg.PauseEvery = 0
	r, err := runLoad(ctx, newStore(), modeOCC, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.check(); err != nil || r.Accepted != cfg.Stock {
		t.Fatalf("occ without pauses: %+v: %v", r, err)
	}
}

func pgStore(t *testing.T) func() cas.Store {
	pool := pgtest.Pool(t)
	s, err := pgcas.New(pool, pgcas.Config{Table: "inventory"})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.CreateTable(context.Background()); err != nil {
		t.Fatal(err)
	}
	return func() cas.Store { return s }
}

// TestPostgres runs the scenarios on PostgreSQL (-store postgres).
func TestPostgres(t *testing.T) {
	newStore := pgStore(t)
	t.Run("paused holder", func(t *testing.T) { testPausedHolder(t, newStore) })
	t.Run("concurrent buyers", func(t *testing.T) { testConcurrentBuyers(t, newStore) })
}

// TestSQLite runs the scenarios on SQLite (-store sqlite), a file database
// in WAL mode shared by several connections.
func TestSQLite(t *testing.T) {
	s, db, err := openSQLite(context.Background(), filepath.Join(t.TempDir(), "inventory.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	newStore := func() cas.Store { return s }
	t.Run("paused holder", func(t *testing.T) { testPausedHolder(t, newStore) })
	t.Run("concurrent buyers", func(t *testing.T) { testConcurrentBuyers(t, newStore) })
}
