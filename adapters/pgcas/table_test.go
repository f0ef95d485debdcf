package pgcas_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/occkit/occkit/adapters/pgcas"
	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/internal/pgtest"
	"github.com/occkit/occkit/occ"
)

// item is a row of the inventory table of these tests (and of the
// migration in docs/postgres.md).
type item struct {
	SKU     string `db:"sku"`
	Name    string `db:"name"`
	Stock   int    `db:"stock"`
	Version int64  `db:"version"`
}

const inventoryDDL = `CREATE TABLE inventory (
    sku     text PRIMARY KEY,
    name    text NOT NULL,
    stock   integer NOT NULL CHECK (stock >= 0),
    version bigserial NOT NULL -- its sequence, inventory_version_seq, makes the versions
)`

func inventory(t *testing.T, pool *pgxpool.Pool) *pgcas.Table[item] {
	t.Helper()
	if _, err := pool.Exec(context.Background(), inventoryDDL); err != nil {
		t.Fatal(err)
	}
	tbl, err := pgcas.NewTable[item](pool, pgcas.TableConfig{Table: "inventory", KeyColumn: "sku"})
	if err != nil {
		t.Fatal(err)
	}
	return tbl
}

func TestTable(t *testing.T) {
	ctx := context.Background()
	tbl := inventory(t, pgtest.Pool(t))

	if _, err := tbl.Get(ctx, "none"); !errors.Is(err, cas.ErrNotFound) {
		t.Fatalf("get missing: %v", err)
	}
	in, err := tbl.Insert(ctx, item{SKU: "sku-1", Name: "lamp", Stock: 10, Version: 99})
	if err != nil {
		t.Fatal(err)
	}
	if in.Version <= 0 || in.Version == 99 || in.Stock != 10 {
		t.Fatalf("inserted %+v, want a version from the sequence", in)
	}
	if _, err := tbl.Insert(ctx, item{SKU: "sku-1", Name: "again"}); !errors.Is(err, cas.ErrConflict) {
		t.Fatalf("insert of an existing key: %v, want ErrConflict", err)
	}

	got, err := tbl.Get(ctx, "sku-1")
	if err != nil || got != in {
		t.Fatalf("get = %+v, %v; want %+v", got, err, in)
	}
	got.Stock--
	up, err := tbl.Update(ctx, got)
	if err != nil || up.Version <= in.Version || up.Stock != 9 {
		t.Fatalf("update = %+v, %v; want stock 9 at a version above %d", up, err, in.Version)
	}

	// A stale version: a conflict, with the current row in the same trip.
	stale := in
	stale.Stock = 0
	cur, err := tbl.Update(ctx, stale)
	var ce *cas.ConflictError
	if !errors.As(err, &ce) || errors.Is(err, cas.ErrNotFound) {
		t.Fatalf("stale update: %v, want ErrConflict only", err)
	}
	if cur != up || !ce.HasCurrent || ce.Current.Version != cas.Version(up.Version) || ce.Expected != cas.Version(in.Version) {
		t.Fatalf("the conflict returned %+v (%v), want the current row %+v", cur, err, up)
	}

	if _, err := tbl.Update(ctx, item{SKU: "sku-1", Name: "never read"}); !errors.Is(err, cas.ErrInvalidVersion) {
		t.Fatalf("update of a row with version 0: %v, want ErrInvalidVersion", err)
	}

	// A missing row: a conflict that also says not found, as a Store's.
	_, err = tbl.Update(ctx, item{SKU: "none", Name: "x", Version: 1})
	if !errors.Is(err, cas.ErrNotFound) || !errors.Is(err, cas.ErrConflict) {
		t.Fatalf("update of a missing row: %v, want ErrConflict and ErrNotFound", err)
	}

	if err := tbl.Delete(ctx, "sku-1", cas.Version(in.Version)); !errors.Is(err, cas.ErrConflict) || errors.Is(err, cas.ErrNotFound) {
		t.Fatalf("stale delete: %v, want ErrConflict only", err)
	}
	if err := tbl.Delete(ctx, "none", 1); !errors.Is(err, cas.ErrNotFound) || !errors.Is(err, cas.ErrConflict) {
		t.Fatalf("delete of a missing row: %v, want ErrConflict and ErrNotFound", err)
	}
	if err := tbl.Delete(ctx, "sku-1", 0); !errors.Is(err, cas.ErrInvalidVersion) {
		t.Fatalf("delete at version 0: %v, want ErrInvalidVersion", err)
	}
	if err := tbl.Delete(ctx, "sku-1", cas.Version(up.Version)); err != nil {
		t.Fatal(err)
	}
	if _, err := tbl.Get(ctx, "sku-1"); !errors.Is(err, cas.ErrNotFound) {
		t.Fatalf("get after delete: %v", err)
	}
}

// Modify: a create from an absent row (cur has its key set), then an
// update; a mutate that changes the key or fails writes nothing.
func TestTableModify(t *testing.T) {
	ctx := context.Background()
	tbl := inventory(t, pgtest.Pool(t))
	created, err := tbl.Modify(ctx, "new", func(cur item, exists bool) (item, error) {
		if exists || cur.SKU != "new" {
			t.Errorf("cur = %+v, exists %v; want the zero row with its key", cur, exists)
		}
		cur.Name, cur.Stock = "desk", 3
		return cur, nil
	})
	if err != nil || created.Version <= 0 || created.Stock != 3 {
		t.Fatalf("modify of an absent row = %+v, %v", created, err)
	}
	up, err := tbl.Modify(ctx, "new", func(cur item, exists bool) (item, error) {
		if !exists || cur != created {
			t.Errorf("cur = %+v, exists %v; want %+v", cur, exists, created)
		}
		cur.Stock--
		return cur, nil
	})
	if err != nil || up.Stock != 2 || up.Version <= created.Version {
		t.Fatalf("modify = %+v, %v", up, err)
	}
	if _, err := tbl.Modify(ctx, "new", func(cur item, _ bool) (item, error) {
		cur.SKU = "other"
		return cur, nil
	}); !errors.Is(err, cas.ErrInvalidKey) {
		t.Fatalf("mutate changed the key: %v, want ErrInvalidKey", err)
	}
	if _, err := tbl.Modify(ctx, "new", func(item, bool) (item, error) { return item{}, errSoldOut }); err != errSoldOut {
		t.Fatalf("mutate's error: %v, want it as is", err)
	}
	if _, err := tbl.Modify(ctx, 42, func(cur item, _ bool) (item, error) { return cur, nil }); !errors.Is(err, cas.ErrInvalidKey) {
		t.Fatalf("a key of the wrong type: %v, want ErrInvalidKey", err)
	}
	if got, _ := tbl.Get(ctx, "new"); got != up {
		t.Fatalf("row = %+v, want %+v", got, up)
	}
}

// order has a key the database generates, an embedded struct, a skipped
// field and a fence column.
type order struct {
	ID int64 `db:"id"`
	audit
	Note    string `db:"-"`
	Version int32  `db:"row_version"`
	Token   uint64 `db:"lease_token"`
}

type audit struct {
	Status string `db:"Status"` // a quoted, mixed-case column
}

func TestTableGeneratedKeyAndFencing(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.Pool(t)
	if _, err := pool.Exec(ctx, `CREATE TABLE "orders; --" (
		id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
		"Status" text NOT NULL,
		row_version bigserial NOT NULL,
		lease_token bigint NOT NULL DEFAULT 0)`); err != nil {
		t.Fatal(err)
	}
	tbl, err := pgcas.NewTable[order](pool, pgcas.TableConfig{
		Table: "orders; --", VersionColumn: "row_version", FenceColumn: "lease_token",
	})
	if err != nil {
		t.Fatal(err)
	}
	o, err := tbl.Insert(ctx, order{audit: audit{Status: "new"}, Note: "ignored"})
	if err != nil {
		t.Fatal(err)
	}
	if o.ID == 0 || o.Version <= 0 || o.Status != "new" {
		t.Fatalf("inserted %+v", o)
	}
	o.Status = "paid"
	v1 := o.Version
	o, err = tbl.UpdateFenced(ctx, o, 5)
	if err != nil || o.Token != 5 || o.Version <= v1 {
		t.Fatalf("fenced update = %+v, %v", o, err)
	}
	o.Status = "stale holder"
	_, err = tbl.UpdateFenced(ctx, o, 4)
	var fe *cas.FencedError
	if !errors.As(err, &fe) || fe.Token != 4 || fe.Highest != 5 || errors.Is(err, cas.ErrConflict) {
		t.Fatalf("stale token: %v, want a *cas.FencedError", err)
	}
	// The stale token is reported before the version.
	v2 := o.Version
	o.Version = v1
	if _, err := tbl.UpdateFenced(ctx, o, 3); !errors.Is(err, cas.ErrFenced) {
		t.Fatalf("stale token and version: %v, want ErrFenced", err)
	}
	o.Version = v2
	o.Status = "shipped"
	if o, err = tbl.Update(ctx, o); err != nil || o.Token != 5 {
		t.Fatalf("a plain update keeps the token: %+v, %v", o, err)
	}
}

// TestTableModifyZeroGeneratedKey: Modify and ModifyMany of the zero key
// of a table whose keys the database generates are refused before
// anything runs. An insert leaves a zero key out for the database to
// fill, so the call would otherwise write a row under a key it never
// returns, and a second call another.
func TestTableModifyZeroGeneratedKey(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.Pool(t)
	if _, err := pool.Exec(ctx, `CREATE TABLE acc (id bigserial PRIMARY KEY, n bigint NOT NULL, version bigserial NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	type acc struct {
		ID      int64       `db:"id"`
		N       int64       `db:"n"`
		Version cas.Version `db:"version"`
	}
	tbl, err := pgcas.NewTable[acc](pool, pgcas.TableConfig{Table: "acc"})
	if err != nil {
		t.Fatal(err)
	}
	inc := func(a acc, _ bool) (acc, error) { a.N++; return a, nil }
	for range 2 {
		if got, err := tbl.Modify(ctx, int64(0), inc); !errors.Is(err, cas.ErrInvalidKey) {
			t.Fatalf("Modify of key 0 = %+v, %v; want cas.ErrInvalidKey", got, err)
		}
	}
	if _, err := tbl.ModifyMany(ctx, []any{int64(0), int64(5)}, func(rows []acc, _ []bool) ([]acc, error) {
		return rows, nil
	}); !errors.Is(err, cas.ErrInvalidKey) {
		t.Fatalf("ModifyMany with key 0: %v; want cas.ErrInvalidKey", err)
	}
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM acc`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("rows after the refused calls: %d, %v; want none", n, err)
	}
	// A key the database generated is Modify's to update, and so is a
	// row that exists with key 0.
	a, err := tbl.Insert(ctx, acc{})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := tbl.Modify(ctx, a.ID, inc); err != nil || got.ID != a.ID || got.N != 1 {
		t.Fatalf("Modify of the generated key %d = %+v, %v", a.ID, got, err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO acc (id, n) VALUES (0, 5)`); err != nil {
		t.Fatal(err)
	}
	if got, err := tbl.Modify(ctx, int64(0), inc); err != nil || got.ID != 0 || got.N != 6 {
		t.Fatalf("Modify of the existing row 0 = %+v, %v; want n 6", got, err)
	}
	if got, err := tbl.ModifyMany(ctx, []any{int64(0), a.ID}, func(rows []acc, _ []bool) ([]acc, error) {
		rows[0].N++
		rows[1].N++
		return rows, nil
	}); err != nil || got[0].N != 7 || got[1].N != 2 {
		t.Fatalf("ModifyMany of rows 0 and %d = %+v, %v", a.ID, got, err)
	}
}

func TestNewTableErrors(t *testing.T) {
	pool := pgtest.Pool(t)
	type noTag struct {
		ID      int64 `db:"id"`
		Version int64
	}
	type noVersion struct {
		ID int64 `db:"id"`
	}
	type textVersion struct {
		ID      int64  `db:"id"`
		Version string `db:"version"`
	}
	tests := []struct {
		name string
		new  func() error
		want string
	}{
		{"NoTable", func() error { _, err := pgcas.NewTable[item](pool, pgcas.TableConfig{}); return err }, "Table is empty"},
		{"NotStruct", func() error { _, err := pgcas.NewTable[int](pool, pgcas.TableConfig{Table: "t"}); return err }, "not a struct"},
		{"NoTag", func() error { _, err := pgcas.NewTable[noTag](pool, pgcas.TableConfig{Table: "t"}); return err }, "no `db` tag"},
		{"NoVersion", func() error { _, err := pgcas.NewTable[noVersion](pool, pgcas.TableConfig{Table: "t"}); return err }, "version column"},
		{"TextVersion", func() error { _, err := pgcas.NewTable[textVersion](pool, pgcas.TableConfig{Table: "t"}); return err }, "not an integer"},
		{"NoFence", func() error {
			_, err := pgcas.NewTable[item](pool, pgcas.TableConfig{Table: "t", KeyColumn: "sku", FenceColumn: "tok"})
			return err
		}, "fence column"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.new(); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to say %q", err, tc.want)
			}
		})
	}
	tbl, _ := pgcas.NewTable[item](pool, pgcas.TableConfig{Table: "t", KeyColumn: "sku"})
	if _, err := tbl.UpdateFenced(context.Background(), item{}, 1); !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("UpdateFenced without a fence column: %v", err)
	}
}

// errSoldOut ends a purchase: not retried.
var errSoldOut = errors.New("sold out")

// buy is the repository method of docs/postgres.md: decrement stock by
// one, optimistically, with Modify (occ.Update's loop).
func buy(ctx context.Context, tbl *pgcas.Table[item], sku string) error {
	_, err := tbl.Modify(ctx, sku, func(cur item, exists bool) (item, error) {
		if !exists || cur.Stock == 0 {
			return cur, errSoldOut
		}
		cur.Stock--
		return cur, nil
	}, occ.WithMaxAttempts(100))
	return err
}

// buyByHand is the same with Update and occ.Retry, retrying from the
// current row a conflict returns.
func buyByHand(ctx context.Context, tbl *pgcas.Table[item], sku string) error {
	var (
		cur  item
		have bool
	)
	return occ.Retry(ctx, func(ctx context.Context) error {
		if !have {
			var err error
			if cur, err = tbl.Get(ctx, sku); err != nil {
				return err
			}
		}
		if cur.Stock == 0 {
			return errSoldOut
		}
		cur.Stock--
		next, err := tbl.Update(ctx, cur)
		// On a conflict next is the current row: start from it.
		cur, have = next, errors.Is(err, cas.ErrConflict)
		return err
	}, occ.WithMaxAttempts(100))
}

// TestInventory: 8 goroutines buy from one stock until it is sold out,
// half with Modify, half by hand. The stock never goes negative and every
// unit is sold exactly once.
func TestInventory(t *testing.T) {
	ctx := context.Background()
	const initial, workers = 120, 8
	tbl := inventory(t, pgtest.Pool(t, func(c *pgxpool.Config) { c.MaxConns = workers }))
	if _, err := tbl.Insert(ctx, item{SKU: "hot", Name: "concert ticket", Stock: initial}); err != nil {
		t.Fatal(err)
	}
	var sold atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				b := buy
				if w%2 == 1 {
					b = buyByHand
				}
				err := b(ctx, tbl, "hot")
				switch {
				case err == nil:
					sold.Add(1)
				case errors.Is(err, errSoldOut):
					return
				default:
					t.Errorf("worker %d: %v", w, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	it, err := tbl.Get(ctx, "hot")
	if err != nil {
		t.Fatal(err)
	}
	if it.Stock < 0 || sold.Load()+int64(it.Stock) != initial {
		t.Fatalf("sold %d + remaining %d != initial %d", sold.Load(), it.Stock, initial)
	}
	if it.Stock != 0 {
		t.Fatalf("final row %+v, want sold out", it)
	}
}

// Regression: Insert reported every unique violation as a version
// conflict. Only the key's makes the insert a conflict; a duplicate in
// another unique column is a plain error carrying the *pgconn.PgError.
func TestTableInsertOtherUniqueViolation(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.Pool(t)
	if _, err := pool.Exec(ctx, `CREATE TABLE products (
		sku     text PRIMARY KEY,
		name    text NOT NULL UNIQUE,
		stock   integer NOT NULL,
		version bigserial NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	tbl, err := pgcas.NewTable[item](pool, pgcas.TableConfig{Table: "products", KeyColumn: "sku"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tbl.Insert(ctx, item{SKU: "a", Name: "lamp"}); err != nil {
		t.Fatal(err)
	}
	for range 2 { // the second time with the key's indexes known
		_, err = tbl.Insert(ctx, item{SKU: "b", Name: "lamp"})
		var pgErr *pgconn.PgError
		if errors.Is(err, cas.ErrConflict) || !errors.As(err, &pgErr) || pgErr.Code != "23505" {
			t.Fatalf("insert of a new key with a duplicate name: %v, want a plain error with a *pgconn.PgError 23505", err)
		}
		if _, err := tbl.Insert(ctx, item{SKU: "a", Name: "other"}); !errors.Is(err, cas.ErrConflict) {
			t.Fatalf("insert of an existing key: %v, want ErrConflict", err)
		}
	}
}

// The key's unique indexes are not only the primary key.
func TestTableInsertKeyIndexes(t *testing.T) {
	tests := []struct{ name, ddl string }{
		{"UniqueIndex", `CREATE TABLE products (
			id      bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
			sku     text NOT NULL,
			name    text NOT NULL,
			stock   integer NOT NULL,
			version bigserial NOT NULL);
			CREATE UNIQUE INDEX products_sku ON products (sku)`},
		{"Partitioned", `CREATE TABLE products (
			sku     text PRIMARY KEY,
			name    text NOT NULL,
			stock   integer NOT NULL,
			version bigserial NOT NULL) PARTITION BY RANGE (sku);
			CREATE TABLE products_1 PARTITION OF products FOR VALUES FROM (MINVALUE) TO ('m');
			CREATE TABLE products_2 PARTITION OF products FOR VALUES FROM ('m') TO (MAXVALUE)`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			pool := pgtest.Pool(t)
			if _, err := pool.Exec(ctx, tc.ddl); err != nil {
				t.Fatal(err)
			}
			tbl, err := pgcas.NewTable[item](pool, pgcas.TableConfig{Table: "products", KeyColumn: "sku"})
			if err != nil {
				t.Fatal(err)
			}
			for _, sku := range []string{"a", "z"} {
				if _, err := tbl.Insert(ctx, item{SKU: sku, Name: "lamp " + sku}); err != nil {
					t.Fatal(err)
				}
				if _, err := tbl.Insert(ctx, item{SKU: sku, Name: "other " + sku}); !errors.Is(err, cas.ErrConflict) {
					t.Fatalf("insert of an existing key: %v, want ErrConflict", err)
				}
			}
		})
	}
}

// Regression: a lost reply to Insert was a plain error, not ambiguous: the
// row may have been inserted.
func TestTableInsertLostReplyIsAmbiguous(t *testing.T) {
	ctx := context.Background()
	var f pgtest.Faults
	tbl := inventory(t, pgtest.Pool(t, f.Configure))
	f.LoseReply("sku-lost")
	_, err := tbl.Insert(ctx, item{SKU: "sku-lost", Name: "lamp", Stock: 1})
	fired(t, &f, 1)
	var ae *cas.AmbiguousError
	if !errors.Is(err, cas.ErrAmbiguous) || !errors.As(err, &ae) || ae.Op != "insert" || ae.Key != "sku-lost" || ae.WriteID != "" {
		t.Fatalf("err = %v, want a *cas.AmbiguousError for the insert, without a write id", err)
	}
	if errors.Is(err, cas.ErrConflict) || !errors.Is(err, pgtest.ErrInjected) {
		t.Fatalf("err = %v, want the transport error reachable and no conflict", err)
	}
	got, err := tbl.Get(ctx, "sku-lost")
	if err != nil || got.Version <= 0 {
		t.Fatalf("get = %+v, %v; want the row the lost insert applied", got, err)
	}
}

// Regression: a NULL fence column (a row written before the column had a
// default, or by other code) made every UpdateFenced a conflict. NULL
// counts as token 0.
func TestTableUpdateFencedNullFence(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.Pool(t)
	if _, err := pool.Exec(ctx, `CREATE TABLE orders (
		id          bigint PRIMARY KEY,
		"Status"    text NOT NULL,
		row_version bigserial NOT NULL,
		lease_token bigint);
		INSERT INTO orders VALUES (1, 'new', DEFAULT, NULL)`); err != nil {
		t.Fatal(err)
	}
	tbl, err := pgcas.NewTable[order](pool, pgcas.TableConfig{
		Table: "orders", VersionColumn: "row_version", FenceColumn: "lease_token",
	})
	if err != nil {
		t.Fatal(err)
	}
	o, err := tbl.UpdateFenced(ctx, order{ID: 1, audit: audit{Status: "paid"}, Version: 1}, 5)
	if err != nil || o.Token != 5 || o.Version <= 1 || o.Status != "paid" {
		t.Fatalf("fenced update of a row with a NULL token = %+v, %v; want it written with token 5", o, err)
	}
	o.Status = "stale"
	if _, err := tbl.UpdateFenced(ctx, o, 4); !errors.Is(err, cas.ErrFenced) {
		t.Fatalf("smaller token after it: %v, want ErrFenced", err)
	}
}
