package occ

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/occkit/occkit/adapters/memcas"
	"github.com/occkit/occkit/cas"
)

// gatedCommitter is memcas whose commits can be held at a gate, and
// which counts them.
type gatedCommitter struct {
	*memcas.Store
	rtt     time.Duration
	commits atomic.Int64
	gate    atomic.Pointer[gate]
}

func (s *gatedCommitter) Commit(ctx context.Context, ops []cas.Op) ([]cas.Version, error) {
	s.commits.Add(1)
	if g := s.gate.Load(); g != nil {
		g.pass()
	}
	time.Sleep(s.rtt)
	return s.Store.Commit(ctx, ops)
}

// move moves n from one key to another (integers, absent is 0).
func move(from, to string, n int) func(tx *Tx) error {
	return func(tx *Tx) error {
		if err := tx.Prefetch(from, to); err != nil {
			return err
		}
		a, b := txInt(tx, from), txInt(tx, to)
		tx.Put(from, []byte(strconv.Itoa(a-n)))
		tx.Put(to, []byte(strconv.Itoa(b+n)))
		return nil
	}
}

func txInt(tx *Tx, key string) int {
	v, _, _ := tx.Get(key)
	n, _ := strconv.Atoi(string(v))
	return n
}

func storedInt(t *testing.T, s cas.Store, key string) int {
	t.Helper()
	it, err := s.Get(context.Background(), key)
	if err != nil && !errors.Is(err, cas.ErrNotFound) {
		t.Fatal(err)
	}
	n, _ := strconv.Atoi(string(it.Value))
	return n
}

// TestTxnCombinerTransfers: 16 goroutines × 50 transfers between two keys
// through a Combiner: every call succeeds, the sum holds exactly, and the
// calls shared commits.
func TestTxnCombinerTransfers(t *testing.T) {
	s := &gatedCommitter{Store: memcas.New(), rtt: 200 * time.Microsecond}
	cb := NewCombiner()
	var wg sync.WaitGroup
	var failed atomic.Int64
	for range 16 {
		wg.Go(func() {
			for range 50 {
				if err := Txn(context.Background(), s, move("a", "b", 1), WithCombiner(cb)); err != nil && failed.Add(1) == 1 {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	if a, b := storedInt(t, s, "a"), storedInt(t, s, "b"); a != -800 || b != 800 || failed.Load() != 0 {
		t.Fatalf("a = %d, b = %d after 800 transfers of 1 (%d failed); want -800, 800", a, b, failed.Load())
	}
	st := cb.Stats()
	if st.Txns != 800 || st.TxnBatches >= 400 || s.commits.Load() >= 400 {
		t.Fatalf("stats %+v, %d commits: want 800 calls in fewer than 400 batches and commits", st, s.commits.Load())
	}
}

// heldBatch starts a transfer that leads a batch and holds its commit at
// a gate; it returns the gate and a channel of the leader's result.
func heldBatch(t *testing.T, s *gatedCommitter, cb *Combiner) (*gate, chan error) {
	t.Helper()
	g := newGate()
	s.gate.Store(g)
	led := make(chan error, 1)
	go func() { led <- Txn(context.Background(), s, move("a", "b", 1), WithCombiner(cb)) }()
	<-g.arrived
	return g, led
}

// queued waits until n calls wait in s's queue of cb.
func queued(t *testing.T, cb *Combiner, s cas.Store, n int) {
	t.Helper()
	q := cb.txnQueue(s)
	deadline := time.Now().Add(5 * time.Second)
	for {
		q.mu.Lock()
		got := len(q.waiting)
		q.mu.Unlock()
		if got == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d calls queued, want %d", got, n)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestTxnCombinerMemberLeaves: in a batch, a call whose function fails
// gets its own error, its writes are not committed, and the calls before
// and after it commit; a call whose function panics re-raises the panic
// on its own goroutine; a call whose context ends while it waits is not
// applied.
func TestTxnCombinerMemberLeaves(t *testing.T) {
	s := &gatedCommitter{Store: memcas.New()}
	cb := NewCombiner()
	g, led := heldBatch(t, s, cb)
	errRefused := errors.New("refused")
	results := make([]chan any, 5)
	ctx, cancel := context.WithCancel(context.Background())
	fns := []func(tx *Tx) error{
		move("a", "b", 10),
		func(tx *Tx) error { // writes, then fails
			tx.Put("a", []byte("1000000"))
			return Permanent(errRefused)
		},
		func(tx *Tx) error { tx.Put("a", []byte("-1")); panic("member panics") },
		move("a", "b", 100), // its context ends while it waits
		move("a", "b", 1000),
	}
	for i, fn := range fns {
		results[i] = make(chan any, 1)
		c := context.Background()
		if i == 3 {
			c = ctx
		}
		go func() {
			defer func() {
				if r := recover(); r != nil {
					results[i] <- r
				}
			}()
			results[i] <- Txn(c, s, fn, WithCombiner(cb))
		}()
		queued(t, cb, s, i+1)
	}
	cancel()
	if r := <-results[3]; !errors.Is(r.(error), context.Canceled) {
		t.Fatalf("call cancelled while waiting: %v, want context.Canceled", r)
	}
	g.release()
	if err := <-led; err != nil {
		t.Fatal(err)
	}
	for i, want := range []any{nil, errRefused, "member panics", nil, nil} {
		if i == 3 {
			continue
		}
		got := <-results[i]
		switch w := want.(type) {
		case nil:
			if got != nil {
				t.Fatalf("call %d: %v, want success", i, got)
			}
		case error:
			if err, ok := got.(error); !ok || !errors.Is(err, w) {
				t.Fatalf("call %d: %v, want %v", i, got, w)
			}
		default:
			if got != w {
				t.Fatalf("call %d: %v, want the panic %v", i, got, w)
			}
		}
	}
	// The leader's 1, then 10 and 1000: nothing of the failed, panicked
	// or cancelled calls.
	if a, b := storedInt(t, s, "a"), storedInt(t, s, "b"); a != -1011 || b != 1011 {
		t.Fatalf("a = %d, b = %d; want -1011, 1011", a, b)
	}
	if st := cb.Stats(); st.TxnBatches != 2 {
		t.Fatalf("%d batches, want 2 (the leader's, then the four waiting)", st.TxnBatches)
	}
}

// smallCommits returns a store whose commits take 4 operations at most
// (two transfers), and a Combiner.
func smallCommits(t *testing.T) (*gatedCommitter, *Combiner) {
	t.Helper()
	inner, err := memcas.NewWithConfig(memcas.Config{Limits: cas.Limits{MaxCommitOps: 4}})
	if err != nil {
		t.Fatal(err)
	}
	return &gatedCommitter{Store: inner}, NewCombiner()
}

// TestTxnCombinerLimits: a batch never commits more operations than the
// store takes: calls whose writes would go over wait for the next batch.
func TestTxnCombinerLimits(t *testing.T) {
	s, cb := smallCommits(t)
	g, led := heldBatch(t, s, cb)
	results := make(chan error, 6)
	for i := range 6 { // two keys each: two transfers per batch at most
		go func() {
			results <- Txn(context.Background(), s, move("x"+strconv.Itoa(i), "y"+strconv.Itoa(i), 1), WithCombiner(cb))
		}()
		queued(t, cb, s, i+1)
	}
	g.release()
	if err := <-led; err != nil {
		t.Fatal(err)
	}
	for range 6 {
		if err := <-results; err != nil {
			t.Fatalf("a transfer: %v", err)
		}
	}
	if st := cb.Stats(); st.TxnBatches != 4 {
		t.Fatalf("%+v: want 4 batches (the leader's, then 2 transfers each)", st)
	}
	for i := range 6 {
		if x, y := storedInt(t, s, "x"+strconv.Itoa(i)), storedInt(t, s, "y"+strconv.Itoa(i)); x != -1 || y != 1 {
			t.Fatalf("transfer %d: %d, %d", i, x, y)
		}
	}
}

// TestTxnCombinerAbandonedLaterCall: a call that waits for the next batch
// (limits) and abandons while its batch is in flight never leads: the
// others still end and the queue is handed on.
func TestTxnCombinerAbandonedLaterCall(t *testing.T) {
	s, cb := smallCommits(t)
	g, led := heldBatch(t, s, cb)
	ctx, cancel := context.WithCancel(context.Background())
	results := make(chan error, 4)
	for i := range 4 {
		c := context.Background()
		if i == 2 {
			c = ctx
		}
		go func() {
			results <- Txn(c, s, move("x"+strconv.Itoa(i), "y"+strconv.Itoa(i), 1), WithCombiner(cb))
		}()
		queued(t, cb, s, i+1)
	}
	g2 := newGate()
	s.gate.Store(g2)
	g.release()
	if err := <-led; err != nil {
		t.Fatal(err)
	}
	<-g2.arrived // the batch of calls 0 and 1 commits; 2 and 3 wait for the next
	cancel()
	if err := <-results; !errors.Is(err, context.Canceled) {
		t.Fatalf("the cancelled call: %v", err)
	}
	s.gate.Store(nil)
	g2.release()
	for i := range 3 {
		select {
		case err := <-results:
			if err != nil {
				t.Fatalf("a call: %v", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%d of 3 calls never returned", 3-i)
		}
	}
	if x, y := storedInt(t, s, "x2"), storedInt(t, s, "y2"); x != 0 || y != 0 {
		t.Fatalf("the cancelled transfer applied: %d, %d", x, y)
	}
	q := cb.txnQueue(s)
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.busy || len(q.waiting) != 0 {
		t.Fatalf("queue busy %v with %d waiting after every call ended", q.busy, len(q.waiting))
	}
}

// TestTxnCombinerLeaderPanics: when the leader's Txn panics (here its
// observer), the members of its batch end with an ambiguous error and the
// queue goes on serving.
func TestTxnCombinerLeaderPanics(t *testing.T) {
	s := &gatedCommitter{Store: memcas.New()}
	cb := NewCombiner()
	g, led := heldBatch(t, s, cb)
	obs := ObserverFuncs{Call: func(context.Context, Call) { panic("observer") }}
	leaderPanic := make(chan any, 1)
	go func() {
		defer func() { leaderPanic <- recover() }()
		_ = Txn(context.Background(), s, move("a", "b", 1), WithCombiner(cb), WithObserver(obs))
	}()
	queued(t, cb, s, 1)
	member := make(chan error, 1)
	go func() { member <- Txn(context.Background(), s, move("a", "b", 1), WithCombiner(cb)) }()
	queued(t, cb, s, 2)
	s.gate.Store(nil)
	g.release()
	if err := <-led; err != nil {
		t.Fatal(err)
	}
	if p := <-leaderPanic; p != "observer" {
		t.Fatalf("the leader's panic: %v", p)
	}
	select {
	case err := <-member:
		if !errors.Is(err, cas.ErrAmbiguous) {
			t.Fatalf("member of the panicked batch: %v, want an ambiguous error", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("member blocked after its leader panicked")
	}
	if err := Txn(context.Background(), s, move("a", "b", 1), WithCombiner(cb)); err != nil {
		t.Fatalf("a call after the panic: %v", err)
	}
}

// failingCommit is a gatedCommitter whose next commit fails when fail is
// set.
type failingCommit struct {
	*gatedCommitter
	fail atomic.Bool
}

var errStoreDown = errors.New("store down")

func (s *failingCommit) Commit(ctx context.Context, ops []cas.Op) ([]cas.Version, error) {
	if s.fail.CompareAndSwap(true, false) {
		return nil, errStoreDown
	}
	return s.gatedCommitter.Commit(ctx, ops)
}

// TestTxnCombinerErrorNeedsCommit: a member refused on what a member
// before it wrote gets its refusal only if that write commits; when the
// batch fails, it gets the batch's error.
func TestTxnCombinerErrorNeedsCommit(t *testing.T) {
	gc := &gatedCommitter{Store: memcas.New()}
	if _, err := gc.Store.CompareAndSwap(context.Background(), "acct", 0, []byte("100")); err != nil {
		t.Fatal(err)
	}
	s := &failingCommit{gatedCommitter: gc}
	cb := NewCombiner()
	g := newGate()
	gc.gate.Store(g)
	led := make(chan error, 1)
	go func() { led <- Txn(context.Background(), s, move("z", "w", 1), WithCombiner(cb)) }()
	<-g.arrived
	errNoFunds := errors.New("insufficient funds")
	withdraw := func(tx *Tx) error {
		n := txInt(tx, "acct")
		if n < 100 {
			return errNoFunds
		}
		tx.Put("acct", []byte(strconv.Itoa(n-100)))
		return nil
	}
	r := [2]chan error{make(chan error, 1), make(chan error, 1)}
	for i := range 2 {
		go func() { r[i] <- Txn(context.Background(), s, withdraw, WithCombiner(cb)) }()
		queued(t, cb, s, i+1)
	}
	gc.gate.Store(nil)
	s.fail.Store(true)
	g.release()
	if err := <-led; err != nil {
		t.Fatal(err)
	}
	e0, e1 := <-r[0], <-r[1]
	if !errors.Is(e0, errStoreDown) || !errors.Is(e1, errStoreDown) || storedInt(t, s, "acct") != 100 {
		t.Fatalf("withdrawals: %v, %v, acct %d; want both failed with the commit's error, acct 100", e0, e1, storedInt(t, s, "acct"))
	}
	// Once the commit goes through, the second one's refusal stands.
	for i := range 2 {
		go func() { r[i] <- Txn(context.Background(), s, withdraw, WithCombiner(cb)) }()
	}
	e0, e1 = <-r[0], <-r[1]
	if (e0 == nil) == (e1 == nil) || !errors.Is(errors.Join(e0, e1), errNoFunds) || storedInt(t, s, "acct") != 0 {
		t.Fatalf("withdrawals: %v, %v, acct %d; want one applied, one refused", e0, e1, storedInt(t, s, "acct"))
	}
}

// TestTxnCombinerAbandonWaitsForFn: a call that abandons while its batch
// runs its function returns only once the function has returned.
func TestTxnCombinerAbandonWaitsForFn(t *testing.T) {
	s := &gatedCommitter{Store: memcas.New()}
	cb := NewCombiner()
	g, led := heldBatch(t, s, cb)
	ctx, cancel := context.WithCancel(context.Background())
	inFn := make(chan struct{})
	var out int
	ret := make(chan error, 1)
	go func() {
		ret <- Txn(ctx, s, func(tx *Tx) error {
			close(inFn)
			time.Sleep(50 * time.Millisecond)
			out = 42
			return nil
		}, WithCombiner(cb))
	}()
	queued(t, cb, s, 1)
	s.gate.Store(nil)
	g.release()
	if err := <-led; err != nil {
		t.Fatal(err)
	}
	<-inFn
	cancel()
	err := <-ret
	if out != 42 { // the race detector also sees a write after the return
		t.Fatalf("Txn returned (%v) while its function ran", err)
	}
}
