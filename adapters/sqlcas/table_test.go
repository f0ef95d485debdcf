package sqlcas_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"

	"github.com/occkit/occkit/adapters/sqlcas"
	"github.com/occkit/occkit/cas"
)

type account struct {
	ID      int64       `db:"id"`
	Owner   string      `db:"owner"`
	Balance int64       `db:"balance"`
	Version cas.Version `db:"version"`
	Fence   int64       `db:"fence"`
}

// accountsDDL is the application's table, per dialect.
func accountsDDL(d sqlcas.Dialect) string {
	text := "TEXT"
	if d == sqlcas.MySQL {
		text = "VARCHAR(100)"
	}
	return `CREATE TABLE accounts (id BIGINT NOT NULL PRIMARY KEY, owner ` + text + ` NOT NULL,
    balance BIGINT NOT NULL, version BIGINT NOT NULL, fence BIGINT NOT NULL DEFAULT 0)`
}

func newAccounts(t *testing.T, d sqlcas.Dialect) (*sqlcas.Table[account], *sql.DB) {
	t.Helper()
	ctx := context.Background()
	db := openDB(t, d)
	if _, err := db.ExecContext(ctx, accountsDDL(d)); err != nil {
		t.Fatal(err)
	}
	tbl, err := sqlcas.NewTable[account](db, sqlcas.TableConfig{Dialect: d, Table: "accounts", FenceColumn: "fence"})
	if err != nil {
		t.Fatal(err)
	}
	if err := tbl.CreateCounter(ctx); err != nil {
		t.Fatal(err)
	}
	return tbl, db
}

func TestTable(t *testing.T) {
	eachDialect(t, func(t *testing.T, d sqlcas.Dialect) {
		ctx := context.Background()
		tbl, _ := newAccounts(t, d)
		a, err := tbl.Insert(ctx, account{ID: 1, Owner: "ann", Balance: 10})
		if err != nil || a.Version == 0 || a.Owner != "ann" {
			t.Fatalf("insert = %+v, %v", a, err)
		}
		if _, err := tbl.Insert(ctx, account{ID: 1, Owner: "bob"}); !errors.Is(err, cas.ErrConflict) {
			t.Fatalf("insert of an existing row: %v, want a conflict", err)
		}
		got, err := tbl.Get(ctx, int64(1))
		if err != nil || got != a {
			t.Fatalf("get = %+v, %v; want %+v", got, err, a)
		}
		a.Balance = 20
		b, err := tbl.Update(ctx, a)
		if err != nil || b.Version <= a.Version || b.Balance != 20 {
			t.Fatalf("update = %+v, %v", b, err)
		}
		cur, err := tbl.Update(ctx, a) // stale
		var ce *cas.ConflictError
		if !errors.As(err, &ce) || !ce.HasCurrent || ce.Current.Version != b.Version || cur.Balance != 20 {
			t.Fatalf("stale update = %+v, %v; want a conflict carrying version %d", cur, err, b.Version)
		}
		if _, err := tbl.UpdateFenced(ctx, b, 5); err != nil {
			t.Fatal(err)
		}
		c, _ := tbl.Get(ctx, int64(1))
		if _, err := tbl.UpdateFenced(ctx, c, 4); !errors.Is(err, cas.ErrFenced) {
			t.Fatalf("stale token: %v", err)
		}
		if _, err := tbl.Get(ctx, int64(2)); !errors.Is(err, cas.ErrNotFound) {
			t.Fatalf("get of a missing row: %v", err)
		}
		if err := tbl.Delete(ctx, int64(1), a.Version); !errors.Is(err, cas.ErrConflict) {
			t.Fatalf("stale delete: %v", err)
		}
		if err := tbl.Delete(ctx, int64(1), c.Version); err != nil {
			t.Fatal(err)
		}
		if _, err := tbl.Update(ctx, c); !errors.Is(err, cas.ErrConflict) || !errors.Is(err, cas.ErrNotFound) {
			t.Fatalf("update of a deleted row: %v, want a conflict matching ErrNotFound", err)
		}
	})
}

// tableOn creates the table name on db with ddl and returns a Table of T
// over it, its version counter created.
func tableOn[T any](t *testing.T, db *sql.DB, d sqlcas.Dialect, name, ddl string) *sqlcas.Table[T] {
	t.Helper()
	ctx := context.Background()
	if _, err := db.ExecContext(ctx, ddl); err != nil {
		t.Fatal(err)
	}
	tbl, err := sqlcas.NewTable[T](db, sqlcas.TableConfig{Dialect: d, Table: name})
	if err != nil {
		t.Fatal(err)
	}
	if err := tbl.CreateCounter(ctx); err != nil {
		t.Fatal(err)
	}
	return tbl
}

// textRow is a row of a table with a text key, for the tests of keys.
type textRow struct {
	ID      string      `db:"id"`
	N       int64       `db:"n"`
	Version cas.Version `db:"version"`
}

// TestTableKeysOfTheWrongType: every call that binds a key converts it to
// the key field's type first and refuses one that does not fit, before
// anything is sent. MySQL compares a text key with a number as numbers,
// so Delete(0, v) would match every row at v whose key does not start
// with a digit, and Delete("1x", v) on a numeric key row 1; an integer
// outside the field's range would wrap onto another key.
func TestTableKeysOfTheWrongType(t *testing.T) {
	type small struct {
		ID      int32       `db:"id"`
		N       int8        `db:"n"`
		Version cas.Version `db:"version"`
	}
	eachDialect(t, func(t *testing.T, d sqlcas.Dialect) {
		ctx := context.Background()
		db := openDB(t, d)
		text := "TEXT"
		if d == sqlcas.MySQL {
			text = "VARCHAR(100)"
		}
		names := tableOn[textRow](t, db, d, "named", `CREATE TABLE named (id `+text+` NOT NULL PRIMARY KEY, n BIGINT NOT NULL, version BIGINT NOT NULL)`)
		smalls := tableOn[small](t, db, d, "small", `CREATE TABLE small (id BIGINT NOT NULL PRIMARY KEY, n BIGINT NOT NULL, version BIGINT NOT NULL)`)
		abc, err := names.Insert(ctx, textRow{ID: "abc"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := names.Insert(ctx, textRow{ID: "xyz"}); err != nil {
			t.Fatal(err)
		}
		if _, err := names.Get(ctx, 0); !errors.Is(err, cas.ErrInvalidKey) {
			t.Errorf("Get(0) of a text key: %v, want cas.ErrInvalidKey", err)
		}
		if err := names.Delete(ctx, 0, abc.Version); !errors.Is(err, cas.ErrInvalidKey) {
			t.Errorf("Delete(0) of a text key: %v, want cas.ErrInvalidKey", err)
		}
		if _, err := names.Add(ctx, 0, "n", 1, cas.Bounds{}); !errors.Is(err, cas.ErrInvalidKey) {
			t.Errorf("Add(0) of a text key: %v, want cas.ErrInvalidKey", err)
		}
		for _, k := range []string{"abc", "xyz"} {
			if r, err := names.Get(ctx, k); err != nil || r.N != 0 {
				t.Errorf("row %s after the refused calls: %+v, %v", k, r, err)
			}
		}

		one, err := smalls.Insert(ctx, small{ID: 7})
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range []any{"7x", "7", true} {
			if err := smalls.Delete(ctx, k, one.Version); !errors.Is(err, cas.ErrInvalidKey) {
				t.Errorf("Delete(%#v) of an integer key: %v, want cas.ErrInvalidKey", k, err)
			}
		}
		wrapped := int64(1)<<32 + 7 // 7 in an int32
		if _, err := smalls.Get(ctx, wrapped); !errors.Is(err, cas.ErrInvalidKey) {
			t.Errorf("Get(%d) of an int32 key: %v, want cas.ErrInvalidKey", wrapped, err)
		}
		if _, err := smalls.Modify(ctx, wrapped, func(r small, _ bool) (small, error) { r.N = 5; return r, nil }); !errors.Is(err, cas.ErrInvalidKey) {
			t.Errorf("Modify(%d) of an int32 key: %v, want cas.ErrInvalidKey", wrapped, err)
		}
		if _, err := smalls.Modify(ctx, uint64(1<<63), func(r small, _ bool) (small, error) { return r, nil }); !errors.Is(err, cas.ErrInvalidKey) {
			t.Errorf("Modify(1<<63) of an int32 key: %v, want cas.ErrInvalidKey", err)
		}
		// An int8 field over a BIGINT column: a result it cannot hold is
		// refused as out of bounds, and the row stays readable.
		if _, err := smalls.Add(ctx, int64(7), "n", 100, cas.Bounds{}); err != nil {
			t.Fatal(err)
		}
		var be *cas.BoundError
		if _, err := smalls.Add(ctx, int64(7), "n", 100, cas.Bounds{}); !errors.As(err, &be) || !be.HasCurrent || be.Current != 100 {
			t.Errorf("Add(+100) to an int8 at 100: %v, want a *cas.BoundError carrying 100", err)
		}
		if r, err := smalls.Get(ctx, 7); err != nil || r.N != 100 {
			t.Errorf("row 7 after the refused Add: %+v, %v; want n 100", r, err)
		}
		var n int
		if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM small`).Scan(&n); err != nil || n != 1 {
			t.Errorf("rows of small: %d, %v; want 1", n, err)
		}
	})
}

// TestTableInsertGeneratedKeyMySQL: MySQL reports a generated key only
// for AUTO_INCREMENT, so Insert of a zero key returns the row the server
// numbered there, and is refused before anything is written on a key
// column the server fills otherwise (the row of key 0, which MySQL
// compares equal to a text key, would be read back: another row).
func TestTableInsertGeneratedKeyMySQL(t *testing.T) {
	type auto struct {
		ID      int64       `db:"id"`
		N       int64       `db:"n"`
		Version cas.Version `db:"version"`
	}
	ctx := context.Background()
	db := openDB(t, sqlcas.MySQL)
	const cols = `n BIGINT NOT NULL, version BIGINT NOT NULL`
	autos := tableOn[auto](t, db, sqlcas.MySQL, "auto", `CREATE TABLE auto (id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY, `+cols+`)`)
	uuids := tableOn[textRow](t, db, sqlcas.MySQL, "uuid", `CREATE TABLE uuid (id CHAR(36) NOT NULL DEFAULT (UUID()) PRIMARY KEY, `+cols+`)`)
	if _, err := db.ExecContext(ctx, `INSERT INTO uuid (id, n, version) VALUES ('ffffffff-0000-0000-0000-000000000000', 7, 1)`); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		a, err := autos.Insert(ctx, auto{N: int64(i)})
		if err != nil || a.ID == 0 || a.N != int64(i) || a.Version == 0 {
			t.Fatalf("insert into an AUTO_INCREMENT key = %+v, %v", a, err)
		}
		if got, err := autos.Get(ctx, a.ID); err != nil || got != a {
			t.Fatalf("get %d = %+v, %v; want %+v", a.ID, got, err, a)
		}
	}
	if got, err := uuids.Insert(ctx, textRow{N: 1}); !errors.Is(err, cas.ErrInvalidKey) {
		t.Fatalf("insert of a zero key into a UUID()-default key = %+v, %v; want cas.ErrInvalidKey", got, err)
	}
	var n int
	if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM uuid`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("rows of uuid after the refused insert: %d, %v; want 1", n, err)
	}
	if got, err := uuids.Insert(ctx, textRow{ID: "given", N: 2}); err != nil || got.ID != "given" || got.N != 2 {
		t.Fatalf("insert with the key set = %+v, %v", got, err)
	}
	// The name is one identifier, dot and all, as every statement quotes
	// it.
	dots := tableOn[auto](t, db, sqlcas.MySQL, "auto.dot", "CREATE TABLE `auto.dot` (id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY, "+cols+")")
	if a, err := dots.Insert(ctx, auto{N: 3}); err != nil || a.ID == 0 || a.N != 3 {
		t.Fatalf("insert into `auto.dot` = %+v, %v", a, err)
	}
}

// TestTableInsertConflictInCallersTx: an insert of a key that exists,
// in the caller's transaction, is a conflict carrying the current row and
// leaves the transaction usable on every dialect (on PostgreSQL a
// duplicate key aborts the whole transaction unless the insert runs in a
// savepoint).
func TestTableInsertConflictInCallersTx(t *testing.T) {
	eachDialect(t, func(t *testing.T, d sqlcas.Dialect) {
		ctx := context.Background()
		tbl, db := newAccounts(t, d)
		a, err := tbl.Insert(ctx, account{ID: 1, Owner: "ann", Balance: 10})
		if err != nil {
			t.Fatal(err)
		}
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		in := tbl.With(tx)
		cur, err := in.Insert(ctx, account{ID: 1, Owner: "bob"})
		var ce *cas.ConflictError
		if !errors.As(err, &ce) || !ce.HasCurrent || ce.Current.Version != a.Version || cur.Owner != "ann" {
			t.Fatalf("insert of an existing key in the caller's transaction = %+v, %v; want a conflict carrying the row", cur, err)
		}
		if _, err := in.Insert(ctx, account{ID: 2, Owner: "cid"}); err != nil {
			t.Fatalf("the next insert in that transaction: %v", err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatalf("commit: %v", err)
		}
		if c, err := tbl.Get(ctx, int64(2)); err != nil || c.Owner != "cid" {
			t.Fatalf("row 2 after the commit: %+v, %v", c, err)
		}
	})
}
