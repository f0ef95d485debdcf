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
