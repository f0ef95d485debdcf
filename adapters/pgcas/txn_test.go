package pgcas_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/occkit/occkit/adapters/pgcas"
	"github.com/occkit/occkit/internal/pgtest"
	"github.com/occkit/occkit/internal/txntest"
	"github.com/occkit/occkit/occ"
)

func TestTxn(t *testing.T) {
	txntest.Run(t, txntest.Harness[*pgcas.Tx]{Open: func(t *testing.T) txntest.Tables[*pgcas.Tx] {
		ctx := context.Background()
		// A small pool: an escalated attempt holding row locks must not
		// need a second connection (EscalatedReadsOtherRows).
		pool := pgtest.Pool(t, func(c *pgxpool.Config) { c.MaxConns = 4 })
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
