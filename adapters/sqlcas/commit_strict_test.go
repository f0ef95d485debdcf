package sqlcas_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/go-sql-driver/mysql"

	"github.com/occkit/occkit/adapters/sqlcas"
	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/internal/mysqltest"
)

// TestCommitStrictInALaxSession: on a connection whose sql_mode is not
// strict (where writing NULL to a NOT NULL column writes 0 with a
// warning), a commit with one stale key still writes nothing: the
// statement sets strict mode for itself. Without that, the fresh key
// would be written and the stale one's version set to 0.
func TestCommitStrictInALaxSession(t *testing.T) {
	ctx := context.Background()
	db := mysqltest.DB(t, func(c *mysql.Config) {
		if c.Params == nil {
			c.Params = map[string]string{}
		}
		c.Params["sql_mode"] = "'NO_ENGINE_SUBSTITUTION'"
	})
	var mode string
	if err := db.QueryRowContext(ctx, "SELECT @@SESSION.sql_mode").Scan(&mode); err != nil || strings.Contains(mode, "STRICT") {
		t.Fatalf("session sql_mode %q, %v: want a lax one", mode, err)
	}
	store := storeOn(t, db, sqlcas.Config{Dialect: sqlcas.MySQL})
	va, err := store.CompareAndSwap(ctx, "a", 0, []byte("1"))
	if err != nil {
		t.Fatal(err)
	}
	vb, err := store.CompareAndSwap(ctx, "b", 0, []byte("1"))
	if err != nil {
		t.Fatal(err)
	}
	vb2, err := store.CompareAndSwap(ctx, "b", vb, []byte("2"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = store.Commit(ctx, []cas.Op{cas.Put("a", va, []byte("9")), cas.Put("b", vb, []byte("9"))})
	var ce *cas.ConflictError
	if !errors.As(err, &ce) || ce.Key != "b" || !ce.HasCurrent || ce.Current.Version != vb2 {
		t.Fatalf("commit with b stale: %v, want a conflict on b at v%d", err, vb2)
	}
	for k, want := range map[string]cas.Item{"a": {Value: []byte("1"), Version: va}, "b": {Value: []byte("2"), Version: vb2}} {
		it, err := store.Get(ctx, k)
		if err != nil || string(it.Value) != string(want.Value) || it.Version != want.Version {
			t.Fatalf("%s = %q v%d, %v after a refused commit; want %q v%d", k, it.Value, it.Version, err, want.Value, want.Version)
		}
	}
	// A delete and a put in one commit, both current: applied.
	if _, err := store.Commit(ctx, []cas.Op{cas.Delete("a", va), cas.Put("b", vb2, []byte("3"))}); err != nil {
		t.Fatal(err)
	}
	if _, err := store.Get(ctx, "a"); !errors.Is(err, cas.ErrNotFound) {
		t.Fatalf("a after its delete: %v, want cas.ErrNotFound", err)
	}
}

// TestCommitStrictUnseenKey: a commit that expects a version of a key
// that never had a row (a version made up, or from another table) is a
// conflict on that key and writes nothing, also beside a key that is at
// its version: the one-statement commit, which would write the other key,
// runs only for keys the store has seen with a row.
func TestCommitStrictUnseenKey(t *testing.T) {
	ctx := context.Background()
	store, _, vs := blockStore(t)
	for _, ops := range [][]cas.Op{
		{cas.Put("a", vs[0], []byte("2")), cas.Delete("gone", 5)},
		{cas.Put("a", vs[0], []byte("2")), cas.Put("gone", 5, []byte("2"))},
	} {
		_, err := store.Commit(ctx, ops)
		var ce *cas.ConflictError
		if !errors.As(err, &ce) || ce.Key != "gone" {
			t.Fatalf("commit %v: %v, want a conflict on \"gone\"", ops, err)
		}
		if it, err := store.Get(ctx, "a"); err != nil || it.Version != vs[0] || string(it.Value) != "1" {
			t.Fatalf("a = %q v%d, %v after a refused commit; want \"1\" v%d", it.Value, it.Version, err, vs[0])
		}
	}
}

// TestCommitStrictRowRemoved: a commit of keys seen with a row, one of
// whose rows was then deleted by hand (which docs/sql.md forbids), is an
// error naming what happened, not a success.
func TestCommitStrictRowRemoved(t *testing.T) {
	ctx := context.Background()
	store, mariadb, vs := blockStore(t)
	if !mariadb {
		t.Skip("MySQL commits in a transaction that rolls a short write back")
	}
	if _, err := store.DB().ExecContext(ctx, "DELETE FROM occkit_cas WHERE k = 'b'"); err != nil {
		t.Fatal(err)
	}
	_, err := store.Commit(ctx, []cas.Op{cas.Put("a", vs[0], []byte("2")), cas.Put("b", vs[1], []byte("3"))})
	if err == nil || !strings.Contains(err.Error(), "must never be deleted") {
		t.Fatalf("commit over a removed row: %v, want an error saying a row is missing", err)
	}
}
