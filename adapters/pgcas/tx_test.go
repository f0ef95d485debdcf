package pgcas_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/occkit/occkit/adapters/pgcas"
	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/internal/pgtest"
	"github.com/occkit/occkit/occ"
)

var errLastDoctor = errors.New("the last doctor on call cannot leave")

// offCall is the write-skew classic: a doctor may go off call only if
// another one stays on call. Under SERIALIZABLE, two doctors doing it at
// once cannot both succeed: one transaction fails with 40001.
func offCall(ctx context.Context, pool *pgxpool.Pool, name string, barrier *sync.WaitGroup, attempts *atomic.Int64, opts ...occ.Option) error {
	first := true
	return pgcas.RunTx(ctx, pool, pgx.TxOptions{IsoLevel: pgx.Serializable}, func(tx pgx.Tx) error {
		attempts.Add(1)
		var onCall int
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM doctors WHERE on_call`).Scan(&onCall); err != nil {
			return err
		}
		if first {
			// Both transactions read before either writes.
			first = false
			barrier.Done()
			barrier.Wait()
		}
		if onCall < 2 {
			return errLastDoctor
		}
		_, err := tx.Exec(ctx, `UPDATE doctors SET on_call = false WHERE name = $1`, name)
		return err
	}, opts...)
}

func doctors(t *testing.T) *pgxpool.Pool {
	t.Helper()
	pool := pgtest.Pool(t)
	if _, err := pool.Exec(context.Background(), `CREATE TABLE doctors (name text PRIMARY KEY, on_call bool NOT NULL);
		INSERT INTO doctors VALUES ('alice', true), ('bob', true)`); err != nil {
		t.Fatal(err)
	}
	return pool
}

// both runs offCall for alice and bob at once and returns their errors.
func both(pool *pgxpool.Pool, attempts *atomic.Int64, opts ...occ.Option) [2]error {
	var barrier, done sync.WaitGroup
	barrier.Add(2)
	var errs [2]error
	for i, name := range []string{"alice", "bob"} {
		done.Add(1)
		go func() {
			defer done.Done()
			errs[i] = offCall(context.Background(), pool, name, &barrier, attempts, opts...)
		}()
	}
	done.Wait()
	return errs
}

func TestRunTxSerializationFailureIsAConflict(t *testing.T) {
	pool := doctors(t)
	var attempts atomic.Int64
	errs := both(pool, &attempts, occ.WithMaxAttempts(1))
	var failed error
	for _, err := range errs {
		if err != nil {
			if failed != nil {
				t.Fatalf("both transactions failed: %v", errs)
			}
			failed = err
		}
	}
	if failed == nil {
		t.Fatal("both transactions committed: write skew under SERIALIZABLE")
	}
	var pgErr *pgconn.PgError
	if !errors.Is(failed, cas.ErrConflict) || !errors.As(failed, &pgErr) || pgErr.Code != "40001" {
		t.Fatalf("err = %v, want ErrConflict with a *pgconn.PgError 40001", failed)
	}
	if !errors.Is(failed, occ.ErrAttemptsExhausted) {
		t.Fatalf("err = %v, want the attempt limit as the reason", failed)
	}
}

func TestRunTxRetriesSerializationFailure(t *testing.T) {
	pool := doctors(t)
	var attempts atomic.Int64
	var conflicts atomic.Int64
	obs := occ.ObserverFuncs{Attempt: func(_ context.Context, a occ.Attempt) {
		if a.Outcome == occ.OutcomeConflict {
			conflicts.Add(1)
		}
	}}
	errs := both(pool, &attempts, occ.WithObserver(obs))
	// One committed; the other failed with 40001, ran again, saw one
	// doctor left and stopped with its own error, unwrapped.
	if !(errs[0] == nil && errors.Is(errs[1], errLastDoctor) || errs[1] == nil && errors.Is(errs[0], errLastDoctor)) {
		t.Fatalf("errors = %v, want one nil and one errLastDoctor", errs)
	}
	if attempts.Load() != 3 || conflicts.Load() != 1 {
		t.Fatalf("%d attempts, %d conflicts; want 3 and 1", attempts.Load(), conflicts.Load())
	}
	var onCall int
	pool.QueryRow(context.Background(), `SELECT count(*) FROM doctors WHERE on_call`).Scan(&onCall)
	if onCall != 1 {
		t.Fatalf("%d doctors on call, want 1", onCall)
	}
}

// eventsPool returns a pool over a fresh schema holding an empty table
// events (id int PRIMARY KEY), and a count of its rows.
func eventsPool(t *testing.T, configure ...func(*pgxpool.Config)) (*pgxpool.Pool, func() int) {
	t.Helper()
	ctx := context.Background()
	pool := pgtest.Pool(t, configure...)
	if _, err := pool.Exec(ctx, `CREATE TABLE events (id int PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	return pool, func() int {
		t.Helper()
		var n int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM events`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
}

// runTxFaulted runs pgcas.RunTx, with opts, of a function that inserts
// an event into a fresh events table, then arms a fault of the COMMIT that
// follows with arm. It returns how many times the function ran, the
// events committed and RunTx's error.
func runTxFaulted(t *testing.T, arm func(f *pgtest.Faults), opts ...occ.Option) (calls, events int, err error) {
	t.Helper()
	ctx := context.Background()
	var f pgtest.Faults
	pool, count := eventsPool(t, f.Configure)
	err = pgcas.RunTx(ctx, pool, pgx.TxOptions{}, func(tx pgx.Tx) error {
		calls++
		_, err := tx.Exec(ctx, `INSERT INTO events VALUES (1)`)
		arm(&f)
		return err
	}, opts...)
	fired(t, &f, 1)
	return calls, count(), err
}

// Fault: dropped connection after COMMIT was sent (and applied). The
// outcome is unknown to the client: ErrAmbiguous, and the function is not
// run again.
func TestRunTxAmbiguousCommit(t *testing.T) {
	calls, events, err := runTxFaulted(t, func(f *pgtest.Faults) { f.LoseReply("commit") }, occ.WithRetryable(pgcas.Retryable))
	if !errors.Is(err, cas.ErrAmbiguous) || errors.Is(err, cas.ErrConflict) || pgcas.Retryable(err) || calls != 1 {
		t.Fatalf("err = %v after %d calls, want ErrAmbiguous, not Retryable, after 1 (also with Retryable)", err, calls)
	}
	if events != 1 {
		t.Fatalf("events = %d; want the one committed row (applied once)", events)
	}
}

// Fault: the connection breaks before COMMIT is sent: rolled back, a
// plain error, not retried.
func TestRunTxCommitNotSent(t *testing.T) {
	calls, events, err := runTxFaulted(t, func(f *pgtest.Faults) { f.FailSend("commit") })
	if err == nil || errors.Is(err, cas.ErrAmbiguous) || errors.Is(err, cas.ErrConflict) || !pgcas.Retryable(err) || calls != 1 {
		t.Fatalf("err = %v after %d calls, want a plain error Retryable accepts after 1", err, calls)
	}
	if events != 0 {
		t.Fatalf("events = %d; want none", events)
	}
}

// Fault: the server ends the session while the transaction is idle before
// COMMIT (SQLSTATE 57P01, as a fast shutdown does): COMMIT is answered
// with that error, and the transaction was rolled back. Retryable accepts
// it, so with occ.WithRetryable(pgcas.Retryable) the function runs again
// and commits once.
func TestRunTxCommitSessionEnded(t *testing.T) {
	ctx := context.Background()
	pool, count := eventsPool(t)
	admin, err := pgx.Connect(ctx, pgtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	for _, retry := range []bool{false, true} {
		var opts []occ.Option
		if retry {
			opts = append(opts, occ.WithRetryable(pgcas.Retryable))
		}
		calls := 0
		err := pgcas.RunTx(ctx, pool, pgx.TxOptions{}, func(tx pgx.Tx) error {
			calls++
			if _, err := tx.Exec(ctx, `INSERT INTO events VALUES (1)`); err != nil {
				return err
			}
			if calls == 1 {
				terminate(t, admin, tx.Conn().PgConn().PID())
			}
			return nil
		}, opts...)
		if !retry {
			is57P01(t, "commit", err)
			if !pgcas.Retryable(err) || errors.Is(err, cas.ErrAmbiguous) || errors.Is(err, cas.ErrConflict) || calls != 1 {
				t.Fatalf("err = %v after %d calls; want an error Retryable accepts after 1", err, calls)
			}
			if n := count(); n != 0 {
				t.Fatalf("%d events, want none (rolled back)", n)
			}
			continue
		}
		if err != nil || calls != 2 {
			t.Fatalf("with Retryable: err = %v after %d calls; want success after 2", err, calls)
		}
		if n := count(); n != 1 {
			t.Fatalf("%d events, want 1 (committed once)", n)
		}
	}
}

func TestRunTxErrors(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.Pool(t)
	mine := errors.New("mine")
	calls := 0
	err := pgcas.RunTx(ctx, pool, pgx.TxOptions{}, func(tx pgx.Tx) error { calls++; return mine })
	if err != mine || calls != 1 {
		t.Fatalf("err = %v after %d calls, want fn's error as is after 1", err, calls)
	}
	// A failed statement that is not a serialization failure: not retried.
	err = pgcas.RunTx(ctx, pool, pgx.TxOptions{}, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `SELECT * FROM no_such_table`)
		return err
	})
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "42P01" || errors.Is(err, cas.ErrConflict) {
		t.Fatalf("err = %v", err)
	}
	// Deadlock is retryable too.
	if !pgcas.IsSerializationFailure(&pgconn.PgError{Code: "40P01"}) || pgcas.IsSerializationFailure(&pgconn.PgError{Code: "23505"}) {
		t.Fatal("isSerializationFailure is wrong")
	}
	if !pgcas.Retryable(&pgconn.PgError{Code: "40P01"}) || pgcas.Retryable(&pgconn.PgError{Code: "23505"}) {
		t.Fatal("Retryable is wrong")
	}
}

// endLeakedTx makes the server end a transaction left open for 5 s, so
// that a test that leaks one fails instead of hanging on the schema drop
// at its end.
func endLeakedTx(c *pgxpool.Config) {
	c.ConnConfig.RuntimeParams["idle_in_transaction_session_timeout"] = "5s"
}

// Regression: a panic in fn used to leave the transaction open and its
// connection out of the pool, still holding the row lock it took. The
// panic reaches the caller; the transaction is rolled back.
func TestRunTxPanicRollsBack(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.Pool(t, endLeakedTx, func(c *pgxpool.Config) { c.MaxConns = 2 })
	if _, err := pool.Exec(ctx, `CREATE TABLE counters (id int PRIMARY KEY, n int NOT NULL);
		INSERT INTO counters VALUES (1, 0)`); err != nil {
		t.Fatal(err)
	}
	func() {
		defer func() {
			if r := recover(); r != "boom" {
				t.Fatalf("recovered %v, want the panic of fn", r)
			}
		}()
		_ = pgcas.RunTx(ctx, pool, pgx.TxOptions{}, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `UPDATE counters SET n = n + 1 WHERE id = 1`); err != nil {
				return err
			}
			panic("boom")
		})
	}()
	if n := pool.Stat().AcquiredConns(); n != 0 {
		t.Fatalf("%d connections still acquired after the panic, want 0", n)
	}
	wctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if _, err := pool.Exec(wctx, `UPDATE counters SET n = n + 10 WHERE id = 1`); err != nil {
		t.Fatalf("update of the row fn had locked: %v (the transaction is still open)", err)
	}
	var n int
	if err := pool.QueryRow(ctx, `SELECT n FROM counters WHERE id = 1`).Scan(&n); err != nil || n != 10 {
		t.Fatalf("n = %d, %v; want 10 (fn's update rolled back)", n, err)
	}
}

// Regression: the same for Store.UpdateLocked when mutate panics while
// it holds the row lock of SELECT ... FOR UPDATE.
func TestUpdateLockedPanicRollsBack(t *testing.T) {
	ctx := context.Background()
	s := storeOn(t, pgtest.Pool(t, endLeakedTx), pgcas.Config{})
	v, err := s.CompareAndSwap(ctx, "k", 0, []byte("a"))
	if err != nil {
		t.Fatal(err)
	}
	func() {
		defer func() {
			if r := recover(); r != "boom" {
				t.Fatalf("recovered %v, want the panic of mutate", r)
			}
		}()
		_, _ = s.UpdateLocked(ctx, "k", func([]byte, bool) ([]byte, error) { panic("boom") })
	}()
	if n := s.Pool().Stat().AcquiredConns(); n != 0 {
		t.Fatalf("%d connections still acquired after the panic, want 0", n)
	}
	wctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if _, err := s.CompareAndSwap(wctx, "k", v, []byte("b")); err != nil {
		t.Fatalf("write of the key mutate had locked: %v", err)
	}
}

// Regression: a serialization failure used to be a plain error wrapping
// cas.ErrConflict, not the *cas.ConflictError cas.ErrConflict promises.
func TestRunTxConflictIsConflictError(t *testing.T) {
	pool := doctors(t)
	var attempts atomic.Int64
	errs := both(pool, &attempts, occ.WithMaxAttempts(1))
	failed := errs[0]
	if failed == nil {
		failed = errs[1]
	}
	var ce *cas.ConflictError
	if !errors.As(failed, &ce) || ce.Key != "(transaction)" {
		t.Fatalf("err = %v, want a *cas.ConflictError for the transaction", failed)
	}
	var pgErr *pgconn.PgError
	if !errors.As(ce, &pgErr) || pgErr.Code != "40001" {
		t.Fatalf("conflict %v does not carry the *pgconn.PgError 40001", ce)
	}
}

// Regression: occ.Retry used to run fn again for any error of fn matching
// cas.ErrConflict, not only for PostgreSQL's 40001 and 40P01.
func TestRunTxDoesNotRetryOtherConflicts(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.Pool(t)
	notMine := &cas.ConflictError{Key: "elsewhere", Expected: 3}
	calls := 0
	err := pgcas.RunTx(ctx, pool, pgx.TxOptions{}, func(tx pgx.Tx) error { calls++; return notMine })
	if err != error(notMine) || calls != 1 {
		t.Fatalf("err = %v after %d calls, want fn's conflict as is after 1", err, calls)
	}

	// Errors of fn still reach the options' classifiers.
	errTemporary := errors.New("temporary")
	calls = 0
	err = pgcas.RunTx(ctx, pool, pgx.TxOptions{}, func(tx pgx.Tx) error {
		if calls++; calls == 1 {
			return errTemporary
		}
		return nil
	}, occ.WithRetryable(func(err error) bool { return errors.Is(err, errTemporary) }))
	if err != nil || calls != 2 {
		t.Fatalf("err = %v after %d calls, want success after 2", err, calls)
	}

	// A context that ends while fn fails: fn's error, unwrapped, in the
	// *occ.GiveUpError.
	cctx, cancel := context.WithCancel(ctx)
	mine := errors.New("mine")
	err = pgcas.RunTx(cctx, pool, pgx.TxOptions{}, func(tx pgx.Tx) error { cancel(); return mine })
	var ge *occ.GiveUpError
	if !errors.As(err, &ge) || ge.Last != mine || !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %#v, want a *occ.GiveUpError with Last = fn's error", err)
	}
}
