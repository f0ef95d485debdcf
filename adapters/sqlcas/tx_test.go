package sqlcas_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"

	"github.com/occkit/occkit/adapters/sqlcas"
	"github.com/occkit/occkit/cas"
)

// TestCallersTransaction mixes the application's own statements with the
// store's and the table's writes in one transaction of the caller: rolled
// back, it leaves nothing at all; committed, everything.
func TestCallersTransaction(t *testing.T) {
	eachDialect(t, func(t *testing.T, d sqlcas.Dialect) {
		ctx := context.Background()
		tbl, db := newAccounts(t, d)
		s := storeOn(t, db, sqlcas.Config{Dialect: d})
		if _, err := db.ExecContext(ctx, `CREATE TABLE orders (id INT PRIMARY KEY, note VARCHAR(50))`); err != nil {
			t.Fatal(err)
		}
		v0, err := s.CompareAndSwap(ctx, "stock", 0, []byte("10"))
		if err != nil {
			t.Fatal(err)
		}
		ph := func(i int) string {
			if d == sqlcas.Postgres {
				return "$" + string(rune('0'+i))
			}
			return "?"
		}
		run := func(commit bool) {
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback()
			// The table through a wrapper of the shape of sqlx.Tx.
			st, tt := s.With(tx), tbl.With(wrappedTx{tx})
			if _, err := tx.ExecContext(ctx, `INSERT INTO orders (id, note) VALUES (`+ph(1)+`, `+ph(2)+`)`, 1, "first"); err != nil {
				t.Fatal(err)
			}
			v, err := st.CompareAndSwap(ctx, "stock", v0, []byte("9"))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := st.Commit(ctx, []cas.Op{cas.Check("stock", v), cas.Put("order-1", 0, []byte("paid"))}); err != nil {
				t.Fatal(err)
			}
			if _, err := tt.Insert(ctx, account{ID: 1, Owner: "ann"}); err != nil {
				t.Fatal(err)
			}
			// Inside the transaction, the store reads its own writes.
			if it, err := st.Get(ctx, "order-1"); err != nil || string(it.Value) != "paid" {
				t.Fatalf("read inside the transaction = %+v, %v", it, err)
			}
			if commit {
				if err := tx.Commit(); err != nil {
					t.Fatal(err)
				}
				return
			}
			if err := tx.Rollback(); err != nil {
				t.Fatal(err)
			}
		}

		run(false)
		var n int
		if err := db.QueryRowContext(ctx, `SELECT count(*) FROM orders`).Scan(&n); err != nil || n != 0 {
			t.Fatalf("orders after rollback: %d, %v", n, err)
		}
		if it, err := s.Get(ctx, "stock"); err != nil || string(it.Value) != "10" || it.Version != v0 {
			t.Fatalf("stock after rollback = %+v, %v; want 10 at v%d", it, err, v0)
		}
		if _, err := s.Get(ctx, "order-1"); !errors.Is(err, cas.ErrNotFound) {
			t.Fatalf("order-1 after rollback: %v, want ErrNotFound", err)
		}
		if _, err := tbl.Get(ctx, int64(1)); !errors.Is(err, cas.ErrNotFound) {
			t.Fatalf("account after rollback: %v, want ErrNotFound", err)
		}

		run(true)
		if err := db.QueryRowContext(ctx, `SELECT count(*) FROM orders`).Scan(&n); err != nil || n != 1 {
			t.Fatalf("orders after commit: %d, %v", n, err)
		}
		if it, err := s.Get(ctx, "stock"); err != nil || string(it.Value) != "9" {
			t.Fatalf("stock after commit = %+v, %v", it, err)
		}
		if it, err := s.Get(ctx, "order-1"); err != nil || string(it.Value) != "paid" {
			t.Fatalf("order-1 after commit = %+v, %v", it, err)
		}
		if a, err := tbl.Get(ctx, int64(1)); err != nil || a.Owner != "ann" {
			t.Fatalf("account after commit = %+v, %v", a, err)
		}
	})
}

// Wrappers of the shapes of sqlx's Tx, Conn and DB, which embed the
// database/sql types: the store treats them as the types they wrap.
type (
	wrappedTx   struct{ *sql.Tx }
	wrappedConn struct{ *sql.Conn }
	wrappedDB   struct{ *sql.DB }
)

// TestConn runs the store on one *sql.Conn (and on a wrapper of one, and
// of a *sql.DB): its own transactions (Commit) begin and end there.
func TestConn(t *testing.T) {
	eachDialect(t, func(t *testing.T, d sqlcas.Dialect) {
		ctx := context.Background()
		s := newStore(t, d, sqlcas.Config{})
		conn, err := s.DB().Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		tx, err := s.DB().BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		for q, want := range map[sqlcas.Querier]bool{
			s.DB(): false, conn: false, wrappedConn{conn}: false, wrappedDB{s.DB()}: false,
			tx: true, wrappedTx{tx}: true,
		} {
			if got := sqlcas.CallersTx(q); got != want {
				t.Errorf("With(%T) counts as the caller's transaction: %v, want %v", q, got, want)
			}
		}
		_ = tx.Rollback()
		for _, q := range []sqlcas.Querier{wrappedConn{conn}, wrappedDB{s.DB()}} {
			if _, err := s.With(q).Commit(ctx, []cas.Op{cas.Check("absent", 0)}); err != nil {
				t.Fatalf("commit on %T: %v", q, err)
			}
		}
		c := s.With(conn)
		v, err := c.CompareAndSwap(ctx, "a", 0, []byte("1"))
		if err != nil {
			t.Fatal(err)
		}
		vs, err := c.Commit(ctx, []cas.Op{cas.Put("a", v, []byte("2")), cas.Put("b", 0, []byte("3"))})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Commit(ctx, []cas.Op{cas.Put("a", v, []byte("stale"))}); !errors.Is(err, cas.ErrConflict) {
			t.Fatalf("stale commit on the conn: %v", err)
		}
		if it, err := s.Get(ctx, "a"); err != nil || string(it.Value) != "2" || it.Version != vs[0] {
			t.Fatalf("a = %+v, %v; want 2 at v%d", it, err, vs[0])
		}
	})
}
