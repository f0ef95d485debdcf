package pgcas_test

import (
	"context"
	"strings"
	"testing"

	"github.com/occkit/occkit/adapters/pgcas"
	"github.com/occkit/occkit/internal/pgtest"
)

// TestTableMissingSequence: a write to a table whose version sequence was
// never created fails with an error that names the sequence, the
// TableConfig field and its default, and the migration that creates it,
// and keeps PostgreSQL's own error reachable.
func TestTableMissingSequence(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.Pool(t)
	// A version column without a sequence: the migration's second step
	// was forgotten.
	if _, err := pool.Exec(ctx, `CREATE TABLE inventory (
    sku text PRIMARY KEY, name text NOT NULL, stock integer NOT NULL, version bigint NOT NULL DEFAULT 1)`); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO inventory VALUES ('sku-1', 'lamp', 3, 1)`); err != nil {
		t.Fatal(err)
	}
	var schema string
	if err := pool.QueryRow(ctx, `SELECT current_schema()`).Scan(&schema); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		cfg  pgcas.TableConfig
		seq  string
	}{
		{"default name", pgcas.TableConfig{Table: "inventory", KeyColumn: "sku"}, `"inventory_version_seq"`},
		{"configured", pgcas.TableConfig{Table: "inventory", KeyColumn: "sku", VersionSequence: "stock_versions"}, `"stock_versions"`},
		{"in a schema", pgcas.TableConfig{Schema: schema, Table: "inventory", KeyColumn: "sku"}, `"` + schema + `"."inventory_version_seq"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tbl, err := pgcas.NewTable[item](pool, tc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			_, insErr := tbl.Insert(ctx, item{SKU: "sku-2", Name: "desk", Stock: 1})
			_, updErr := tbl.Update(ctx, item{SKU: "sku-1", Name: "lamp", Stock: 2, Version: 1})
			_, modErr := tbl.Modify(ctx, "sku-1", func(cur item, _ bool) (item, error) {
				cur.Stock--
				return cur, nil
			})
			pgtest.WantMissingSequence(t, map[string]error{"insert": insErr, "update": updErr, "modify": modErr},
				tc.seq, "TableConfig.VersionSequence", "<table>_<version column>_seq", "CREATE SEQUENCE "+tc.seq)
			t.Logf("insert: %v", insErr)
		})
	}

	// A missing table is not a missing sequence.
	gone, err := pgcas.NewTable[item](pool, pgcas.TableConfig{Table: "no_such_table", KeyColumn: "sku"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := gone.Insert(ctx, item{SKU: "sku-1"}); err == nil || strings.Contains(err.Error(), "VersionSequence") {
		t.Errorf("insert into a missing table: %v, want an error that does not blame the sequence", err)
	}
}
