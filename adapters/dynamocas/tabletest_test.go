package dynamocas_test

import (
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/occkit/occkit/adapters/dynamocas"
	"github.com/occkit/occkit/cas/tabletest"
	"github.com/occkit/occkit/internal/dynamotest"
)

// TestTableConformance runs the repository-table suite on dynamocas.Table
// on every DynamoDB-compatible server the tests run.
func TestTableConformance(t *testing.T) {
	dynamotest.Each(t, func(t *testing.T, srv dynamotest.Server) {
		cli := dynamotest.Client(t, srv)
		tabletest.Run(t, tabletest.Harness[dynamocas.Key]{
			New: func(t *testing.T) tabletest.Table[dynamocas.Key] {
				name := createTable(t, cli, "id", types.ScalarAttributeTypeS, "", "")
				tbl, err := dynamocas.NewTable[tabletest.Row](cli, dynamocas.TableConfig{Table: name, PartitionKey: "id"})
				if err != nil {
					t.Fatal(err)
				}
				return tbl
			},
			Key: func(id string) dynamocas.Key { return dynamocas.Key{Partition: id} },
			// Another process's table of the same items: a hot row across
			// processes escalates to the items' exclusive hold.
			Reopen: func(t *testing.T, tbl tabletest.Table[dynamocas.Key]) tabletest.Table[dynamocas.Key] {
				o, err := dynamocas.NewTable[tabletest.Row](cli, dynamocas.TableConfig{Table: tbl.(*dynamocas.Table[tabletest.Row]).Name(), PartitionKey: "id"})
				if err != nil {
					t.Fatal(err)
				}
				return o
			},
		})
	})
}
