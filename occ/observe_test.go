package occ

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/occkit/occkit/adapters/memcas"
	"github.com/occkit/occkit/cas"
)

// callKey marks the context a hookObserver's StartCall returned.
type callKey struct{}

// hookObserver implements every observer interface: it records the
// calls it saw start, the waits, and the marker of the context each
// method got (0: not the one StartCall returned).
type hookObserver struct {
	mu      sync.Mutex
	next    int
	starts  []CallStart
	waits   []Wait
	events  []string // "start", "attempt", "wait", "call", in order, with the call's marker
	markers []int    // the marker each event's context carried
}

func (o *hookObserver) record(ctx context.Context, ev string) {
	m, _ := ctx.Value(callKey{}).(int)
	o.events = append(o.events, ev)
	o.markers = append(o.markers, m)
}

func (o *hookObserver) StartCall(ctx context.Context, s CallStart) context.Context {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.next++
	o.starts = append(o.starts, s)
	ctx = context.WithValue(ctx, callKey{}, o.next)
	o.record(ctx, "start")
	return ctx
}

func (o *hookObserver) ObserveAttempt(ctx context.Context, _ Attempt) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.record(ctx, "attempt")
}

func (o *hookObserver) ObserveCall(ctx context.Context, _ Call) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.record(ctx, "call")
}

func (o *hookObserver) ObserveWait(ctx context.Context, w Wait) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.waits = append(o.waits, w)
	o.record(ctx, "wait")
}

// check fails t unless the events are want and every one of them got the
// context of the call's StartCall (marker 1: the first call).
func (o *hookObserver) check(t *testing.T, want ...string) {
	t.Helper()
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.events) != len(want) {
		t.Fatalf("events %v, want %v", o.events, want)
	}
	for i := range want {
		if o.events[i] != want[i] || o.markers[i] != 1 {
			t.Fatalf("events %v with markers %v, want %v each with the StartCall's context (1)", o.events, o.markers, want)
		}
	}
}

// TestStartCallContext: StartCall is told the call's op and key before
// its first attempt, the function runs with the context it returned, and
// every later observer method of the call gets that context.
func TestStartCallContext(t *testing.T) {
	obs := &hookObserver{}
	calls := 0
	err := Retry(context.Background(), func(ctx context.Context) error {
		if m, _ := ctx.Value(callKey{}).(int); m != 1 {
			t.Errorf("fn's context carries marker %d, want StartCall's (1)", m)
		}
		calls++
		if calls < 3 {
			return conflict("k")
		}
		return nil
	}, noSleep(), WithObserver(obs))
	if err != nil {
		t.Fatal(err)
	}
	obs.check(t, "start", "attempt", "wait", "attempt", "wait", "attempt", "call")
	if len(obs.starts) != 1 || obs.starts[0] != (CallStart{Op: "retry"}) {
		t.Fatalf("starts %+v, want one {retry}", obs.starts)
	}

	// A call whose context has ended before its first attempt starts and
	// ends, with no attempt.
	obs = &hookObserver{}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := Retry(ctx, func(context.Context) error { return nil }, WithObserver(obs)); err == nil {
		t.Fatal("Retry with an ended context succeeded")
	}
	obs.check(t, "start", "call")
}

// TestStartCallSeveralObservers: each observer's StartCall gets the
// context the one before returned, in the order given, and all of them
// get the last one's context afterwards.
func TestStartCallSeveralObservers(t *testing.T) {
	type nameKey struct{}
	var order []string
	starter := func(name string) Observer {
		return startFunc(func(ctx context.Context, _ CallStart) context.Context {
			prev, _ := ctx.Value(nameKey{}).(string)
			order = append(order, prev+">"+name)
			return context.WithValue(ctx, nameKey{}, name)
		})
	}
	var got []string
	last := ObserverFuncs{Call: func(ctx context.Context, _ Call) {
		s, _ := ctx.Value(nameKey{}).(string)
		got = append(got, s)
	}}
	err := Retry(context.Background(), func(context.Context) error { return nil },
		WithObserver(starter("a")), WithObserver(starter("b")), WithObserver(starter("c")), WithObserver(last))
	if err != nil {
		t.Fatal(err)
	}
	if len(order) != 3 || order[0] != ">a" || order[1] != "a>b" || order[2] != "b>c" {
		t.Fatalf("StartCall order %v, want [>a a>b b>c]", order)
	}
	if len(got) != 1 || got[0] != "c" {
		t.Fatalf("ObserveCall got %v, want the last StartCall's context (c)", got)
	}
}

// startFunc is an Observer that only starts calls.
type startFunc func(ctx context.Context, s CallStart) context.Context

func (f startFunc) StartCall(ctx context.Context, s CallStart) context.Context { return f(ctx, s) }
func (startFunc) ObserveAttempt(context.Context, Attempt)                      {}
func (startFunc) ObserveCall(context.Context, Call)                            {}

// TestObserveWaitBackOff: every backoff wait is reported after it ends,
// with the attempts made before it and how long it lasted.
func TestObserveWaitBackOff(t *testing.T) {
	obs := &hookObserver{}
	calls := 0
	b := &seqBackOff{seq: []time.Duration{3 * time.Millisecond, 5 * time.Millisecond}}
	err := Retry(context.Background(), errSeq(&calls, conflict("k"), conflict("k"), nil), WithBackOff(b), WithObserver(obs))
	if err != nil {
		t.Fatal(err)
	}
	obs.check(t, "start", "attempt", "wait", "attempt", "wait", "attempt", "call")
	want := []time.Duration{3 * time.Millisecond, 5 * time.Millisecond}
	for i, w := range obs.waits {
		if w.Op != "retry" || w.Kind != WaitBackOff || w.After != i+1 || w.Duration < want[i] {
			t.Errorf("wait %d = %+v, want {retry backoff after %d, at least %v}", i, w, i+1, want[i])
		}
	}

	// A wait that the context cuts short is reported with what it lasted.
	obs = &hookObserver{}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	calls = 0
	long := &seqBackOff{seq: []time.Duration{time.Hour}}
	start := time.Now()
	if err := Retry(ctx, errSeq(&calls, conflict("k")), WithBackOff(long), WithObserver(obs)); err == nil {
		t.Fatal("Retry succeeded")
	}
	obs.check(t, "start", "attempt", "wait", "call")
	if w := obs.waits[0]; w.Duration < 10*time.Millisecond || w.Duration > time.Since(start) {
		t.Fatalf("cut-short wait lasted %v, want about the context's 20ms", w.Duration)
	}
	if WaitBackOff.String() != "backoff" || WaitTurn.String() != "turn" || WaitKind(9).String() != "unknown" {
		t.Fatal("WaitKind names")
	}
}

// TestObserveWaitTurn: a call that queues for its turn at a hot key
// reports that wait, before its first attempt.
func TestObserveWaitTurn(t *testing.T) {
	unboundedHolds(t)
	store := memcas.New()
	counter := cas.NewTyped[int](store, cas.JSON[int]())
	holder := holdTurn(t, store, "hot")
	obs := &hookObserver{}
	done := make(chan error, 1)
	go func() {
		_, _, err := Update(context.Background(), counter, "hot", incrInt, WithObserver(obs))
		done <- err
	}()
	waitInLine(t, holder.line, 1)
	time.Sleep(10 * time.Millisecond)
	holder.leaveLine()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	obs.check(t, "start", "wait", "attempt", "call")
	if w := obs.waits[0]; w.Op != "update" || w.Key != "hot" || w.Kind != WaitTurn || w.After != 0 || w.Duration < 10*time.Millisecond {
		t.Fatalf("wait %+v, want {update hot turn after 0, at least 10ms}", w)
	}
}

// TestStartCallEscalated: a combined Update whose cold first attempt
// conflicts goes on through the combiner; it is still one call, started
// once and ended once, and its observers keep StartCall's context.
func TestStartCallEscalated(t *testing.T) {
	ctx := context.Background()
	store := newGatedStore(0, nil)
	counter := cas.NewTyped[int](store, cas.JSON[int]())
	obs := &hookObserver{}
	// Another process writes under the first attempt.
	_, _, err := Update(ctx, counter, "k", incrRacedOnce(ctx, store.Store, "k"), WithCombiner(NewCombiner()), WithObserver(obs))
	if err != nil {
		t.Fatal(err)
	}
	obs.check(t, "start", "attempt", "attempt", "call")
	if len(obs.starts) != 1 || obs.starts[0] != (CallStart{Op: "update", Key: "k"}) {
		t.Fatalf("starts %+v, want one {update k}", obs.starts)
	}
}

// TestWithOp: a Retry reports the op and key WithOp gives it; Update
// keeps its own.
func TestWithOp(t *testing.T) {
	rec := &recordingObserver{t: t}
	obs := &hookObserver{}
	calls := 0
	err := Retry(context.Background(), errSeq(&calls, conflict("k"), nil), noSleep(),
		WithOp("hybrid.update", "k"), WithObserver(rec), WithObserver(obs))
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range rec.attempts {
		if a.Op != "hybrid.update" || a.Key != "k" {
			t.Errorf("attempt Op %q Key %q, want hybrid.update and k", a.Op, a.Key)
		}
	}
	if c := rec.calls[0]; c.Op != "hybrid.update" || c.Key != "k" {
		t.Errorf("call Op %q Key %q, want hybrid.update and k", c.Op, c.Key)
	}
	if obs.starts[0] != (CallStart{Op: "hybrid.update", Key: "k"}) || obs.waits[0].Op != "hybrid.update" {
		t.Errorf("start %+v, wait %+v: want op hybrid.update", obs.starts[0], obs.waits[0])
	}

	rec = &recordingObserver{t: t}
	counter := cas.NewTyped[int](memcas.New(), cas.JSON[int]())
	if _, _, err := Update(context.Background(), counter, "u", incrInt, WithOp("other", "x"), WithObserver(rec)); err != nil {
		t.Fatal(err)
	}
	if c := rec.calls[0]; c.Op != "update" || c.Key != "u" {
		t.Errorf("Update with WithOp reported Op %q Key %q, want update and u", c.Op, c.Key)
	}
}
