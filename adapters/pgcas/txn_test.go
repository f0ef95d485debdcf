package pgcas_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/occkit/occkit/adapters/pgcas"
	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/internal/pgtest"
	"github.com/occkit/occkit/internal/txntest"
	"github.com/occkit/occkit/occ"
)

// txnTables creates txntest's accounts and entries tables in pool's
// schema and returns them.
func txnTables(t *testing.T, pool *pgxpool.Pool) (*pgcas.Table[txntest.Account], *pgcas.Table[txntest.Entry]) {
	t.Helper()
	ctx := context.Background()
	for _, ddl := range []string{
		`CREATE TABLE accounts (id bigint PRIMARY KEY, balance bigint NOT NULL, version bigserial NOT NULL)`,
		`CREATE TABLE entries (id bigint PRIMARY KEY, account bigint NOT NULL, amount bigint NOT NULL, version bigserial NOT NULL)`,
	} {
		if _, err := pool.Exec(ctx, ddl); err != nil {
			t.Fatal(err)
		}
	}
	accounts, err := pgcas.NewTable[txntest.Account](pool, pgcas.TableConfig{Table: "accounts"})
	if err != nil {
		t.Fatal(err)
	}
	entries, err := pgcas.NewTable[txntest.Entry](pool, pgcas.TableConfig{Table: "entries"})
	if err != nil {
		t.Fatal(err)
	}
	return accounts, entries
}

func TestTxn(t *testing.T) {
	txntest.Run(t, txntest.Harness[*pgcas.Tx]{Open: func(t *testing.T) txntest.Tables[*pgcas.Tx] {
		// A small pool: an escalated attempt holding row locks must not
		// need a second connection (EscalatedReadsOtherRows).
		pool := pgtest.Pool(t, func(c *pgxpool.Config) { c.MaxConns = 4 })
		accounts, entries := txnTables(t, pool)
		return txntest.Tables[*pgcas.Tx]{
			Txn: func(ctx context.Context, fn func(*pgcas.Tx) error, opts ...occ.Option) error {
				return pgcas.Txn(ctx, fn, opts...)
			},
			GetAccount:      func(tx *pgcas.Tx, id int64) (txntest.Account, bool, error) { return pgcas.TxGet(tx, accounts, id) },
			PrefetchAccount: func(tx *pgcas.Tx, ids ...any) error { return pgcas.TxPrefetch(tx, accounts, ids...) },
			PutAccount:      func(tx *pgcas.Tx, a txntest.Account) error { return pgcas.TxPut(tx, accounts, a) },
			GetEntry:        func(tx *pgcas.Tx, id int64) (txntest.Entry, bool, error) { return pgcas.TxGet(tx, entries, id) },
			PutEntry:        func(tx *pgcas.Tx, e txntest.Entry) error { return pgcas.TxPut(tx, entries, e) },
			InsertAccount:   accounts.Insert,
			ReadAccount:     func(ctx context.Context, id int64) (txntest.Account, error) { return accounts.Get(ctx, id) },
			UpdateAccount:   accounts.Update,
			InsertEntry:     entries.Insert,
			ReadEntry:       func(ctx context.Context, id int64) (txntest.Entry, error) { return entries.Get(ctx, id) },
		}
	}})
}

// TestTxnEscalatedReadsThroughItsTransaction: an escalated attempt (here
// the second, WithExclusiveAfter(1)) that reads a row it does not hold
// reads it through its own transaction: with one connection in the pool,
// a read through the pool would wait for the connection the attempt
// holds until the context ends.
func TestTxnEscalatedReadsThroughItsTransaction(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	pool := pgtest.Pool(t, func(c *pgxpool.Config) { c.MaxConns = 1 })
	if _, err := pool.Exec(ctx, `CREATE TABLE accounts (id bigint PRIMARY KEY, balance bigint NOT NULL, version bigserial NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	accounts, err := pgcas.NewTable[txntest.Account](pool, pgcas.TableConfig{Table: "accounts"})
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []int64{1, 2} {
		if _, err := accounts.Insert(ctx, txntest.Account{ID: id, Balance: 10}); err != nil {
			t.Fatal(err)
		}
	}
	calls := 0
	err = pgcas.Txn(ctx, func(tx *pgcas.Tx) error {
		calls++
		a, _, err := pgcas.TxGet(tx, accounts, int64(1))
		if err != nil {
			return err
		}
		if calls == 1 {
			cur, err := accounts.Get(ctx, int64(1))
			if err != nil {
				return err
			}
			cur.Balance = 100
			if _, err := accounts.Update(ctx, cur); err != nil {
				return err
			}
		} else if _, _, err := pgcas.TxGet(tx, accounts, int64(2)); err != nil {
			return err
		}
		a.Balance++
		return pgcas.TxPut(tx, accounts, a)
	}, occ.WithExclusiveAfter(1))
	if err != nil || calls != 2 {
		t.Fatalf("Txn = %v after %d calls of fn; want nil after 2", err, calls)
	}
	if a, err := accounts.Get(ctx, int64(1)); err != nil || a.Balance != 101 {
		t.Fatalf("account 1 = %+v, %v; want balance 101", a, err)
	}
}

// batchTracer counts the statements of the batches a pool sends, and the
// statements it sends on their own.
type batchTracer struct {
	mu      sync.Mutex
	batches []int // statements per batch
	single  int
}

func (b *batchTracer) TraceBatchStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceBatchStartData) context.Context {
	b.mu.Lock()
	b.batches = append(b.batches, data.Batch.Len())
	b.mu.Unlock()
	return ctx
}
func (b *batchTracer) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (b *batchTracer) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}
func (b *batchTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	b.mu.Lock()
	b.single++
	b.mu.Unlock()
	return ctx
}
func (b *batchTracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (b *batchTracer) reset() {
	b.mu.Lock()
	b.batches, b.single = nil, 0
	b.mu.Unlock()
}

// A Txn whose commit updates rows it read (a transfer) sends BEGIN and
// the updates of both tables in one batch and COMMIT after it: two round
// trips, not one per statement. A commit that inserts a row goes
// statement by statement, as before. Either way the rows are as written.
func TestTxnCommitsUpdatesInOneRoundTrip(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var tr batchTracer
	pool := pgtest.Pool(t, func(c *pgxpool.Config) { c.ConnConfig.Tracer = &tr })
	accounts, entries := txnTables(t, pool)
	for _, id := range []int64{1, 2} {
		if _, err := accounts.Insert(ctx, txntest.Account{ID: id, Balance: 10}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := entries.Insert(ctx, txntest.Entry{ID: 7, Account: 1}); err != nil {
		t.Fatal(err)
	}
	move := func(tx *pgcas.Tx) error {
		if err := pgcas.TxPrefetch(tx, accounts, int64(1), int64(2)); err != nil {
			return err
		}
		a, _, err := pgcas.TxGet(tx, accounts, int64(1))
		if err != nil {
			return err
		}
		b, _, err := pgcas.TxGet(tx, accounts, int64(2))
		if err != nil {
			return err
		}
		e, _, err := pgcas.TxGet(tx, entries, int64(7))
		if err != nil {
			return err
		}
		a.Balance, b.Balance, e.Amount = a.Balance-3, b.Balance+3, e.Amount+3
		for _, err := range []error{pgcas.TxPut(tx, accounts, a), pgcas.TxPut(tx, accounts, b), pgcas.TxPut(tx, entries, e)} {
			if err != nil {
				return err
			}
		}
		return nil
	}
	tr.reset()
	if err := pgcas.Txn(ctx, move); err != nil {
		t.Fatal(err)
	}
	tr.mu.Lock()
	batches, single := slices.Clone(tr.batches), tr.single
	tr.mu.Unlock()
	// The reads (a batch or statements of their own), then the commit: a
	// batch of BEGIN and the three updates, and COMMIT.
	if !slices.Contains(batches, 4) {
		t.Errorf("batches sent %v (and %d statements on their own): none is BEGIN and the 3 updates", batches, single)
	}
	a, _ := accounts.Get(ctx, int64(1))
	b, _ := accounts.Get(ctx, int64(2))
	e, _ := entries.Get(ctx, int64(7))
	if a.Balance != 7 || b.Balance != 13 || e.Amount != 3 {
		t.Fatalf("after the transfer: %d, %d, entry %d; want 7, 13, 3", a.Balance, b.Balance, e.Amount)
	}

	// An insert in the commit: statement by statement.
	tr.reset()
	err := pgcas.Txn(ctx, func(tx *pgcas.Tx) error {
		if _, _, err := pgcas.TxGet(tx, entries, int64(8)); err != nil {
			return err
		}
		return pgcas.TxPut(tx, entries, txntest.Entry{ID: 8, Account: 2, Amount: 1})
	})
	if err != nil {
		t.Fatal(err)
	}
	tr.mu.Lock()
	batches = slices.Clone(tr.batches)
	tr.mu.Unlock()
	if slices.ContainsFunc(batches, func(n int) bool { return n > 1 }) {
		t.Errorf("a commit with an insert sent batches %v; want statements on their own", batches)
	}
	if e, err := entries.Get(ctx, int64(8)); err != nil || e.Amount != 1 {
		t.Fatalf("the inserted entry: %+v, %v", e, err)
	}
}

// Fault: the reply to a Txn's pipelined batch (BEGIN and the updates) is
// lost. COMMIT was never sent, so nothing applied: the error is not
// ambiguous and Retryable accepts it; with occ.WithRetryable the Txn
// runs again and commits once.
func TestTxnLostBatchReplyIsNotAmbiguous(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	type note struct {
		ID      int64  `db:"id"`
		Text    string `db:"text"`
		Version int64  `db:"version"`
	}
	var f pgtest.Faults
	pool := pgtest.Pool(t, f.Configure)
	if _, err := pool.Exec(ctx, `CREATE TABLE notes (id bigint PRIMARY KEY, text text NOT NULL, version bigserial NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	notes, err := pgcas.NewTable[note](pool, pgcas.TableConfig{Table: "notes"})
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []int64{1, 2} {
		if _, err := notes.Insert(ctx, note{ID: id, Text: "before"}); err != nil {
			t.Fatal(err)
		}
	}
	calls := 0
	edit := func(tx *pgcas.Tx) error {
		calls++
		if err := pgcas.TxPrefetch(tx, notes, int64(1), int64(2)); err != nil {
			return err
		}
		for _, id := range []int64{1, 2} {
			n, _, err := pgcas.TxGet(tx, notes, id)
			if err != nil {
				return err
			}
			n.Text = "lost-batch-reply"
			if err := pgcas.TxPut(tx, notes, n); err != nil {
				return err
			}
		}
		return nil
	}
	f.LoseReply("lost-batch-reply")
	err = pgcas.Txn(ctx, edit)
	fired(t, &f, 1)
	if err == nil || errors.Is(err, cas.ErrAmbiguous) || errors.Is(err, cas.ErrConflict) || !pgcas.Retryable(err) || calls != 1 {
		t.Fatalf("Txn with its batch's reply lost = %v after %d calls; want an error Retryable accepts, not ambiguous, after 1", err, calls)
	}
	for _, id := range []int64{1, 2} {
		if n, err := notes.Get(ctx, id); err != nil || n.Text != "before" {
			t.Fatalf("note %d = %+v, %v; want it untouched", id, n, err)
		}
	}

	calls = 0
	f.LoseReply("lost-batch-reply")
	if err := pgcas.Txn(ctx, edit, occ.WithRetryable(pgcas.Retryable)); err != nil || calls != 2 {
		t.Fatalf("Txn with Retryable = %v after %d calls; want success on the second", err, calls)
	}
	for _, id := range []int64{1, 2} {
		if n, err := notes.Get(ctx, id); err != nil || n.Text != "lost-batch-reply" {
			t.Fatalf("note %d = %+v, %v; want it edited", id, n, err)
		}
	}
}
