package pgcas_test

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
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
	s, _ := faultyStoreAndPool(t, f)
	return s
}

// faultyStoreAndPool is faultyStore with its pool.
func faultyStoreAndPool(t *testing.T, f *pgtest.Faults) (*pgcas.Store, *pgxpool.Pool) {
	t.Helper()
	pool := pgtest.Pool(t, f.Configure, func(c *pgxpool.Config) { c.MaxConns = 2 })
	s := storeOn(t, pool, pgcas.Config{})
	return s, pool
}

// fired checks that the armed faults have fired n times in all.
func fired(t *testing.T, f *pgtest.Faults, n int) {
	t.Helper()
	if got := f.Fired(); got != n {
		t.Fatalf("faults fired %d times, want %d", got, n)
	}
}

// wantAt checks that key holds value at version v.
func wantAt(t *testing.T, s *pgcas.Store, key, value string, v cas.Version) {
	t.Helper()
	it, err := s.Get(context.Background(), key)
	if err != nil || it.Version != v || string(it.Value) != value {
		t.Fatalf("get %s = %+v, %v; want %q at v%d", key, it, err, value, v)
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
	fired(t, &f, 1)
	if err != nil {
		t.Fatalf("swap with a lost reply: %v, want it resolved to success", err)
	}
	wantAt(t, s, "lost-key", "two", v2) // applied exactly once

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
	fired(t, &f, 1)
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
	wantAt(t, s, "k-amb", "two", v2)
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
	fired(t, &f, 1)
	if err == nil || errors.Is(err, cas.ErrAmbiguous) || errors.Is(err, cas.ErrConflict) {
		t.Fatalf("err = %v, want a plain error", err)
	}
	wantAt(t, s, "k-send", "one", v1) // untouched
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
	fired(t, &f, 1)
	if err != nil {
		t.Fatalf("commit with a lost reply: %v, want it resolved", err)
	}
	wantAt(t, s, "a", "A2", vs[0])
	wantAt(t, s, "commit-b", "B", vs[1])
}

// Faults on a transfer's commit (writes of rows read: one statement): a
// lost reply after it applied is resolved by the write id; a request
// never sent is not ambiguous, and wrote nothing; nor is a commit for
// which no connection could be had (the server refused them).
func TestTransferCommitFaults(t *testing.T) {
	ctx := context.Background()
	setup := func(t *testing.T) (*pgtest.Faults, *pgcas.Store, *pgxpool.Pool, []cas.Op) {
		f := &pgtest.Faults{}
		s, pool := faultyStoreAndPool(t, f)
		a, _ := s.CompareAndSwap(ctx, "xfer-a", 0, []byte("10"))
		b, _ := s.CompareAndSwap(ctx, "xfer-b", 0, []byte("10"))
		return f, s, pool, []cas.Op{cas.Put("xfer-a", a, []byte("9")), cas.Put("xfer-b", b, []byte("11"))}
	}
	untouched := func(t *testing.T, s *pgcas.Store, ops []cas.Op) {
		t.Helper()
		for _, op := range ops {
			wantAt(t, s, op.Key, "10", op.Expected)
		}
	}
	t.Run("LostReply", func(t *testing.T) {
		f, s, _, ops := setup(t)
		f.LoseReply("xfer-b")
		vs, err := s.Commit(ctx, ops)
		fired(t, f, 1)
		if err != nil {
			t.Fatalf("transfer with a lost reply: %v, want it resolved", err)
		}
		for i, op := range ops {
			wantAt(t, s, op.Key, string(op.Value), vs[i])
		}
	})
	t.Run("NeverSent", func(t *testing.T) {
		f, s, _, ops := setup(t)
		f.FailSend("xfer-b")
		_, err := s.Commit(ctx, ops)
		fired(t, f, 1)
		if err == nil || errors.Is(err, cas.ErrAmbiguous) || errors.Is(err, cas.ErrConflict) || !pgcas.Retryable(err) {
			t.Fatalf("transfer never sent: %v, want a retryable error, not ambiguous", err)
		}
		untouched(t, s, ops)
	})
	t.Run("NoConnection", func(t *testing.T) {
		f, s, pool, ops := setup(t)
		pool.Reset() // no idle connection: the commit must dial
		f.RefuseConnections(100)
		_, err := s.Commit(ctx, ops)
		if err == nil || errors.Is(err, cas.ErrAmbiguous) || !pgcas.Retryable(err) {
			t.Fatalf("transfer with no connection to be had: %v, want a retryable error, not ambiguous", err)
		}
		f.RefuseConnections(0)
		untouched(t, s, ops)
	})
}

// Transport failures that applied nothing are retryable (Retryable): a
// write that was never sent, a read that failed in transit; an update
// through occ with pgcas.Retryable rides over them. Lost replies are not.
func TestRetryableTransportFailures(t *testing.T) {
	ctx := context.Background()
	var f pgtest.Faults
	s := faultyStore(t, &f)
	v1, _ := s.CompareAndSwap(ctx, "retry-key", 0, []byte("1"))

	f.FailSend("retry-key")
	_, err := s.CompareAndSwap(ctx, "retry-key", v1, []byte("2"))
	fired(t, &f, 1)
	if !pgcas.Retryable(err) || errors.Is(err, cas.ErrConflict) || errors.Is(err, cas.ErrAmbiguous) {
		t.Fatalf("unsent write: %v; Retryable %v; want Retryable, neither a conflict nor ambiguous", err, pgcas.Retryable(err))
	}

	f.FailSend("retry-key")
	_, err = s.Get(ctx, "retry-key")
	fired(t, &f, 2)
	if !pgcas.Retryable(err) {
		t.Fatalf("failed read: %v, want Retryable", err)
	}

	f.LoseReply("retry-key")
	_, err = s.Commit(ctx, []cas.Op{cas.Put("other", 0, []byte("x")), cas.Check("retry-key", v1+1000)})
	if errors.Is(err, cas.ErrAmbiguous) && pgcas.Retryable(err) {
		t.Fatalf("an ambiguous outcome must not be retryable: %v", err)
	}

	// occ with Retryable: a read that fails once is retried.
	counters := cas.NewTyped[int](s, cas.JSON[int]())
	if _, err := s.CompareAndSwap(ctx, "retry-counter", 0, []byte("0")); err != nil {
		t.Fatal(err)
	}
	f.FailSend("retry-counter")
	n, _, err := occ.Update(ctx, counters, "retry-counter", func(n int, _ bool) (int, error) { return n + 1, nil },
		occ.WithRetryable(pgcas.Retryable), occ.WithBackOff(&backoff.ZeroBackOff{}))
	fired(t, &f, 4)
	if err != nil || n != 1 {
		t.Fatalf("update over a failed read = %d, %v; want 1", n, err)
	}
	if _, err := s.Get(ctx, "retry-key"); err != nil {
		t.Fatal(err)
	}
}

// wantNotApplied checks that err is a failure Retryable accepts, neither
// ambiguous nor a conflict, keeping the cause reachable.
func wantNotApplied(t *testing.T, what string, err error, cause any) {
	t.Helper()
	if err == nil || !pgcas.Retryable(err) || errors.Is(err, cas.ErrAmbiguous) || errors.Is(err, cas.ErrConflict) {
		t.Fatalf("%s: %v; want an error Retryable accepts, not ambiguous, not a conflict", what, err)
	}
	if cause != nil && !errors.As(err, cause) {
		t.Fatalf("%s: %v; the cause (%T) is not reachable", what, err, cause)
	}
}

// Fault: no connection can be made while a write or a read starts: the
// server is down (connection refused), or refuses sessions while it shuts
// down or starts up (SQLSTATE 57P03). Nothing was sent: Retryable, and an
// update through occ rides over a failure between its read and its write.
func TestConnectFailuresRetryable(t *testing.T) {
	tests := []struct {
		name  string
		arm   func(f *pgtest.Faults, n int)
		cause func() any
	}{
		{"Refused", func(f *pgtest.Faults, n int) { f.RefuseConnections(n) },
			func() any { return new(*net.OpError) }},
		{"ShuttingDown", func(f *pgtest.Faults, n int) {
			f.RejectSessions(n, "57P03", "the database system is shutting down")
		}, func() any { return new(*pgconn.PgError) }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			var f pgtest.Faults
			s := faultyStore(t, &f)
			v1, err := s.CompareAndSwap(ctx, "k", 0, []byte("1"))
			if err != nil {
				t.Fatal(err)
			}
			down := func() {
				s.Pool().Reset() // close the idle connections: the next call dials
				tc.arm(&f, 1)
			}

			wantFaultsApplyNothing(t, s, v1, down, func(step int, op string, err error) {
				fired(t, &f, step)
				if err == nil {
					return // the update, which rode over its fault
				}
				wantNotApplied(t, op, err, tc.cause())
				if ce := new(*pgconn.ConnectError); op == "swap" && !errors.As(err, ce) {
					t.Fatalf("swap: %v; the *pgconn.ConnectError is not reachable", err)
				}
			})
		})
	}
}

// terminator ends the backend of the one connection of a store's pool the
// way a fast shutdown does (pg_terminate_backend: SIGTERM, SQLSTATE 57P01),
// while the connection is idle in the pool, and waits until the backend
// has gone. The client learns it only from the next statement it sends,
// whose answer is the FATAL error.
func terminator(t *testing.T, s *pgcas.Store) func() {
	t.Helper()
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, pgtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Close(ctx) })
	return func() {
		t.Helper()
		var pid uint32
		if err := s.Pool().QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
			t.Fatal(err)
		}
		terminate(t, admin, pid)
	}
}

// terminate ends backend pid and waits until it has gone.
func terminate(t *testing.T, admin *pgx.Conn, pid uint32) {
	t.Helper()
	ctx := context.Background()
	if _, err := admin.Exec(ctx, `SELECT pg_terminate_backend($1)`, int(pid)); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; {
		var n int
		if err := admin.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE pid = $1`, int(pid)).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("backend %d still there", pid)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// is57P01 checks that err carries the server's admin_shutdown error, so
// that the test exercises what it means to.
func is57P01(t *testing.T, what string, err error) {
	t.Helper()
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "57P01" {
		t.Fatalf("%s: %v; want SQLSTATE 57P01 from the server", what, err)
	}
}

// Fault: the server ends the session (SQLSTATE 57P01, as a fast shutdown
// or pg_terminate_backend does) while the connection is idle; the next
// write, commit or read on it is answered with that error instead of
// running. Nothing applied: Retryable.
func TestSessionEndedRetryable(t *testing.T) {
	ctx := context.Background()
	never := func(context.Context, pgxpool.ShouldPingParams) bool { return false }
	pool := pgtest.Pool(t, func(c *pgxpool.Config) { c.MaxConns, c.ShouldPing = 1, never })
	s := storeOn(t, pool, pgcas.Config{})
	kill := terminator(t, s)
	v1, err := s.CompareAndSwap(ctx, "k", 0, []byte("1"))
	if err != nil {
		t.Fatal(err)
	}

	wantFaultsApplyNothing(t, s, v1, kill, func(_ int, op string, err error) {
		if err != nil {
			is57P01(t, op, err)
			wantNotApplied(t, op, err, nil)
		}
	})
}

// wantFaultsApplyNothing runs fault before a swap of "k" (at version v1),
// a commit and a get of s, each of which must fail, and between the read
// and the write of an occ.Update of "n" with Retryable: nothing applied,
// and the update reads again and writes once. check gets each failed
// call's error (op "swap", "commit", "get"), then the update's nil error;
// step counts the faults so far.
func wantFaultsApplyNothing(t *testing.T, s *pgcas.Store, v1 cas.Version, fault func(), check func(step int, op string, err error)) {
	t.Helper()
	ctx := context.Background()
	fault()
	_, err := s.CompareAndSwap(ctx, "k", v1, []byte("2"))
	check(1, "swap", err)

	fault()
	_, err = s.Commit(ctx, []cas.Op{cas.Put("k", v1, []byte("2")), cas.Put("k2", 0, []byte("x"))})
	check(2, "commit", err)

	fault()
	_, err = s.Get(ctx, "k")
	check(3, "get", err)

	if it, err := s.Get(ctx, "k"); err != nil || it.Version != v1 {
		t.Fatalf("get = %+v, %v; want v%d untouched", it, err, v1)
	}
	if _, err := s.Get(ctx, "k2"); !errors.Is(err, cas.ErrNotFound) {
		t.Fatalf("get k2: %v, want not found (the commit applied nothing)", err)
	}

	// The fault comes between the read and the write of an update: occ,
	// with Retryable, reads again and writes once.
	counters := cas.NewTyped[int](s, cas.JSON[int]())
	if _, err := s.CompareAndSwap(ctx, "n", 0, []byte("0")); err != nil {
		t.Fatal(err)
	}
	calls := 0
	n, _, err := occ.Update(ctx, counters, "n", func(n int, _ bool) (int, error) {
		if calls++; calls == 1 {
			fault()
		}
		return n + 1, nil
	}, occ.WithRetryable(pgcas.Retryable), occ.WithBackOff(&backoff.ZeroBackOff{}))
	if err != nil || n != 1 || calls != 2 {
		t.Fatalf("update over a fault = %d, %v after %d calls; want 1 after 2", n, err, calls)
	}
	check(4, "update", nil)
	if got, _, err := counters.Get(ctx, "n"); err != nil || got != 1 {
		t.Fatalf("n = %d, %v; want 1 (applied once)", got, err)
	}
}

// A write or commit whose reply was lost after it was sent, and that the
// write id cannot resolve (it did not apply, the key moved on), stays
// ambiguous: Retryable refuses it, and occ does not run it again even
// with Retryable.
func TestLostReplyNotRetried(t *testing.T) {
	ctx := context.Background()
	var f pgtest.Faults
	s := faultyStore(t, &f)
	counters := cas.NewTyped[int](s, cas.JSON[int]())
	if _, err := s.CompareAndSwap(ctx, "lost-counter", 0, []byte("0")); err != nil {
		t.Fatal(err)
	}
	calls := 0
	_, _, err := occ.Update(ctx, counters, "lost-counter", func(n int, _ bool) (int, error) {
		if calls++; calls == 1 {
			// Another writer moves the key on, and the reply to this
			// update's (now stale) write is lost.
			it, err := s.Get(ctx, "lost-counter")
			if err != nil {
				t.Error(err)
			}
			if _, err := s.CompareAndSwap(ctx, "lost-counter", it.Version, []byte("10")); err != nil {
				t.Error(err)
			}
			f.LoseReply("lost-counter")
		}
		return n + 1, nil
	}, occ.WithRetryable(pgcas.Retryable), occ.WithBackOff(&backoff.ZeroBackOff{}))
	fired(t, &f, 1)
	if !errors.Is(err, cas.ErrAmbiguous) || pgcas.Retryable(err) || calls != 1 {
		t.Fatalf("update with a lost, unresolvable reply: %v after %d calls; want ErrAmbiguous after 1, not Retryable", err, calls)
	}

	v, err := s.CompareAndSwap(ctx, "a", 0, []byte("A"))
	if err != nil {
		t.Fatal(err)
	}
	f.LoseReply("commit-x")
	_, err = s.Commit(ctx, []cas.Op{cas.Put("a", v+1000, []byte("stale")), cas.Put("commit-x", 0, []byte("X"))})
	fired(t, &f, 2)
	if !errors.Is(err, cas.ErrAmbiguous) || pgcas.Retryable(err) {
		t.Fatalf("commit with a lost, unresolvable reply: %v; want ErrAmbiguous, not Retryable", err)
	}
}
