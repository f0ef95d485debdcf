package dynamocas

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// CreateTable creates the store's table (partition key KeyAttribute, a
// string; on-demand billing) and waits until it is active. A table that
// already exists with that partition key is fine; one with another key
// schema is an error.
func (s *Store) CreateTable(ctx context.Context) error {
	_, err := s.cli.CreateTable(ctx, &dynamodb.CreateTableInput{
		TableName:            aws.String(s.table),
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String(s.names.key), AttributeType: types.ScalarAttributeTypeS}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String(s.names.key), KeyType: types.KeyTypeHash}},
		BillingMode:          types.BillingModePayPerRequest,
	})
	var inUse *types.ResourceInUseException
	if err != nil && !errors.As(err, &inUse) {
		return fmt.Errorf("dynamocas: create table %q: %w", s.table, err)
	}
	return waitActive(ctx, s.cli, s.table, []string{s.names.key})
}

// waitActive waits until table is active and checks that its key schema
// is keys (partition key first).
func waitActive(ctx context.Context, cli *dynamodb.Client, table string, keys []string) error {
	wait := 20 * time.Millisecond
	for {
		out, err := cli.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(table)})
		var notFound *types.ResourceNotFoundException
		switch {
		case errors.As(err, &notFound):
			// just created: not visible yet
		case err != nil:
			return fmt.Errorf("dynamocas: describe table %q: %w", table, err)
		default:
			// A server that does not model table states (minidyn)
			// reports none: its tables are usable at once.
			if st := out.Table.TableStatus; st == types.TableStatusActive || st == "" {
				return checkSchema(table, out.Table.KeySchema, keys)
			}
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("dynamocas: waiting for table %q to become active: %w", table, ctx.Err())
		case <-t.C:
		}
		wait = min(2*wait, 2*time.Second)
	}
}

func checkSchema(table string, schema []types.KeySchemaElement, keys []string) error {
	var got []string
	for _, want := range []types.KeyType{types.KeyTypeHash, types.KeyTypeRange} {
		for _, k := range schema {
			if k.KeyType == want {
				got = append(got, aws.ToString(k.AttributeName))
			}
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(keys) {
		return fmt.Errorf("dynamocas: table %q has key schema %q, want %q", table, got, keys)
	}
	return nil
}
