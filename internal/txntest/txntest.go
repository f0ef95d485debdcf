// Package txntest is the test suite of the SQL adapters' Txn, their
// optimistic transactions over rows of several repository tables (pgcas,
// sqlcas): an adapter's test gives it two tables, accounts and entries,
// through a Harness, and Run checks what Txn promises.
package txntest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/occ"
)

// Account is a row of the accounts table: id BIGINT key, balance BIGINT,
// version BIGINT.
type Account struct {
	ID      int64 `db:"id"`
	Balance int64 `db:"balance"`
	Version int64 `db:"version"`
}

// Entry is a row of the entries table: id BIGINT key, account BIGINT,
// amount BIGINT, version BIGINT; each transfer records one per account.
type Entry struct {
	ID      int64 `db:"id"`
	Account int64 `db:"account"`
	Amount  int64 `db:"amount"`
	Version int64 `db:"version"`
}

// Harness is an adapter's Txn and its two tables, made anew for each test.
// X is the adapter's Tx.
type Harness[X any] struct {
	// Open returns the functions of two fresh, empty tables.
	Open func(t *testing.T) Tables[X]
}

// Tables are the adapter's functions over the two tables of one test.
type Tables[X any] struct {
	Txn func(ctx context.Context, fn func(tx X) error, opts ...occ.Option) error

	GetAccount      func(tx X, id int64) (Account, bool, error)
	PrefetchAccount func(tx X, ids ...any) error
	PutAccount      func(tx X, a Account) error
	GetEntry        func(tx X, id int64) (Entry, bool, error)
	PutEntry        func(tx X, e Entry) error

	// The tables' own methods, outside any Txn.
	InsertAccount func(ctx context.Context, a Account) (Account, error)
	ReadAccount   func(ctx context.Context, id int64) (Account, error)
	UpdateAccount func(ctx context.Context, a Account) (Account, error)
	InsertEntry   func(ctx context.Context, e Entry) (Entry, error)
	ReadEntry     func(ctx context.Context, id int64) (Entry, error)
}

// Run runs the suite.
func Run[X any](t *testing.T, h Harness[X]) {
	t.Run("TransferAndLedger", func(t *testing.T) { transferAndLedger(t, h.Open(t)) })
	t.Run("RetriesFromChangedRows", func(t *testing.T) { retriesFromChangedRows(t, h.Open(t)) })
	t.Run("ReadRowsAreChecked", func(t *testing.T) { readRowsAreChecked(t, h.Open(t)) })
	t.Run("FnErrorWritesNothing", func(t *testing.T) { fnErrorWritesNothing(t, h.Open(t)) })
	t.Run("BadRows", func(t *testing.T) { badRows(t, h.Open(t)) })
	t.Run("ConcurrentTransfers", func(t *testing.T) { concurrentTransfers(t, h.Open(t)) })
	t.Run("EscalatesWithoutTurns", func(t *testing.T) { escalatesWithoutTurns(t, h.Open(t), false) })
	t.Run("EscalatedReadsOtherRows", func(t *testing.T) { escalatesWithoutTurns(t, h.Open(t), true) })
	t.Run("PrefetchedRowsAreChecked", func(t *testing.T) { prefetchedRowsAreChecked(t, h.Open(t)) })
	t.Run("NoWriteSkewOnAbsentRows", func(t *testing.T) { noWriteSkewOnAbsentRows(t, h.Open(t)) })
}

var errStop = errors.New("txntest: fn stops")

// testCtx is a test's context: a call that hangs (a transaction waiting
// for a connection its own locks hold, say) fails the test instead of
// hanging it.
func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func mustInsert[X any](t *testing.T, tb Tables[X], id, balance int64) Account {
	t.Helper()
	a, err := tb.InsertAccount(context.Background(), Account{ID: id, Balance: balance})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func mustRead[X any](t *testing.T, tb Tables[X], id int64) Account {
	t.Helper()
	a, err := tb.ReadAccount(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// deposit adds amount to account id outside any Txn, as another process
// changing a row between a transaction's read and its commit.
func deposit[X any](ctx context.Context, t *testing.T, tb Tables[X], id, amount int64) error {
	cur := mustRead(t, tb, id)
	cur.Balance += amount
	_, err := tb.UpdateAccount(ctx, cur)
	return err
}

// move moves amount from one account to another in tx: both read (in one
// round trip), both written.
func move[X any](tb Tables[X], tx X, from, to, amount int64) error {
	if err := tb.PrefetchAccount(tx, from, to); err != nil {
		return err
	}
	f, ok, err := tb.GetAccount(tx, from)
	if err != nil || !ok {
		return errors.Join(err, fmt.Errorf("account %d: %v", from, ok))
	}
	g, ok, err := tb.GetAccount(tx, to)
	if err != nil || !ok {
		return errors.Join(err, fmt.Errorf("account %d: %v", to, ok))
	}
	f.Balance -= amount
	g.Balance += amount
	if err := tb.PutAccount(tx, f); err != nil {
		return err
	}
	return tb.PutAccount(tx, g)
}

// transfer moves amount from one account to another and records it in
// two entries (ids entry and entry+1), in one Txn.
func transfer[X any](ctx context.Context, tb Tables[X], from, to, amount, entry int64, opts ...occ.Option) error {
	return tb.Txn(ctx, func(tx X) error {
		if err := move(tb, tx, from, to, amount); err != nil {
			return err
		}
		if err := tb.PutEntry(tx, Entry{ID: entry, Account: from, Amount: -amount}); err != nil {
			return err
		}
		return tb.PutEntry(tx, Entry{ID: entry + 1, Account: to, Amount: amount})
	}, opts...)
}

// transfers runs do(w, i) for each i below per on each of workers
// goroutines w at once, and returns how many of the calls failed once all
// have run; the first failure is reported with t.Errorf.
func transfers(t *testing.T, workers, per int, do func(w, i int) error) int64 {
	var failed atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range per {
				if err := do(w, i); err != nil && failed.Add(1) == 1 {
					t.Errorf("transfer: %v", err)
				}
			}
		})
	}
	wg.Wait()
	return failed.Load()
}

func transferAndLedger[X any](t *testing.T, tb Tables[X]) {
	ctx := testCtx(t)
	a := mustInsert(t, tb, 1, 100)
	b := mustInsert(t, tb, 2, 100)
	if err := transfer(ctx, tb, 1, 2, 30, 10); err != nil {
		t.Fatal(err)
	}
	a2, b2 := mustRead(t, tb, 1), mustRead(t, tb, 2)
	if a2.Balance != 70 || b2.Balance != 130 || a2.Version == a.Version || b2.Version == b.Version {
		t.Fatalf("after the transfer %+v %+v (before %+v %+v)", a2, b2, a, b)
	}
	for id, want := range map[int64]Entry{10: {ID: 10, Account: 1, Amount: -30}, 11: {ID: 11, Account: 2, Amount: 30}} {
		e, err := tb.ReadEntry(ctx, id)
		if err != nil || e.Account != want.Account || e.Amount != want.Amount || e.Version == 0 {
			t.Fatalf("entry %d = %+v, %v; want %+v with a version", id, e, err, want)
		}
	}
	// A second transfer that inserts an entry id the first one took:
	// it reads the entry as it is and updates it, since TxPut writes the
	// row as the transaction read it (present: an update).
	if err := transfer(ctx, tb, 2, 1, 5, 11); err != nil {
		t.Fatal(err)
	}
	if e, err := tb.ReadEntry(ctx, 11); err != nil || e.Account != 2 || e.Amount != -5 {
		t.Fatalf("entry 11 rewritten = %+v, %v", e, err)
	}
	if a, b := mustRead(t, tb, 1), mustRead(t, tb, 2); a.Balance+b.Balance != 200 || a.Balance != 75 {
		t.Fatalf("balances %d + %d", a.Balance, b.Balance)
	}
}

func retriesFromChangedRows[X any](t *testing.T, tb Tables[X]) {
	// A row changed between the transaction's read and its commit: the
	// commit writes nothing, and fn runs again from the row as it is.
	ctx := testCtx(t)
	mustInsert(t, tb, 1, 100)
	mustInsert(t, tb, 2, 100)
	calls := 0
	err := tb.Txn(ctx, func(tx X) error {
		calls++
		a, _, err := tb.GetAccount(tx, 1)
		if err != nil {
			return err
		}
		b, _, err := tb.GetAccount(tx, 2)
		if err != nil {
			return err
		}
		if calls == 1 {
			// Someone else deposits into 2 meanwhile.
			if err := deposit(ctx, t, tb, 2, 1000); err != nil {
				return err
			}
		}
		a.Balance -= 10
		b.Balance += 10
		if err := tb.PutAccount(tx, a); err != nil {
			return err
		}
		if err := tb.PutEntry(tx, Entry{ID: 1, Account: 1, Amount: -10}); err != nil {
			return err
		}
		return tb.PutAccount(tx, b)
	})
	if err != nil {
		t.Fatal(err)
	}
	if calls != 2 {
		t.Fatalf("fn ran %d times, want 2 (the first commit refused)", calls)
	}
	if a, b := mustRead(t, tb, 1), mustRead(t, tb, 2); a.Balance != 90 || b.Balance != 1110 {
		t.Fatalf("balances %d and %d, want 90 and 1110 (the deposit kept)", a.Balance, b.Balance)
	}
	if e, err := tb.ReadEntry(ctx, 1); err != nil || e.Amount != -10 {
		t.Fatalf("entry = %+v, %v", e, err)
	}
}

func readRowsAreChecked[X any](t *testing.T, tb Tables[X]) {
	// A row read and not written, and a row read as absent and not
	// written, are checked at the commit: a change to either makes the
	// transaction run again.
	ctx := testCtx(t)
	mustInsert(t, tb, 1, 100)
	mustInsert(t, tb, 2, 5)
	calls := 0
	err := tb.Txn(ctx, func(tx X) error {
		calls++
		limit, _, err := tb.GetAccount(tx, 2) // read only: a limit
		if err != nil {
			return err
		}
		if _, ok, err := tb.GetAccount(tx, 3); err != nil || ok { // read only: absent
			return errors.Join(err, fmt.Errorf("account 3 exists: %v", ok))
		}
		a, _, err := tb.GetAccount(tx, 1)
		if err != nil {
			return err
		}
		switch calls {
		case 1:
			if err := deposit(ctx, t, tb, 2, 45); err != nil { // the limit becomes 50
				return err
			}
		case 2:
			if _, err := tb.InsertAccount(ctx, Account{ID: 3, Balance: 1}); err != nil {
				return err
			}
		}
		a.Balance -= limit.Balance
		return tb.PutAccount(tx, a)
	})
	if calls < 3 {
		t.Fatalf("fn ran %d times (%v), want 3: each change of a row read must refuse a commit", calls, err)
	}
	if err == nil || err.Error() != "account 3 exists: true" {
		t.Fatalf("Txn = %v, want fn's error about account 3", err)
	}
	if a := mustRead(t, tb, 1); a.Balance != 100 {
		t.Fatalf("balance of 1 = %d, want 100 (nothing committed)", a.Balance)
	}
}

func fnErrorWritesNothing[X any](t *testing.T, tb Tables[X]) {
	ctx := testCtx(t)
	mustInsert(t, tb, 1, 100)
	err := tb.Txn(ctx, func(tx X) error {
		a, _, err := tb.GetAccount(tx, 1)
		if err != nil {
			return err
		}
		a.Balance = 0
		if err := tb.PutAccount(tx, a); err != nil {
			return err
		}
		if err := tb.PutEntry(tx, Entry{ID: 7, Account: 1, Amount: -100}); err != nil {
			return err
		}
		return errStop
	})
	if err != errStop {
		t.Fatalf("Txn = %v, want fn's error as is", err)
	}
	if a := mustRead(t, tb, 1); a.Balance != 100 {
		t.Fatalf("balance %d, want 100", a.Balance)
	}
	if _, err := tb.ReadEntry(ctx, 7); !errors.Is(err, cas.ErrNotFound) {
		t.Fatalf("entry 7: %v, want none", err)
	}
	// A cancelled context ends the call and writes nothing.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := transfer(cctx, tb, 1, 1, 1, 20); !errors.Is(err, context.Canceled) {
		t.Fatalf("Txn with a cancelled context = %v", err)
	}
}

func badRows[X any](t *testing.T, tb Tables[X]) {
	ctx := testCtx(t)
	err := tb.Txn(ctx, func(tx X) error { return tb.PutAccount(tx, Account{Balance: 1}) })
	if !errors.Is(err, cas.ErrInvalidKey) {
		t.Fatalf("a row with a zero key: %v, want cas.ErrInvalidKey", err)
	}
	if err := tb.Txn(ctx, func(X) error { return nil }); err != nil {
		t.Fatalf("an empty transaction: %v", err)
	}
}

func concurrentTransfers[X any](t *testing.T, tb Tables[X]) {
	// Workers move money between 3 hot accounts, each transfer also
	// inserting its two entries: at the end every transfer succeeded
	// (default options), the money is all there, and each account's
	// balance is its start plus the sum of its entries: the two tables
	// agree.
	ctx := testCtx(t)
	const accounts, start, workers, per = 3, 1000, 8, 15
	for id := int64(1); id <= accounts; id++ {
		mustInsert(t, tb, id, start)
	}
	failed := transfers(t, workers, per, func(w, i int) error {
		from := int64((w+i)%accounts) + 1
		to := from%accounts + 1
		entry := int64(1000 + 2*(w*per+i))
		return transfer(ctx, tb, from, to, int64(1+i%5), entry)
	})
	if failed > 0 {
		t.Fatalf("%d of %d transfers failed", failed, workers*per)
	}
	sums := map[int64]int64{}
	for w := range workers {
		for i := range per {
			for _, id := range []int64{int64(1000 + 2*(w*per+i)), int64(1001 + 2*(w*per+i))} {
				e, err := tb.ReadEntry(ctx, id)
				if err != nil {
					t.Fatalf("entry %d: %v", id, err)
				}
				sums[e.Account] += e.Amount
			}
		}
	}
	total := int64(0)
	for id := int64(1); id <= accounts; id++ {
		a := mustRead(t, tb, id)
		total += a.Balance
		if a.Balance != start+sums[id] {
			t.Errorf("account %d: balance %d, but its entries say %d", id, a.Balance, start+sums[id])
		}
	}
	if total != accounts*start {
		t.Fatalf("total %d, want %d", total, accounts*start)
	}
}

func escalatesWithoutTurns[X any](t *testing.T, tb Tables[X], feeRow bool) {
	// Without turns (as for callers in different processes) transfers
	// between two hot accounts keep losing commits to each other; at the
	// default attempt limit every one must still succeed, because a
	// transaction that keeps losing commits holding its rows' locks.
	// With feeRow, every other attempt also reads a third row, so an
	// escalated attempt may read a row it does not hold: through its own
	// transaction, not a connection the held locks could starve.
	ctx := testCtx(t)
	const start, workers, per = 1000, 16, 15
	mustInsert(t, tb, 1, start)
	mustInsert(t, tb, 2, start)
	mustInsert(t, tb, 3, 0)
	var attempts atomic.Int64
	failed := transfers(t, workers, per, func(w, i int) error {
		from, to := int64(1+(w+i)%2), int64(1+(w+i+1)%2)
		n := 0
		return tb.Txn(ctx, func(tx X) error {
			attempts.Add(1)
			n++
			if feeRow && n%2 == 0 {
				if _, _, err := tb.GetAccount(tx, 3); err != nil {
					return err
				}
			}
			return move(tb, tx, from, to, 1)
		}, occ.WithTurns(false))
	})
	if failed > 0 {
		t.Fatalf("%d of %d transfers failed (%d attempts)", failed, workers*per, attempts.Load())
	}
	if a, b := mustRead(t, tb, 1), mustRead(t, tb, 2); a.Balance+b.Balance != 2*start {
		t.Fatalf("balances %d + %d, want %d", a.Balance, b.Balance, 2*start)
	}
	t.Logf("%d transfers in %d attempts", workers*per, attempts.Load())
}

func prefetchedRowsAreChecked[X any](t *testing.T, tb Tables[X]) {
	// A row prefetched and never read with TxGet is read all the same:
	// checked at the commit like any row read and not written.
	ctx := testCtx(t)
	mustInsert(t, tb, 1, 100)
	mustInsert(t, tb, 2, 100)
	calls := 0
	err := tb.Txn(ctx, func(tx X) error {
		calls++
		if err := tb.PrefetchAccount(tx, 1, 2); err != nil {
			return err
		}
		a, _, err := tb.GetAccount(tx, 1)
		if err != nil {
			return err
		}
		if calls == 1 {
			if err := deposit(ctx, t, tb, 2, 1); err != nil {
				return err
			}
		}
		a.Balance--
		return tb.PutAccount(tx, a)
	})
	if err != nil || calls != 2 {
		t.Fatalf("Txn = %v after %d calls of fn; want nil after 2 (the prefetched row changed once)", err, calls)
	}
	if a, b := mustRead(t, tb, 1), mustRead(t, tb, 2); a.Balance != 99 || b.Balance != 101 {
		t.Fatalf("balances %d and %d, want 99 and 101", a.Balance, b.Balance)
	}
}

var errSkew = errors.New("txntest: the other row exists")

func noWriteSkewOnAbsentRows[X any](t *testing.T, tb Tables[X]) {
	// Two transactions each read as absent the row the other inserts, and
	// insert their own only then: at most one of them may commit (the
	// other, run again, finds the row and stops).
	ctx := testCtx(t)
	for round := range 12 {
		mine, theirs := int64(100+2*round), int64(101+2*round)
		var both sync.WaitGroup
		both.Add(2)
		errs := make([]error, 2)
		var wg sync.WaitGroup
		for side := range 2 {
			read, insert := theirs, mine
			if side == 1 {
				read, insert = mine, theirs
			}
			wg.Go(func() {
				first := true
				errs[side] = tb.Txn(ctx, func(tx X) error {
					_, ok, err := tb.GetAccount(tx, read)
					if err != nil {
						return err
					}
					if first {
						// Both read before either commits.
						first = false
						both.Done()
						both.Wait()
					}
					if ok {
						return errSkew
					}
					return tb.PutAccount(tx, Account{ID: insert, Balance: 1})
				})
			})
		}
		wg.Wait()
		if errs[0] == nil && errs[1] == nil {
			t.Fatalf("round %d: both transactions committed, each having read as absent the row the other inserted", round)
		}
		for _, err := range errs {
			if err != nil && !errors.Is(err, errSkew) {
				t.Fatalf("round %d: %v", round, err)
			}
		}
	}
}
