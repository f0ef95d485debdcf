package pgcas_test

import (
	"context"
	"testing"

	"github.com/occkit/occkit/adapters/pgcas"
	"github.com/occkit/occkit/cas/tabletest"
	"github.com/occkit/occkit/internal/pgtest"
)

// TestTableConformance runs the repository-table suite on pgcas.Table.
func TestTableConformance(t *testing.T) {
	tabletest.Run(t, tabletest.Harness[any]{
		New: func(t *testing.T) tabletest.Table[any] {
			pool := pgtest.Pool(t)
			if _, err := pool.Exec(context.Background(), `CREATE TABLE rows (id text PRIMARY KEY, n bigint NOT NULL, version bigserial NOT NULL)`); err != nil {
				t.Fatal(err)
			}
			tbl, err := pgcas.NewTable[tabletest.Row](pool, pgcas.TableConfig{Table: "rows"})
			if err != nil {
				t.Fatal(err)
			}
			return tbl
		},
		Key:           func(id string) any { return id },
		EscalatesMany: true,
		Reopen: func(t *testing.T, tbl tabletest.Table[any]) tabletest.Table[any] {
			o, err := pgcas.NewTable[tabletest.Row](tbl.(*pgcas.Table[tabletest.Row]).Pool(), pgcas.TableConfig{Table: "rows"})
			if err != nil {
				t.Fatal(err)
			}
			return o
		},
	})
}
