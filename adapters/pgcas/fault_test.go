package pgcas_test

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/cenkalti/backoff/v4"
	"github.com/occkit/occkit/adapters/pgcas"
	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/internal/pgtest"
	"github.com/occkit/occkit/occ"
)

// faultyStore returns a store whose single connection goes through f.
func faultyStore(t *testing.T, f *pgtest.Faults) *pgcas.Store {
	t.Helper()
	pool := pgtest.Pool(t, f.Configure, func(c *pgxpool.Config) { c.MaxConns = 2 })
	s, err := pgcas.New(pool, pgcas.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.CreateTable(context.Background()); err != nil {
		t.Fatal(err)
	}
	return s
}

func wantFired(t *testing.T, f *pgtest.Faults) {
	t.Helper()
	if f.Fired() != 1 {
		t.Fatalf("the fault fired %d times, want once", f.Fired())
	}
}

// Fault: dropped connection after the write was sent and applied. The
// store reads the row back, finds its write id and reports success.
func TestLostReplyResolvedByWriteID(t *testing.T) {
	ctx := context.Background()
	var f pgtest.Faults
	s := faultyStore(t, &f)
	v1, err := s.CompareAndSwap(ctx, "lost-key", 0, []byte("one"))
	if err != nil {
		t.Fatal(err)
	}
	f.LoseReply("lost-key")
	v2, err := s.CompareAndSwap(ctx, "lost-key", v1, []byte("two"))
	wantFired(t, &f)
	if err != nil {
		t.Fatalf("swap with a lost reply: %v, want it resolved to success", err)
	}
	it, err := s.Get(ctx, "lost-key")
	if err != nil || it.Version != v2 || string(it.Value) != "two" {
		t.Fatalf("get = %+v, %v; want two at v%d (applied exactly once)", it, err, v2)
	}

	f.LoseReply("lost-key")
	if err := s.CompareAndDelete(ctx, "lost-key", v2); err != nil {
		t.Fatalf("delete with a lost reply: %v, want it resolved to success", err)
	}
	if _, err := s.Get(ctx, "lost-key"); !errors.Is(err, cas.ErrNotFound) {
		t.Fatalf("get after delete: %v", err)
	}
}

// Fault: dropped connection after a write that did not apply (a stale
// version). The row does not carry the write id: the outcome is reported
// as unknown, never as a conflict and never retried.
func TestLostReplyAmbiguous(t *testing.T) {
	ctx := context.Background()
	var f pgtest.Faults
	s := faultyStore(t, &f)
	v1, _ := s.CompareAndSwap(ctx, "k-amb", 0, []byte("one"))
	v2, _ := s.CompareAndSwap(ctx, "k-amb", v1, []byte("two"))
	f.LoseReply("k-amb")
	_, err := s.CompareAndSwap(ctx, "k-amb", v1, []byte("stale"))
	wantFired(t, &f)
	var ae *cas.AmbiguousError
	if !errors.As(err, &ae) || ae.Key != "k-amb" || ae.WriteID == "" || ae.Op != "compare-and-swap" {
		t.Fatalf("err = %v, want a *cas.AmbiguousError naming the key and a write id", err)
	}
	if errors.Is(err, cas.ErrConflict) {
		t.Fatalf("an unknown outcome must not look like a conflict: %v", err)
	}
	if !errors.Is(err, pgtest.ErrInjected) {
		t.Fatalf("the transport error is not reachable: %v", err)
	}
	it, _ := s.Get(ctx, "k-amb")
	if it.Version != v2 || string(it.Value) != "two" {
		t.Fatalf("get = %+v, want two at v%d", it, v2)
	}
}

// Fault: the connection breaks before the request is sent. Nothing can
// have been applied: a plain error, not an ambiguous one.
func TestFailedSendIsNotAmbiguous(t *testing.T) {
	ctx := context.Background()
	var f pgtest.Faults
	s := faultyStore(t, &f)
	v1, _ := s.CompareAndSwap(ctx, "k-send", 0, []byte("one"))
	f.FailSend("k-send")
	_, err := s.CompareAndSwap(ctx, "k-send", v1, []byte("two"))
	wantFired(t, &f)
	if err == nil || errors.Is(err, cas.ErrAmbiguous) || errors.Is(err, cas.ErrConflict) {
		t.Fatalf("err = %v, want a plain error", err)
	}
	it, _ := s.Get(ctx, "k-send")
	if it.Version != v1 {
		t.Fatalf("get = %+v, want v%d untouched", it, v1)
	}
}

// Fault: the reply to a commit is lost after it applied: resolved by the
// write id carried by every key it wrote.
func TestCommitLostReplyResolved(t *testing.T) {
	ctx := context.Background()
	var f pgtest.Faults
	s := faultyStore(t, &f)
	a, _ := s.CompareAndSwap(ctx, "a", 0, []byte("A"))
	f.LoseReply("commit-b")
	vs, err := s.Commit(ctx, []cas.Op{cas.Put("a", a, []byte("A2")), cas.Put("commit-b", 0, []byte("B"))})
	wantFired(t, &f)
	if err != nil {
		t.Fatalf("commit with a lost reply: %v, want it resolved", err)
	}
	for i, k := range []string{"a", "commit-b"} {
		it, err := s.Get(ctx, k)
		if err != nil || it.Version != vs[i] {
			t.Fatalf("get %s = %+v, %v; want v%d", k, it, err, vs[i])
		}
	}
}

// Transport failures that applied nothing are retryable (Retryable): a
// write that was never sent, a read that failed in transit; an update
// through occ with pgcas.Retryable rides over them. Lost replies are not.
func TestRetryableTransportFailures(t *testing.T) {
	ctx := context.Background()
	var f pgtest.Faults
	s := faultyStore(t, &f)
	v1, _ := s.CompareAndSwap(ctx, "k", 0, []byte("1"))

	f.FailSend("k")
	_, err := s.CompareAndSwap(ctx, "k", v1, []byte("2"))
	fired(t, &f, 1)
	if !pgcas.Retryable(err) || pgcas.IsRetryable(err) {
		t.Fatalf("unsent write: %v; Retryable %v, IsRetryable %v; want only Retryable", err, pgcas.Retryable(err), pgcas.IsRetryable(err))
	}

	f.FailSend("k")
	_, err = s.Get(ctx, "k")
	fired(t, &f, 2)
	if !pgcas.Retryable(err) {
		t.Fatalf("failed read: %v, want Retryable", err)
	}

	f.LoseReply("k")
	_, err = s.Commit(ctx, []cas.Op{cas.Put("other", 0, []byte("x")), cas.Check("k", v1+1000)})
	if errors.Is(err, cas.ErrAmbiguous) && pgcas.Retryable(err) {
		t.Fatalf("an ambiguous outcome must not be retryable: %v", err)
	}

	// occ with Retryable: a read that fails once is retried.
	counters := cas.NewTyped[int](s, cas.JSON[int]())
	if _, err := s.CompareAndSwap(ctx, "n", 0, []byte("0")); err != nil {
		t.Fatal(err)
	}
	f.FailSend("n")
	n, _, err := occ.Update(ctx, counters, "n", func(n int, _ bool) (int, error) { return n + 1, nil },
		occ.WithRetryable(pgcas.Retryable), occ.WithBackOff(&backoff.ZeroBackOff{}))
	fired(t, &f, 4)
	if err != nil || n != 1 {
		t.Fatalf("update over a failed read = %d, %v; want 1", n, err)
	}
	if _, err := s.Get(ctx, "k"); err != nil {
		t.Fatal(err)
	}
}

// fired checks that the armed faults have fired n times in all.
func fired(t *testing.T, f *pgtest.Faults, n int) {
	t.Helper()
	if got := f.Fired(); got != n {
		t.Fatalf("faults fired %d times, want %d", got, n)
	}
}
