package pgcas_test

import (
	"context"
	"testing"

	"github.com/occkit/occkit/adapters/pgcas"
	"github.com/occkit/occkit/internal/pgtest"
	"github.com/occkit/occkit/internal/txntest"
	"github.com/occkit/occkit/occ"
)

func TestTxn(t *testing.T) {
	txntest.Run(t, txntest.Harness[*pgcas.Tx]{Open: func(t *testing.T) txntest.Tables[*pgcas.Tx] {
		ctx := context.Background()
		pool := pgtest.Pool(t)
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
