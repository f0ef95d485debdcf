package dynamocas_test

import (
	"context"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/occkit/occkit/adapters/dynamocas"
	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/cas/tabletest"
	"github.com/occkit/occkit/internal/dynamotest"
)

// withoutMany hides ModifyMany from tabletest on dynalite, which has no
// TransactWriteItems: the suite skips its ModifyMany tests there,
// visibly, instead of failing them.
type withoutMany struct {
	tabletest.Table[dynamocas.Key]
	name string
}

// Add passes the table's column deltas through (they need no
// transaction).
func (w withoutMany) Add(ctx context.Context, key dynamocas.Key, column string, n int64, b cas.Bounds) (tabletest.Row, error) {
	return w.Table.(*dynamocas.Table[tabletest.Row]).Add(ctx, key, column, n, b)
}

// TestTableConformance runs the repository-table suite on dynamocas.Table
// on every DynamoDB-compatible server the tests run.
func TestTableConformance(t *testing.T) {
	dynamotest.Each(t, func(t *testing.T, srv dynamotest.Server) {
		cli := dynamotest.Client(t, srv)
		open := func(t *testing.T, name string) tabletest.Table[dynamocas.Key] {
			tbl, err := dynamocas.NewTable[tabletest.Row](cli, dynamocas.TableConfig{Table: name, PartitionKey: "id"})
			if err != nil {
				t.Fatal(err)
			}
			if !srv.Transactions {
				return withoutMany{tbl, name}
			}
			return tbl
		}
		tabletest.Run(t, tabletest.Harness[dynamocas.Key]{
			New: func(t *testing.T) tabletest.Table[dynamocas.Key] {
				return open(t, createTable(t, cli, "id", types.ScalarAttributeTypeS, "", ""))
			},
			Key: func(id string) dynamocas.Key { return dynamocas.Key{Partition: id} },
			// Another process's table of the same items: a hot row across
			// processes escalates to the items' exclusive hold.
			Reopen: func(t *testing.T, tbl tabletest.Table[dynamocas.Key]) tabletest.Table[dynamocas.Key] {
				return open(t, tableName(tbl))
			},
			// ModifyMany escalates to the items' holds (where there are
			// transactions: minidyn, DynamoDB).
			EscalatesMany: srv.Transactions,
		})
	})
}

// tableName is the name of a harness's table.
func tableName(tbl tabletest.Table[dynamocas.Key]) string {
	if w, ok := tbl.(withoutMany); ok {
		return w.name
	}
	return tbl.(*dynamocas.Table[tabletest.Row]).Name()
}
