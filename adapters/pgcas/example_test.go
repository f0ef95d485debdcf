package pgcas_test

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/occkit/occkit/adapters/pgcas"
	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/occ"
)

// These examples need a server (OCCKIT_PG_URL, as the tests): they are
// compiled, not run.

// A versioned key-value store on a table, and a read-modify-write with
// retry.
func Example() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("OCCKIT_PG_URL"))
	if err != nil {
		panic(err)
	}
	defer pool.Close()
	store, err := pgcas.New(pool, pgcas.Config{Table: "stock"})
	if err != nil {
		panic(err)
	}
	if err := store.CreateTable(ctx); err != nil {
		panic(err)
	}
	stock := cas.NewTyped(store, cas.JSON[int]())
	n, version, err := occ.Update(ctx, stock, "sku-42", func(n int, exists bool) (int, error) {
		if !exists {
			return 10, nil
		}
		if n == 0 {
			return 0, errors.New("sold out")
		}
		return n - 1, nil
	})
	fmt.Println(n, version, err)
}

// The repository method of docs/postgres.md: decrement stock without
// SELECT ... FOR UPDATE.
func ExampleTable() {
	type Item struct {
		SKU     string `db:"sku"`
		Stock   int    `db:"stock"`
		Version int64  `db:"version"`
	}
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("OCCKIT_PG_URL"))
	if err != nil {
		panic(err)
	}
	defer pool.Close()
	items, err := pgcas.NewTable[Item](pool, pgcas.TableConfig{Table: "inventory", KeyColumn: "sku"})
	if err != nil {
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
}

// A serializable transaction, run again on serialization failures.
func ExampleRunTx() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("OCCKIT_PG_URL"))
	if err != nil {
		panic(err)
	}
	defer pool.Close()
	err = pgcas.RunTx(ctx, pool, pgx.TxOptions{IsoLevel: pgx.Serializable}, func(tx pgx.Tx) error {
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
	fmt.Println(err)
}

// A lease on an advisory lock, whose fencing token the store checks.
func ExampleNewLocker() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("OCCKIT_PG_URL"))
	if err != nil {
		panic(err)
	}
	defer pool.Close()
	locker, _ := pgcas.NewLocker(pool, pgcas.LockerConfig{})
	_ = locker.CreateSequence(ctx)
	store, _ := pgcas.New(pool, pgcas.Config{})
	lease, err := locker.Acquire(ctx, "report")
	if err != nil {
		panic(err)
	}
	defer lease.Release(ctx)
	it, _ := store.Get(ctx, "report")
	_, err = store.CompareAndSwapFenced(lease.Context(), "report", it.Version, lease.Token(), []byte("done"))
	fmt.Println(errors.Is(err, cas.ErrFenced)) // true if a newer holder has written
}
