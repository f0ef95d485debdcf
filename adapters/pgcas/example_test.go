package pgcas_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/occkit/occkit/adapters/pgcas"
	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/internal/pgtest"
	"github.com/occkit/occkit/occ"
)

// These examples run against the server the tests use (OCCKIT_PG_URL),
// each in a fresh schema that examplePool drops at its end.

// examplePool is pgtest.ExamplePool: a pool over a fresh schema, and a
// function that closes the pool and drops the schema.
var examplePool = pgtest.ExamplePool

// A versioned key-value store on a table, and a read-modify-write with
// retry.
func Example() {
	ctx := context.Background()
	pool, done := examplePool() // in an application: pgxpool.New(ctx, url)
	defer done()
	store, err := pgcas.New(pool, pgcas.Config{Table: "stock"})
	if err != nil {
		panic(err)
	}
	if err := store.CreateTable(ctx); err != nil {
		panic(err)
	}
	stock := cas.NewTyped(store, cas.JSON[int]())
	for range 3 {
		n, version, err := occ.Update(ctx, stock, "sku-42", func(n int, exists bool) (int, error) {
			if !exists {
				return 10, nil
			}
			if n == 0 {
				return 0, errors.New("sold out")
			}
			return n - 1, nil
		}, occ.WithRetryable(pgcas.Retryable))
		fmt.Println(n, version, err)
	}
	// Output:
	// 10 1 <nil>
	// 9 2 <nil>
	// 8 3 <nil>
}

// The repository method of docs/postgres.md: decrement stock without
// SELECT ... FOR UPDATE. Versions come from the sequence of the bigserial
// version column, inventory_version_seq (TableConfig.VersionSequence's
// default name).
func ExampleTable() {
	type Item struct {
		SKU     string `db:"sku"`
		Stock   int    `db:"stock"`
		Version int64  `db:"version"`
	}
	ctx := context.Background()
	pool, done := examplePool()
	defer done()
	if _, err := pool.Exec(ctx, `CREATE TABLE inventory (
    sku     text PRIMARY KEY,
    stock   integer NOT NULL,
    version bigserial NOT NULL)`); err != nil {
		panic(err)
	}
	items, err := pgcas.NewTable[Item](pool, pgcas.TableConfig{Table: "inventory", KeyColumn: "sku"})
	if err != nil {
		panic(err)
	}
	if _, err := items.Insert(ctx, Item{SKU: "sku-42", Stock: 2}); err != nil {
		panic(err)
	}
	errSoldOut := errors.New("sold out")
	for range 3 {
		it, err := items.Modify(ctx, "sku-42", func(it Item, exists bool) (Item, error) {
			if !exists || it.Stock == 0 {
				return it, errSoldOut // not retried, returned as is
			}
			it.Stock--
			return it, nil
		})
		fmt.Println(it.Stock, err)
	}
	// Output:
	// 1 <nil>
	// 0 <nil>
	// 0 sold out
}

// Update by hand: the version-checked write of a row the caller holds. A
// conflict returns the current row, to retry from without reading again.
func ExampleTable_Update() {
	type Item struct {
		SKU     string `db:"sku"`
		Stock   int    `db:"stock"`
		Version int64  `db:"version"`
	}
	ctx := context.Background()
	pool, done := examplePool()
	defer done()
	if _, err := pool.Exec(ctx, `CREATE TABLE inventory (sku text PRIMARY KEY, stock integer NOT NULL, version bigserial NOT NULL)`); err != nil {
		panic(err)
	}
	items, err := pgcas.NewTable[Item](pool, pgcas.TableConfig{Table: "inventory", KeyColumn: "sku"})
	if err != nil {
		panic(err)
	}
	if _, err := items.Insert(ctx, Item{SKU: "sku-42", Stock: 3}); err != nil {
		panic(err)
	}
	var cur Item
	fresh := false
	err = occ.Retry(ctx, func(ctx context.Context) error {
		if !fresh {
			if cur, err = items.Get(ctx, "sku-42"); err != nil {
				return err
			}
		}
		if cur.Stock == 0 {
			return errors.New("sold out")
		}
		cur.Stock--
		next, err := items.Update(ctx, cur)                // one statement, version-checked
		cur, fresh = next, errors.Is(err, cas.ErrConflict) // a conflict returns the current row
		return err
	})
	fmt.Println(cur.Stock, err)
	// Output: 2 <nil>
}

// A serializable transaction, run again on serialization failures.
func ExampleRunTx() {
	ctx := context.Background()
	pool, done := examplePool()
	defer done()
	if _, err := pool.Exec(ctx, `CREATE TABLE accounts (owner text, kind text, balance bigint NOT NULL, PRIMARY KEY (owner, kind));
INSERT INTO accounts VALUES ('ada', 'checking', 120), ('ada', 'savings', 30)`); err != nil {
		panic(err)
	}
	err := pgcas.RunTx(ctx, pool, pgx.TxOptions{IsoLevel: pgx.Serializable}, func(tx pgx.Tx) error {
		var total int64
		if err := tx.QueryRow(ctx, `SELECT sum(balance) FROM accounts WHERE owner = $1`, "ada").Scan(&total); err != nil {
			return err
		}
		if total < 100 {
			return errors.New("insufficient funds")
		}
		_, err := tx.Exec(ctx, `UPDATE accounts SET balance = balance - 100 WHERE owner = $1 AND kind = 'checking'`, "ada")
		return err
	}, occ.WithMaxAttempts(5))
	var left int64
	_ = pool.QueryRow(ctx, `SELECT sum(balance) FROM accounts WHERE owner = 'ada'`).Scan(&left)
	fmt.Println(err, left)
	// Output: <nil> 50
}

// A transfer between two rows of accounts that records itself in a
// ledger table, as one optimistic transaction over the two tables: no
// lock is held while fn runs, and the commit writes the three rows only
// if neither account changed since it was read.
func ExampleTxn() {
	type Account struct {
		ID      string `db:"id"`
		Balance int64  `db:"balance"`
		Version int64  `db:"version"`
	}
	type Entry struct {
		ID      string `db:"id"`
		From    string `db:"from_id"`
		To      string `db:"to_id"`
		Amount  int64  `db:"amount"`
		Version int64  `db:"version"`
	}
	ctx := context.Background()
	pool, done := examplePool()
	defer done()
	if _, err := pool.Exec(ctx, `CREATE TABLE accounts (id text PRIMARY KEY, balance bigint NOT NULL, version bigserial NOT NULL);
CREATE TABLE ledger (id text PRIMARY KEY, from_id text NOT NULL, to_id text NOT NULL, amount bigint NOT NULL, version bigserial NOT NULL);
INSERT INTO accounts (id, balance) VALUES ('ada', 100), ('bob', 0)`); err != nil {
		panic(err)
	}
	accounts, err := pgcas.NewTable[Account](pool, pgcas.TableConfig{Table: "accounts"})
	if err != nil {
		panic(err)
	}
	ledger, err := pgcas.NewTable[Entry](pool, pgcas.TableConfig{Table: "ledger"})
	if err != nil {
		panic(err)
	}
	transfer := func(id, from, to string, amount int64) error {
		return pgcas.Txn(ctx, func(tx *pgcas.Tx) error {
			if err := pgcas.TxPrefetch(tx, accounts, from, to); err != nil {
				return err
			}
			f, _, err := pgcas.TxGet(tx, accounts, from)
			if err != nil {
				return err
			}
			t, _, err := pgcas.TxGet(tx, accounts, to)
			if err != nil {
				return err
			}
			if f.Balance < amount {
				return errors.New("insufficient funds") // returned as is, nothing written
			}
			f.Balance, t.Balance = f.Balance-amount, t.Balance+amount
			for _, err := range []error{
				pgcas.TxPut(tx, accounts, f),
				pgcas.TxPut(tx, accounts, t),
				pgcas.TxPut(tx, ledger, Entry{ID: id, From: from, To: to, Amount: amount}),
			} {
				if err != nil {
					return err
				}
			}
			return nil
		}, occ.WithRetryable(pgcas.Retryable))
	}
	fmt.Println(transfer("t-1", "ada", "bob", 60))
	fmt.Println(transfer("t-2", "ada", "bob", 60))
	ada, _ := accounts.Get(ctx, "ada")
	bob, _ := accounts.Get(ctx, "bob")
	t1, _ := ledger.Get(ctx, "t-1")
	fmt.Println(ada.Balance, bob.Balance, t1.Amount)
	// Output:
	// <nil>
	// insufficient funds
	// 40 60 60
}

// A lease on an advisory lock, whose fencing token the store checks.
func ExampleNewLocker() {
	ctx := context.Background()
	pool, done := examplePool()
	defer done()
	locker, err := pgcas.NewLocker(pool, pgcas.LockerConfig{})
	if err != nil {
		panic(err)
	}
	defer locker.Close() // ends the leases still held; the pool stays open
	if err := locker.CreateTokenCounter(ctx); err != nil {
		panic(err)
	}
	store, err := pgcas.New(pool, pgcas.Config{})
	if err != nil {
		panic(err)
	}
	if err := store.CreateTable(ctx); err != nil {
		panic(err)
	}
	lease, err := locker.Acquire(ctx, "report")
	if err != nil {
		panic(err)
	}
	defer lease.Release(ctx)
	it, _ := store.Get(ctx, "report") // absent: version 0
	_, err = store.CompareAndSwapFenced(lease.Context(), "report", it.Version, lease.Token(), []byte("done"))
	fmt.Println(errors.Is(err, cas.ErrFenced)) // true if a newer holder has written
	// Output: false
}
