package sqlcas_test

import (
	"context"
	"database/sql"
	"testing"

	"github.com/occkit/occkit/adapters/sqlcas"
	"github.com/occkit/occkit/cas/tabletest"
)

// TestTableConformance runs the repository-table suite on sqlcas.Table in
// every dialect, with the caller's own transaction (Table.With).
func TestTableConformance(t *testing.T) {
	eachDialect(t, func(t *testing.T, d sqlcas.Dialect) {
		text := map[sqlcas.Dialect]string{sqlcas.MySQL: "VARCHAR(64)", sqlcas.SQLite: "TEXT", sqlcas.Postgres: "text"}[d]
		dbs := map[tabletest.Table[any]]*sql.DB{}
		tabletest.Run(t, tabletest.Harness[any]{
			New: func(t *testing.T) tabletest.Table[any] {
				ctx := context.Background()
				db := openDB(t, d)
				if _, err := db.ExecContext(ctx, `CREATE TABLE rows_t (id `+text+` NOT NULL PRIMARY KEY, n BIGINT NOT NULL, version BIGINT NOT NULL)`); err != nil {
					t.Fatal(err)
				}
				tbl, err := sqlcas.NewTable[tabletest.Row](db, sqlcas.TableConfig{Dialect: d, Table: "rows_t"})
				if err != nil {
					t.Fatal(err)
				}
				if err := tbl.CreateCounter(ctx); err != nil {
					t.Fatal(err)
				}
				dbs[tbl] = db
				return tbl
			},
			Key:           func(id string) any { return id },
			EscalatesMany: true,
			Reopen: func(t *testing.T, tbl tabletest.Table[any]) tabletest.Table[any] {
				o, err := sqlcas.NewTable[tabletest.Row](dbs[tbl], sqlcas.TableConfig{Dialect: d, Table: "rows_t"})
				if err != nil {
					t.Fatal(err)
				}
				return o
			},
			InTx: func(t *testing.T, tbl tabletest.Table[any], fn func(tabletest.Table[any]) error) error {
				tx, err := dbs[tbl].BeginTx(context.Background(), nil)
				if err != nil {
					t.Fatal(err)
				}
				defer func() {
					if err := tx.Rollback(); err != nil {
						t.Errorf("rollback: %v", err)
					}
				}()
				return fn(tbl.(*sqlcas.Table[tabletest.Row]).With(tx))
			},
		})
	})
}
