package sqlcas_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/go-sql-driver/mysql"
	_ "modernc.org/sqlite"

	"github.com/occkit/occkit/adapters/sqlcas"
	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/hybrid"
	"github.com/occkit/occkit/occ"
)

// The SQLite examples run anywhere, on a file in a temporary directory.
// The MySQL ones run against the server the tests use (OCCKIT_MYSQL_DSN),
// in a fresh database that exampleMySQL drops at their end.

// exampleSQLite opens a fresh SQLite database as the package documentation
// recommends, and returns it with a function that removes it.
func exampleSQLite() (*sql.DB, func()) {
	dir, err := os.MkdirTemp("", "sqlcas-example")
	if err != nil {
		panic(err)
	}
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "app.db")+
		"?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)&_txlock=immediate")
	if err != nil {
		panic(err)
	}
	return db, func() { db.Close(); os.RemoveAll(dir) }
}

// exampleMySQL opens a fresh database on the server at OCCKIT_MYSQL_DSN
// (with interpolateParams, as the package documentation recommends), and
// returns it with a function that closes it and drops the database.
func exampleMySQL() (*sql.DB, func()) {
	dsn := os.Getenv("OCCKIT_MYSQL_DSN")
	if dsn == "" {
		panic("OCCKIT_MYSQL_DSN is not set: the MySQL examples need a MySQL or MariaDB server (make test starts one; see docs/sql.md)")
	}
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		panic(err)
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	name := "occkit_example_" + hex.EncodeToString(b[:])
	admin, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		panic(err)
	}
	if _, err := admin.Exec("CREATE DATABASE `" + name + "`"); err != nil {
		panic(err)
	}
	cfg.DBName = name
	cfg.InterpolateParams = true // one round trip per statement
	connector, err := mysql.NewConnector(cfg)
	if err != nil {
		panic(err)
	}
	db := sql.OpenDB(connector)
	return db, func() {
		_ = db.Close()
		_, _ = admin.Exec("DROP DATABASE IF EXISTS `" + name + "`")
		_ = admin.Close()
	}
}

// A versioned key-value store in a SQLite file, and a read-modify-write
// with retry.
func Example() {
	ctx := context.Background()
	db, done := exampleSQLite()
	defer done()
	store, err := sqlcas.New(db, sqlcas.Config{Dialect: sqlcas.SQLite})
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
		}, occ.WithRetryable(sqlcas.Retryable))
		fmt.Println(n, version, err)
	}
	// Output:
	// 10 1 <nil>
	// 9 2 <nil>
	// 8 3 <nil>
}

// occkit's writes inside the application's own transaction: rolled back,
// nothing of either is left.
func ExampleStore_With() {
	ctx := context.Background()
	db, done := exampleSQLite()
	defer done()
	store, _ := sqlcas.New(db, sqlcas.Config{Dialect: sqlcas.SQLite})
	_ = store.CreateTable(ctx)
	_, _ = db.ExecContext(ctx, `CREATE TABLE audit (note TEXT)`)

	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		panic(err)
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO audit VALUES ('reserve sku-42')`); err != nil {
		panic(err)
	}
	if _, err := store.With(tx).CompareAndSwap(ctx, "sku-42", 0, []byte("9")); err != nil {
		panic(err)
	}
	_ = tx.Rollback() // say the payment failed

	var notes int
	_ = db.QueryRowContext(ctx, `SELECT count(*) FROM audit`).Scan(&notes)
	_, err = store.Get(ctx, "sku-42")
	fmt.Println(notes, errors.Is(err, cas.ErrNotFound))
	// Output: 0 true
}

// A transfer between two keys, committed atomically by occ.Txn through
// Store.Commit.
func ExampleStore_Commit() {
	ctx := context.Background()
	db, done := exampleSQLite()
	defer done()
	store, _ := sqlcas.New(db, sqlcas.Config{Dialect: sqlcas.SQLite})
	_ = store.CreateTable(ctx)
	_, _ = store.Commit(ctx, []cas.Op{cas.Put("alice", 0, []byte{50}), cas.Put("bob", 0, []byte{0})})

	err := occ.Txn(ctx, store, func(tx *occ.Tx) error {
		a, _, err := tx.Get("alice")
		if err != nil {
			return err
		}
		b, _, err := tx.Get("bob")
		if err != nil {
			return err
		}
		tx.Put("alice", []byte{a[0] - 20})
		tx.Put("bob", []byte{b[0] + 20})
		return nil
	})
	a, _ := store.Get(ctx, "alice")
	b, _ := store.Get(ctx, "bob")
	fmt.Println(err, a.Value[0], b.Value[0])
	// Output: <nil> 30 20
}

// A repository over the application's own table: Modify replaces
// "SELECT ... FOR UPDATE, change, UPDATE".
func ExampleTable() {
	type Item struct {
		SKU     string      `db:"sku"`
		Stock   int         `db:"stock"`
		Version cas.Version `db:"version"`
	}
	ctx := context.Background()
	db, done := exampleSQLite()
	defer done()
	if _, err := db.ExecContext(ctx, `CREATE TABLE items (sku TEXT PRIMARY KEY, stock INTEGER NOT NULL, version INTEGER NOT NULL)`); err != nil {
		panic(err)
	}
	items, err := sqlcas.NewTable[Item](db, sqlcas.TableConfig{Dialect: sqlcas.SQLite, Table: "items", KeyColumn: "sku"})
	if err != nil {
		panic(err)
	}
	if err := items.CreateCounter(ctx); err != nil {
		panic(err)
	}
	if _, err := items.Insert(ctx, Item{SKU: "sku-42", Stock: 3}); err != nil {
		panic(err)
	}
	it, err := items.Modify(ctx, "sku-42", func(it Item, exists bool) (Item, error) {
		if !exists || it.Stock == 0 {
			return it, errors.New("sold out")
		}
		it.Stock--
		return it, nil
	}, occ.WithRetryable(sqlcas.Retryable))
	fmt.Println(it.Stock, err)
	// Output: 2 <nil>
}

// A transfer between two rows of an accounts table, as one optimistic
// transaction: both rows are written or neither, and a concurrent change
// of either runs the function again.
func ExampleTable_ModifyMany() {
	type Account struct {
		ID      string      `db:"id"`
		Balance int64       `db:"balance"`
		Version cas.Version `db:"version"`
	}
	ctx := context.Background()
	db, done := exampleSQLite()
	defer done()
	if _, err := db.ExecContext(ctx, `CREATE TABLE accounts (id TEXT PRIMARY KEY, balance INTEGER NOT NULL, version INTEGER NOT NULL)`); err != nil {
		panic(err)
	}
	accounts, err := sqlcas.NewTable[Account](db, sqlcas.TableConfig{Dialect: sqlcas.SQLite, Table: "accounts"})
	if err != nil {
		panic(err)
	}
	if err := accounts.CreateCounter(ctx); err != nil {
		panic(err)
	}
	if _, err := accounts.Insert(ctx, Account{ID: "alice", Balance: 100}); err != nil {
		panic(err)
	}
	errInsufficient := errors.New("insufficient funds")
	transfer := func(from, to string, amount int64) error {
		// bob's row does not exist yet: it is created with the transfer.
		_, err := accounts.ModifyMany(ctx, []any{from, to}, func(a []Account, exists []bool) ([]Account, error) {
			if !exists[0] || a[0].Balance < amount {
				return nil, errInsufficient // returned as is, nothing written
			}
			a[0].Balance -= amount
			a[1].Balance += amount
			return a, nil
		}, occ.WithRetryable(sqlcas.Retryable))
		return err
	}
	fmt.Println(transfer("alice", "bob", 30))
	fmt.Println(transfer("alice", "bob", 500))
	alice, _ := accounts.Get(ctx, "alice")
	bob, _ := accounts.Get(ctx, "bob")
	fmt.Println(alice.Balance, bob.Balance)
	// Output:
	// <nil>
	// insufficient funds
	// 70 30
}

// An order and the stock it takes, in two tables, as one optimistic
// transaction: the order row is inserted and the item's stock taken only
// if the item has not changed since it was read; otherwise the
// transaction runs again from the item as it is.
func ExampleTxn() {
	type Item struct {
		SKU     string      `db:"sku"`
		Stock   int64       `db:"stock"`
		Version cas.Version `db:"version"`
	}
	type Order struct {
		ID      string      `db:"id"`
		SKU     string      `db:"sku"`
		Qty     int64       `db:"qty"`
		Version cas.Version `db:"version"`
	}
	ctx := context.Background()
	db, done := exampleSQLite()
	defer done()
	for _, ddl := range []string{
		`CREATE TABLE items (sku TEXT PRIMARY KEY, stock INTEGER NOT NULL, version INTEGER NOT NULL)`,
		`CREATE TABLE orders (id TEXT PRIMARY KEY, sku TEXT NOT NULL, qty INTEGER NOT NULL, version INTEGER NOT NULL)`,
	} {
		if _, err := db.ExecContext(ctx, ddl); err != nil {
			panic(err)
		}
	}
	items, err := sqlcas.NewTable[Item](db, sqlcas.TableConfig{Dialect: sqlcas.SQLite, Table: "items", KeyColumn: "sku"})
	if err != nil {
		panic(err)
	}
	orders, err := sqlcas.NewTable[Order](db, sqlcas.TableConfig{Dialect: sqlcas.SQLite, Table: "orders"})
	if err != nil {
		panic(err)
	}
	for _, create := range []func(context.Context) error{items.CreateCounter, orders.CreateCounter} {
		if err := create(ctx); err != nil {
			panic(err)
		}
	}
	if _, err := items.Insert(ctx, Item{SKU: "lamp", Stock: 3}); err != nil {
		panic(err)
	}
	errSoldOut := errors.New("sold out")
	order := func(id, sku string, qty int64) error {
		return sqlcas.Txn(ctx, func(tx *sqlcas.Tx) error {
			it, ok, err := sqlcas.TxGet(tx, items, sku)
			if err != nil {
				return err
			}
			if !ok || it.Stock < qty {
				return errSoldOut // returned as is, nothing written
			}
			it.Stock -= qty
			if err := sqlcas.TxPut(tx, items, it); err != nil {
				return err
			}
			return sqlcas.TxPut(tx, orders, Order{ID: id, SKU: sku, Qty: qty})
		}, occ.WithRetryable(sqlcas.Retryable))
	}
	fmt.Println(order("o-1", "lamp", 2))
	fmt.Println(order("o-2", "lamp", 2))
	lamp, _ := items.Get(ctx, "lamp")
	o1, _ := orders.Get(ctx, "o-1")
	_, err = orders.Get(ctx, "o-2")
	fmt.Println(lamp.Stock, o1.Qty, errors.Is(err, cas.ErrNotFound))
	// Output:
	// <nil>
	// sold out
	// 1 2 true
}

// MySQL's GET_LOCK as a lease with a fencing token, checked by the write
// it protects.
func ExampleNewLocker() {
	ctx := context.Background()
	db, done := exampleMySQL() // sql.OpenDB(mysql.NewConnector(cfg)), cfg.InterpolateParams on
	defer done()
	locker, err := sqlcas.NewLocker(db, sqlcas.LockerConfig{})
	if err != nil {
		panic(err)
	}
	defer locker.Close()
	if err := locker.CreateTokenCounter(ctx); err != nil {
		panic(err)
	}
	store, _ := sqlcas.New(db, sqlcas.Config{Dialect: sqlcas.MySQL})
	_ = store.CreateTable(ctx)
	stock := cas.NewTyped(store, cas.JSON[int]())
	n, _, err := hybrid.Update(ctx, locker, stock, "sku-42", func(n int, exists bool) (int, error) {
		if !exists {
			return 10, nil
		}
		return n - 1, nil
	})
	fmt.Println(n, err)
	// Output: 10 <nil>
}
