package sqlcas_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/occkit/occkit/adapters/sqlcas"
	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/internal/txntest"
	"github.com/occkit/occkit/occ"
)

func TestTxn(t *testing.T) {
	eachDialect(t, func(t *testing.T, d sqlcas.Dialect) {
		txntest.Run(t, txntest.Harness[*sqlcas.Tx]{Open: func(t *testing.T) txntest.Tables[*sqlcas.Tx] {
			accounts, entries, _ := txnTables(t, d)
			return txntest.Tables[*sqlcas.Tx]{
				Txn: func(ctx context.Context, fn func(*sqlcas.Tx) error, opts ...occ.Option) error {
					return sqlcas.Txn(ctx, fn, opts...)
				},
				GetAccount:      func(tx *sqlcas.Tx, id int64) (txntest.Account, bool, error) { return sqlcas.TxGet(tx, accounts, id) },
				PrefetchAccount: func(tx *sqlcas.Tx, ids ...any) error { return sqlcas.TxPrefetch(tx, accounts, ids...) },
				PutAccount:      func(tx *sqlcas.Tx, a txntest.Account) error { return sqlcas.TxPut(tx, accounts, a) },
				GetEntry:        func(tx *sqlcas.Tx, id int64) (txntest.Entry, bool, error) { return sqlcas.TxGet(tx, entries, id) },
				PutEntry:        func(tx *sqlcas.Tx, e txntest.Entry) error { return sqlcas.TxPut(tx, entries, e) },
				InsertAccount:   accounts.Insert,
				ReadAccount:     func(ctx context.Context, id int64) (txntest.Account, error) { return accounts.Get(ctx, id) },
				UpdateAccount:   accounts.Update,
				InsertEntry:     entries.Insert,
				ReadEntry:       func(ctx context.Context, id int64) (txntest.Entry, error) { return entries.Get(ctx, id) },
			}
		}})
	})
}

// txnTables makes the accounts and entries tables of txntest in a fresh
// database of dialect d.
func txnTables(t *testing.T, d sqlcas.Dialect) (*sqlcas.Table[txntest.Account], *sqlcas.Table[txntest.Entry], *sql.DB) {
	t.Helper()
	ctx := context.Background()
	db := openDB(t, d)
	for _, ddl := range []string{
		`CREATE TABLE accounts (id BIGINT NOT NULL PRIMARY KEY, balance BIGINT NOT NULL, version BIGINT NOT NULL)`,
		`CREATE TABLE entries (id BIGINT NOT NULL PRIMARY KEY, account BIGINT NOT NULL, amount BIGINT NOT NULL, version BIGINT NOT NULL)`,
	} {
		if _, err := db.ExecContext(ctx, ddl); err != nil {
			t.Fatal(err)
		}
	}
	accounts, err := sqlcas.NewTable[txntest.Account](db, sqlcas.TableConfig{Dialect: d, Table: "accounts"})
	if err != nil {
		t.Fatal(err)
	}
	entries, err := sqlcas.NewTable[txntest.Entry](db, sqlcas.TableConfig{Dialect: d, Table: "entries"})
	if err != nil {
		t.Fatal(err)
	}
	for _, create := range []func(context.Context) error{accounts.CreateCounter, entries.CreateCounter} {
		if err := create(ctx); err != nil {
			t.Fatal(err)
		}
	}
	return accounts, entries, db
}

// TestTxnRefusesCallersTx: a table bound to the caller's transaction
// cannot take part in Txn, which commits transactions of its own.
func TestTxnRefusesCallersTx(t *testing.T) {
	ctx := context.Background()
	accounts, _, db := txnTables(t, sqlcas.SQLite)
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	bound := accounts.With(tx)
	calls := 0
	err = sqlcas.Txn(ctx, func(in *sqlcas.Tx) error {
		calls++
		_, _, err := sqlcas.TxGet(in, bound, int64(1))
		return err
	})
	var ke *cas.KeyError
	if !errors.As(err, &ke) || !strings.Contains(err.Error(), "caller's transaction") || calls != 1 {
		t.Fatalf("Txn over a table bound to the caller's transaction = %v (fn ran %d times), want a refusal", err, calls)
	}
}

// TestTxnRefusesMixedTables: rows of tables of two databases, or one row
// reached through two Table values of its table, are refused at the
// commit, and nothing is written.
func TestTxnRefusesMixedTables(t *testing.T) {
	ctx := context.Background()
	accounts, entries, db := txnTables(t, sqlcas.SQLite)
	_, otherEntries, otherDB := txnTables(t, sqlcas.SQLite)
	if db == otherDB {
		t.Fatal("one database for both")
	}
	if _, err := accounts.Insert(ctx, txntest.Account{ID: 1, Balance: 10}); err != nil {
		t.Fatal(err)
	}
	err := sqlcas.Txn(ctx, func(tx *sqlcas.Tx) error {
		a, _, err := sqlcas.TxGet(tx, accounts, int64(1))
		if err != nil {
			return err
		}
		a.Balance--
		if err := sqlcas.TxPut(tx, accounts, a); err != nil {
			return err
		}
		return sqlcas.TxPut(tx, otherEntries, txntest.Entry{ID: 1, Account: 1, Amount: -1})
	})
	if err == nil || !strings.Contains(err.Error(), "different databases") {
		t.Fatalf("Txn over two databases = %v, want a refusal", err)
	}
	second, err := sqlcas.NewTable[txntest.Account](db, sqlcas.TableConfig{Dialect: sqlcas.SQLite, Table: "accounts"})
	if err != nil {
		t.Fatal(err)
	}
	err = sqlcas.Txn(ctx, func(tx *sqlcas.Tx) error {
		a, _, err := sqlcas.TxGet(tx, accounts, int64(1))
		if err != nil {
			return err
		}
		b, _, err := sqlcas.TxGet(tx, second, int64(1))
		if err != nil {
			return err
		}
		a.Balance--
		b.Balance--
		if err := sqlcas.TxPut(tx, accounts, a); err != nil {
			return err
		}
		return sqlcas.TxPut(tx, second, b)
	})
	if err == nil || !strings.Contains(err.Error(), "two Table values") {
		t.Fatalf("Txn over one row through two Tables = %v, want a refusal", err)
	}
	if a, err := accounts.Get(ctx, int64(1)); err != nil || a.Balance != 10 {
		t.Fatalf("account 1 = %+v, %v; want it untouched", a, err)
	}
	if _, err := entries.Get(ctx, int64(1)); !errors.Is(err, cas.ErrNotFound) {
		t.Fatalf("entry 1: %v, want none", err)
	}
	if _, err := otherEntries.Get(ctx, int64(1)); !errors.Is(err, cas.ErrNotFound) {
		t.Fatalf("entry 1 of the other database: %v, want none", err)
	}
}

// TestModifyManyIntegerKeysOneUpdate: on MySQL, ModifyMany of rows with
// an integer key commits them in one UPDATE (the rows affected telling
// whether each was at its version), on MariaDB in one block. 8 goroutines
// × 25 transfers among 3 hot rows: every transfer succeeds and the total
// holds, exactly.
func TestModifyManyIntegerKeysOneUpdate(t *testing.T) {
	accounts, db := transfersAmongThree(t, sqlcas.MySQL, 25, func(ctx context.Context, accounts *sqlcas.Table[txntest.Account], from, to int64) error {
		_, err := accounts.ModifyMany(ctx, []any{from, to}, func(a []txntest.Account, _ []bool) ([]txntest.Account, error) {
			a[0].Balance -= 7
			a[1].Balance += 7
			return a, nil
		})
		return err
	})
	if mariadb := isMariaDB(t, db); accounts.RunsBlocks() != mariadb {
		t.Fatalf("transfers committed as blocks: %v, on MariaDB: %v", accounts.RunsBlocks(), mariadb)
	}
}

// transfersAmongThree runs 8 goroutines × n transfers of 7 among three
// accounts of 1000 in a database of dialect d, each with move, and checks
// that every one succeeded and the total held.
func transfersAmongThree(t *testing.T, d sqlcas.Dialect, n int, move func(ctx context.Context, accounts *sqlcas.Table[txntest.Account], from, to int64) error) (*sqlcas.Table[txntest.Account], *sql.DB) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	accounts, _, db := txnTables(t, d)
	for id := int64(1); id <= 3; id++ {
		if _, err := accounts.Insert(ctx, txntest.Account{ID: id, Balance: 1000}); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	var failed atomic.Int64
	for w := range 8 {
		wg.Go(func() {
			for i := range n {
				from := int64((w+i)%3) + 1
				to := from%3 + 1
				if err := move(ctx, accounts, from, to); err != nil && failed.Add(1) == 1 {
					t.Errorf("transfer %d→%d: %v", from, to, err)
				}
			}
		})
	}
	wg.Wait()
	total := int64(0)
	for id := int64(1); id <= 3; id++ {
		a, err := accounts.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		total += a.Balance
	}
	if total != 3000 || failed.Load() != 0 {
		t.Fatalf("total %d after transfers (want 3000), %d failed", total, failed.Load())
	}
	return accounts, db
}

// TestTxnWithCombiner: transactions over table rows given occ.WithCombiner
// (which they do not combine) stay exact: 8 goroutines × 20 transfers
// among 3 rows keep the total and all succeed.
func TestTxnWithCombiner(t *testing.T) {
	cb := occ.NewCombiner()
	transfersAmongThree(t, sqlcas.SQLite, 20, func(ctx context.Context, accounts *sqlcas.Table[txntest.Account], from, to int64) error {
		return sqlcas.Txn(ctx, func(tx *sqlcas.Tx) error {
			a, _, err := sqlcas.TxGet(tx, accounts, from)
			if err != nil {
				return err
			}
			b, _, err := sqlcas.TxGet(tx, accounts, to)
			if err != nil {
				return err
			}
			a.Balance -= 7
			b.Balance += 7
			if err := sqlcas.TxPut(tx, accounts, a); err != nil {
				return err
			}
			return sqlcas.TxPut(tx, accounts, b)
		}, occ.WithCombiner(cb))
	})
}
