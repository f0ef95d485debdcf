package story

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/internal/redistest"
)

// openTestRun opens a run of mode on the test's Redis, seeded with 10,
// with the recorder as its sink; it is cleaned up and closed at the end.
func openTestRun(t *testing.T, mode string) (*run, *recorder) {
	t.Helper()
	o := redistest.Options(t)
	var b [4]byte
	_, _ = rand.Read(b[:])
	ctx := context.Background()
	spec := runSpec{Story: GCPause, Mode: mode, NS: "test." + hex.EncodeToString(b[:]), TTL: TTL, Initial: 10,
		Start: time.Now().UnixNano(), Endpoints: endpoints{Redis: redisAddr{Addr: o.Addr, Username: o.Username, Password: o.Password, DB: o.DB}}}
	rec := newRecorder(ctx)
	r, err := openRun(ctx, spec, rec)
	if err != nil {
		t.Fatal(err)
	}
	rec.r, r.rec = r, rec
	t.Cleanup(func() {
		rec.stop()
		if err := r.cleanup(context.Background()); err != nil {
			t.Error(err)
		}
		r.close()
	})
	if err := r.seed(ctx); err != nil {
		t.Fatal(err)
	}
	return r, rec
}

// TestJudgeCountsTheStoresRefusals: the stale writes rejected are the
// refusals Redis answered, not the WriteRejected events clients emit; a
// rejection the store never made, or a refusal the timeline does not show,
// fails the run.
func TestJudgeCountsTheStoresRefusals(t *testing.T) {
	ctx := redistest.Ctx(t, 30*time.Second)
	r, rec := openTestRun(t, ModeFenced)
	a, err := newClient(ctx, r, "A", r.direct())
	if err != nil {
		t.Fatal(err)
	}
	defer a.close()
	stock := typed(a.store)
	_, ver, err := stock.Get(ctx, "stock")
	if err != nil {
		t.Fatal(err)
	}
	nine, _ := json.Marshal(int64(9))
	// Token 5 sells one; token 3, from the same stale read, is fenced off;
	// a plain conditional write from it conflicts.
	nv, err := a.store.CompareAndSwapFenced(ctx, "stock", ver, 5, nine)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.appendAudit(ctx, auditEntry{Client: "A", Read: 10, Wrote: 9, Held: true, Token: 5, Version: uint64(nv)}); err != nil {
		t.Fatal(err)
	}
	a.emit(Event{Kind: WriteAccepted, Token: 5, Value: ptr(9)})
	if _, err := a.store.CompareAndSwapFenced(ctx, "stock", ver, 3, nine); !errors.Is(err, cas.ErrFenced) {
		t.Fatalf("token 3 after 5: %v, want ErrFenced", err)
	}
	a.emit(Event{Kind: WriteRejected, Token: 3, Value: ptr(9)})
	if _, err := a.store.CompareAndSwap(ctx, "stock", ver, nine); !errors.Is(err, cas.ErrConflict) {
		t.Fatalf("stale version: %v, want a conflict", err)
	}
	a.emit(Event{Kind: WriteRejected, Value: ptr(9)})
	events, _ := rec.stop()

	res := Result{Events: slices.Clone(events)}
	if err := r.judge(ctx, &res); err != nil {
		t.Fatal(err)
	}
	o := res.Outcome
	if o.Final != 9 || o.Expected != 9 || o.StaleRejected != 2 || o.FencedOff != 1 || o.StaleAccepted != 0 || !res.Safe {
		t.Errorf("%+v safe=%v, want final 9 as expected, 2 stale writes rejected, 1 fenced off", o, res.Safe)
	}
	if !strings.Contains(res.Verdict, "A's token 3 fenced off") || !strings.Contains(res.Verdict, "a version conflict") {
		t.Errorf("verdict %q: want both reasons", res.Verdict)
	}
	for _, e := range res.Events {
		if e.Kind == WriteRejected && !e.Stale {
			t.Errorf("%+v: a refused write is stale", e)
		}
	}

	// A client that says "rejected" for a write the store never refused
	// (one it did not send) is caught.
	res = Result{Events: append(slices.Clone(events), Event{At: time.Second, Client: "A", Kind: WriteRejected, Token: 3, Value: ptr(9)})}
	if err := r.judge(ctx, &res); err == nil || !strings.Contains(err.Error(), "not refused by the store") {
		t.Errorf("a rejection the store never made: %v (%+v), want an error", err, res.Outcome)
	}
	// A refusal the timeline does not show is caught too.
	res = Result{Events: slices.DeleteFunc(slices.Clone(events), func(e Event) bool { return e.Kind == WriteRejected && e.Token == 0 })}
	if err := r.judge(ctx, &res); err == nil || !strings.Contains(err.Error(), "the store refused 2 writes, the timeline shows 1") {
		t.Errorf("a refusal missing from the timeline: %v, want an error", err)
	}
	// And an accepted write missing from the timeline.
	res = Result{Events: slices.DeleteFunc(slices.Clone(events), func(e Event) bool { return e.Kind == WriteAccepted })}
	if err := r.judge(ctx, &res); err == nil || !strings.Contains(err.Error(), "the audit list has 1 accepted writes, the timeline 0") {
		t.Errorf("an accepted write missing from the timeline: %v, want an error", err)
	}
}
