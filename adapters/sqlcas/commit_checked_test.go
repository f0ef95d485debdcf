package sqlcas_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/occkit/occkit/adapters/sqlcas"
	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/internal/mysqltest"
	"github.com/occkit/occkit/internal/txntest"
	"github.com/occkit/occkit/occ"
)

// blockStore returns a MySQL/MariaDB store whose keys a and b hold "1",
// and whether the server is MariaDB (whose commits run as one block).
func blockStore(t *testing.T) (*sqlcas.Store, bool, []cas.Version) {
	t.Helper()
	ctx := context.Background()
	db := mysqltest.DB(t)
	store := storeOn(t, db, sqlcas.Config{Dialect: sqlcas.MySQL})
	var vs []cas.Version
	for _, k := range []string{"a", "b"} {
		v, err := store.CompareAndSwap(ctx, k, 0, []byte("1"))
		if err != nil {
			t.Fatal(err)
		}
		vs = append(vs, v)
	}
	return store, isMariaDB(t, db), vs
}

// isMariaDB reports whether db's server is MariaDB.
func isMariaDB(t *testing.T, db *sql.DB) bool {
	t.Helper()
	var version string
	if err := db.QueryRowContext(context.Background(), "SELECT VERSION()").Scan(&version); err != nil {
		t.Fatal(err)
	}
	return strings.Contains(version, "MariaDB")
}

// TestCommitBlock: on MariaDB a commit of live keys runs as one strict
// UPDATE (on MySQL the store finds it refused and commits as before);
// it applies whole, and a refused one writes nothing and carries the
// moved key's current item.
func TestCommitBlock(t *testing.T) {
	ctx := context.Background()
	store, mariadb, vs := blockStore(t)
	got, err := store.Commit(ctx, []cas.Op{cas.Put("a", vs[0], []byte("2")), cas.Put("b", vs[1], []byte("3"))})
	if err != nil {
		t.Fatal(err)
	}
	if store.RunsStrict() != mariadb {
		t.Fatalf("commits run as one strict UPDATE: %v; the server is MariaDB: %v", store.RunsStrict(), mariadb)
	}
	for i, k := range []string{"a", "b"} {
		it, err := store.Get(ctx, k)
		if err != nil || it.Version != got[i] || string(it.Value) != []string{"2", "3"}[i] {
			t.Fatalf("%s = %q v%d, %v; want the commit's value at v%d", k, it.Value, it.Version, err, got[i])
		}
	}
	// b is stale now: nothing is written, and the conflict names b with
	// its current item.
	_, err = store.Commit(ctx, []cas.Op{cas.Put("a", got[0], []byte("9")), cas.Put("b", vs[1], []byte("9"))})
	var ce *cas.ConflictError
	if !errors.As(err, &ce) || ce.Key != "b" || !ce.HasCurrent || ce.Current.Version != got[1] || string(ce.Current.Value) != "3" {
		t.Fatalf("stale commit: %v, want a conflict on b carrying v%d \"3\"", err, got[1])
	}
	if it, _ := store.Get(ctx, "a"); string(it.Value) != "2" {
		t.Fatalf("a = %q after a refused commit, want \"2\"", it.Value)
	}
}

// TestCommitBlockErrorRollsBack: a server error inside the block (here a
// lock wait timeout) rolls its transaction back: the connection is left
// with no transaction open and holding no lock, and nothing was written.
func TestCommitBlockErrorRollsBack(t *testing.T) {
	ctx := context.Background()
	store, mariadb, vs := blockStore(t)
	if !mariadb {
		t.Skip("MySQL runs no blocks")
	}
	got, err := store.Commit(ctx, []cas.Op{cas.Put("a", vs[0], []byte("2")), cas.Put("b", vs[1], []byte("3"))})
	if err != nil || !store.RunsStrict() {
		t.Fatalf("first commit: %v, as one strict UPDATE: %v", err, store.RunsStrict())
	}
	db := store.DB()
	holder, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Rollback()
	if _, err := holder.ExecContext(ctx, "SELECT k FROM occkit_cas WHERE k = 'b' FOR UPDATE"); err != nil {
		t.Fatal(err)
	}
	conn := openConn(t, db)
	if _, err := conn.ExecContext(ctx, "SET SESSION innodb_lock_wait_timeout = 1"); err != nil {
		t.Fatal(err)
	}
	_, err = store.With(conn).Commit(ctx, []cas.Op{cas.Put("a", got[0], []byte("8")), cas.Put("b", got[1], []byte("9"))})
	if err == nil {
		t.Fatal("commit over a row locked elsewhere succeeded")
	}
	var open int
	if err := conn.QueryRowContext(ctx, "SELECT @@in_transaction").Scan(&open); err != nil || open != 0 {
		t.Fatalf("after the block's error (%v) the connection's transaction is open: %d, %v", err, open, err)
	}
	holder.Rollback()
	for i, k := range []string{"a", "b"} {
		if it, _ := store.Get(ctx, k); string(it.Value) != []string{"2", "3"}[i] {
			t.Fatalf("%s = %q after a failed commit, want the first commit's", k, it.Value)
		}
	}
}

// TestCommitBlockLostReply: the reply to a block is lost and no
// connection can read the rows back: the commit is a *cas.AmbiguousError
// with its write id (never "rolled back"), and the rows show it applied
// once, both of them.
func TestCommitBlockLostReply(t *testing.T) {
	ctx := context.Background()
	direct, viaProxy, p := proxied(t)
	directDB := mysqltest.Open(t, direct)
	store, v1 := storeWithK(t, mysqltest.Open(t, viaProxy))
	v2, err := store.CompareAndSwap(ctx, "other", 0, []byte("x"))
	if err != nil {
		t.Fatal(err)
	}
	p.CutAfter(1)
	_, err = store.Commit(ctx, []cas.Op{cas.Put("k", v1, []byte("2")), cas.Put("other", v2, []byte("y"))})
	p.CutAfter(0)
	var amb *cas.AmbiguousError
	if !errors.As(err, &amb) || amb.WriteID == "" {
		t.Fatalf("commit with its reply lost and no way to read back: %v, want a *cas.AmbiguousError with the write id", err)
	}
	for k, want := range map[string]string{"k": "2", "other": "y"} {
		var value string
		var id []byte
		if err := directDB.QueryRowContext(ctx, "SELECT value, write_id FROM occkit_cas WHERE k = ?", k).Scan(&value, &id); err != nil {
			t.Fatal(err)
		}
		if value != want || !strings.EqualFold(hexOf(id), amb.WriteID) {
			t.Fatalf("%s = %q, write id %x; want %q written by %s", k, value, id, want, amb.WriteID)
		}
	}
}

// twoAccounts creates on db the table accounts (id, balance, version)
// with its version counter and rows 1 and 2 holding 100, and returns it.
func twoAccounts(t *testing.T, db *sql.DB) *sqlcas.Table[txntest.Account] {
	t.Helper()
	ctx := context.Background()
	if _, err := db.ExecContext(ctx, `CREATE TABLE accounts (id BIGINT NOT NULL PRIMARY KEY, balance BIGINT NOT NULL, version BIGINT NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	tbl, err := sqlcas.NewTable[txntest.Account](db, sqlcas.TableConfig{Dialect: sqlcas.MySQL, Table: "accounts"})
	if err != nil {
		t.Fatal(err)
	}
	if err := tbl.CreateCounter(ctx); err != nil {
		t.Fatal(err)
	}
	for id := int64(1); id <= 2; id++ {
		if _, err := tbl.Insert(ctx, txntest.Account{ID: id, Balance: 100}); err != nil {
			t.Fatal(err)
		}
	}
	return tbl
}

// moveOneAccount is a ModifyMany mutate that moves 1 from the first row
// to the second.
func moveOneAccount(a []txntest.Account, _ []bool) ([]txntest.Account, error) {
	a[0].Balance--
	a[1].Balance++
	return a, nil
}

// TestTableBlockErrorRollsBack: a Txn of table rows whose one-statement
// commit meets a server error (a lock wait timeout) rolls back: the
// connection keeps no transaction, and no row changed.
func TestTableBlockErrorRollsBack(t *testing.T) {
	ctx := context.Background()
	// One connection that gives up a lock wait after a second.
	cfg := mysqltest.Database(t)
	cfg.Params = map[string]string{"innodb_lock_wait_timeout": "1"}
	one := mysqltest.Open(t, cfg)
	one.SetMaxOpenConns(1)
	if !isMariaDB(t, one) {
		t.Skip("MySQL runs no blocks")
	}
	mine := twoAccounts(t, one)
	move := moveOneAccount
	db := mysqltest.Open(t, cfg.Clone())
	if _, err := mine.ModifyMany(ctx, []any{int64(1), int64(2)}, move); err != nil || !mine.RunsBlocks() {
		t.Fatalf("first transfer: %v, as a block: %v", err, mine.RunsBlocks())
	}
	holder, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Rollback()
	if _, err := holder.ExecContext(ctx, "SELECT id FROM accounts WHERE id = 2 FOR UPDATE"); err != nil {
		t.Fatal(err)
	}
	_, err = mine.ModifyMany(ctx, []any{int64(1), int64(2)}, move, occ.WithMaxAttempts(1))
	if err == nil {
		t.Fatal("a transfer over a row locked elsewhere succeeded")
	}
	var open int
	if err := one.QueryRowContext(ctx, "SELECT @@in_transaction").Scan(&open); err != nil || open != 0 {
		t.Fatalf("after the block's error the connection's transaction is open: %d, %v", open, err)
	}
	holder.Rollback()
	for id, want := range map[int64]int64{1: 99, 2: 101} {
		if a, err := mine.Get(ctx, id); err != nil || a.Balance != want {
			t.Fatalf("account %d = %d, %v after a failed transfer; want %d", id, a.Balance, err, want)
		}
	}
}

// TestCommitBlockNoConnection: a commit whose deadline ends while it
// waits for a connection was never sent: the deadline's error, not an
// ambiguous outcome (which a statement sent on the pool would report).
func TestCommitBlockNoConnection(t *testing.T) {
	ctx := context.Background()
	store, mariadb, vs := blockStore(t)
	if !mariadb {
		t.Skip("MySQL runs no blocks")
	}
	db := store.DB()
	db.SetMaxOpenConns(1)
	busy, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	_, err = store.Commit(short, []cas.Op{cas.Put("a", vs[0], []byte("2")), cas.Put("b", vs[1], []byte("3"))})
	if err == nil || errors.Is(err, cas.ErrAmbiguous) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("commit that never got a connection: %v; want the deadline, not an ambiguous outcome", err)
	}
	busy.Close()
	if it, _ := store.Get(ctx, "a"); string(it.Value) != "1" {
		t.Fatalf("a = %q, want \"1\"", it.Value)
	}
}
