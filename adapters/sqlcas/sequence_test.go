package sqlcas_test

import (
	"context"
	"strings"
	"testing"

	"github.com/occkit/occkit/adapters/sqlcas"
	"github.com/occkit/occkit/internal/pgtest"
)

// TestTableMissingSequence: on PostgreSQL, a write to a table whose
// version sequence was never created (no CreateCounter, no migration)
// fails with an error that names the sequence, TableConfig.Counter and
// its default, CreateCounter and the migration, and keeps PostgreSQL's
// own error reachable. The other dialects' counters say so already ("no
// version counter ...: create it with CreateCounter").
func TestTableMissingSequence(t *testing.T) {
	ctx := context.Background()
	db := openDB(t, sqlcas.Postgres)
	if _, err := db.ExecContext(ctx, accountsDDL(sqlcas.Postgres)); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `INSERT INTO accounts (id, owner, balance, version) VALUES (1, 'ada', 100, 1)`); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		counter string
		seq     string
	}{
		{"default name", "", `"accounts_version_seq"`},
		{"configured", "account_versions", `"account_versions"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tbl, err := sqlcas.NewTable[account](db, sqlcas.TableConfig{Dialect: sqlcas.Postgres, Table: "accounts", Counter: tc.counter})
			if err != nil {
				t.Fatal(err)
			}
			_, insErr := tbl.Insert(ctx, account{ID: 2, Owner: "bob"})
			_, updErr := tbl.Update(ctx, account{ID: 1, Owner: "ada", Balance: 90, Version: 1})
			_, modErr := tbl.Modify(ctx, int64(1), func(cur account, _ bool) (account, error) {
				cur.Balance -= 10
				return cur, nil
			})
			pgtest.WantMissingSequence(t, map[string]error{"insert": insErr, "update": updErr, "modify": modErr},
				tc.seq, "TableConfig.Counter", "<table>_<version column>_seq", "CreateCounter", "CREATE SEQUENCE "+tc.seq)
			t.Logf("insert: %v", insErr)

			// CreateCounter is the cure.
			if err := tbl.CreateCounter(ctx); err != nil {
				t.Fatal(err)
			}
			bob, err := tbl.Insert(ctx, account{ID: 2, Owner: "bob"})
			if err != nil {
				t.Fatalf("insert after CreateCounter: %v", err)
			}
			if err := tbl.Delete(ctx, 2, bob.Version); err != nil {
				t.Fatal(err)
			}
		})
	}

	// A missing table is not a missing sequence.
	gone, err := sqlcas.NewTable[account](db, sqlcas.TableConfig{Dialect: sqlcas.Postgres, Table: "no_such_table"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := gone.Insert(ctx, account{ID: 1}); err == nil || strings.Contains(err.Error(), "TableConfig.Counter") {
		t.Errorf("insert into a missing table: %v, want an error that does not blame the sequence", err)
	}
}
