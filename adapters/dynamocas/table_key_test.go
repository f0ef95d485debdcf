package dynamocas_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/occkit/occkit/adapters/dynamocas"
	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/internal/dynamotest"
)

// pair is an item of a table whose partition and sort keys are strings.
type pair struct {
	PK      string      `dynamodbav:"pk"`
	SK      string      `dynamodbav:"sk"`
	N       int         `dynamodbav:"n"`
	Version cas.Version `dynamodbav:"version"`
}

// newPairs creates a table of pairs and returns it open with cli.
func newPairs(t testing.TB, cli *dynamodb.Client) *dynamocas.Table[pair] {
	t.Helper()
	name := createTable(t, cli, "pk", types.ScalarAttributeTypeS, "sk", types.ScalarAttributeTypeS)
	tbl, err := dynamocas.NewTable[pair](cli, dynamocas.TableConfig{Table: name, PartitionKey: "pk", SortKey: "sk"})
	if err != nil {
		t.Fatal(err)
	}
	return tbl
}

// sent is the number of item requests c counted.
func sent(c *dynamotest.Counter) int {
	n := 0
	for _, op := range []string{"GetItem", "PutItem", "UpdateItem", "DeleteItem", "TransactWriteItems"} {
		n += c.Get(op)
	}
	return n
}

// wantInvalidKey fails t unless err is a cas.ErrInvalidKey whose text
// says why.
func wantInvalidKey(t *testing.T, what string, err error, why string) {
	t.Helper()
	if !errors.Is(err, cas.ErrInvalidKey) || !strings.Contains(err.Error(), why) {
		t.Errorf("%s: %v, want cas.ErrInvalidKey (%s)", what, err, why)
	}
}

// keyCalls runs every Table call that takes a Key on key and passes each
// error to check.
func keyCalls[T any](ctx context.Context, tbl *dynamocas.Table[T], key dynamocas.Key, column string, v cas.Version, check func(what string, err error)) {
	keep := func(cur T, _ bool) (T, error) { return cur, nil }
	_, err := tbl.Get(ctx, key)
	check("Get", err)
	_, err = tbl.Modify(ctx, key, keep)
	check("Modify", err)
	_, err = tbl.ModifyMany(ctx, []dynamocas.Key{key}, func(cur []T, _ []bool) ([]T, error) { return cur, nil })
	check("ModifyMany", err)
	_, err = tbl.ExclusiveModify(ctx, key, func(cur T, _ bool) (T, bool, error) { return cur, false, nil })
	check("exclusive Modify", err)
	_, err = tbl.Add(ctx, key, column, 1, cas.Bounds{})
	check("Add", err)
	check("Delete", tbl.Delete(ctx, key, v))
}

// TestTableKeySortWithoutSortKey: a Key with a Sort value on a table
// without a sort key is refused with cas.ErrInvalidKey before anything
// is sent, by every call. (The Sort value was dropped: Delete of
// {book, zzz} deleted the item book.) On a table with a sort key, a Key
// without one is refused likewise.
func TestTableKeySortWithoutSortKey(t *testing.T) {
	dynamotest.Each(t, func(t *testing.T, srv dynamotest.Server) {
		cli, count := dynamotest.CountingClient(t, srv)
		items, _ := newStocks(t, cli)
		ctx := dynamotest.Ctx(t, 30*time.Second)
		v := stockBook(t, ctx, items)
		count.Reset()
		keyCalls(ctx, items, dynamocas.Key{Partition: "book", Sort: "zzz"}, "remaining", v, func(what string, err error) {
			wantInvalidKey(t, what+" of a Key with a Sort value", err, "the table has no sort key")
		})
		if n := sent(count); n != 0 {
			t.Errorf("the refused calls sent %d requests, want none", n)
		}
		if got, err := items.Get(ctx, dynamocas.Key{Partition: "book"}); err != nil || got.Version != v || got.Remaining != 5 {
			t.Fatalf("book after the refused calls: %+v (%v), want it unchanged at version %d", got, err, v)
		}
		pairs := newPairs(t, cli)
		count.Reset()
		keyCalls(ctx, pairs, dynamocas.Key{Partition: "a"}, "n", 1, func(what string, err error) {
			wantInvalidKey(t, what+" of a Key without a Sort value", err, "sort key")
		})
		if n := sent(count); n != 0 {
			t.Errorf("the refused calls sent %d requests, want none", n)
		}
	})
}

// TestTableKeyNotUTF8: a string key that is not valid UTF-8 is refused
// with cas.ErrInvalidKey before anything is sent. (The SDK replaced its
// invalid bytes with U+FFFD, so "a\xff" and "a\xfe" named one item,
// stored under neither, and Insert returned a key that was not the one
// stored.)
func TestTableKeyNotUTF8(t *testing.T) {
	dynamotest.Each(t, func(t *testing.T, srv dynamotest.Server) {
		cli, count := dynamotest.CountingClient(t, srv)
		items, _ := newStocks(t, cli)
		pairs := newPairs(t, cli)
		ctx := dynamotest.Ctx(t, 30*time.Second)
		for _, sku := range []string{"a\xff", "a\xfe"} {
			_, err := items.Insert(ctx, stock{SKU: sku, Remaining: 1})
			wantInvalidKey(t, fmt.Sprintf("Insert of partition key %q", sku), err, "UTF-8")
			keyCalls(ctx, items, dynamocas.Key{Partition: sku}, "remaining", 1, func(what string, err error) {
				wantInvalidKey(t, fmt.Sprintf("%s of partition key %q", what, sku), err, "UTF-8")
			})
		}
		_, err := pairs.Insert(ctx, pair{PK: "a", SK: "b\xff"})
		wantInvalidKey(t, "Insert of sort key b\\xff", err, "UTF-8")
		keyCalls(ctx, pairs, dynamocas.Key{Partition: "a", Sort: "b\xff"}, "n", 1, func(what string, err error) {
			wantInvalidKey(t, what+" of sort key b\\xff", err, "UTF-8")
		})
		if n := sent(count); n != 0 {
			t.Errorf("the refused calls sent %d requests, want none", n)
		}
		if _, err := items.Get(ctx, dynamocas.Key{Partition: "a\uFFFD"}); !errors.Is(err, cas.ErrNotFound) {
			t.Fatalf("Get of a\\uFFFD after the refused calls: %v, want cas.ErrNotFound", err)
		}
		// Valid UTF-8 beyond ASCII is a key like any other.
		if _, err := items.Insert(ctx, stock{SKU: "añ€", Remaining: 2}); err != nil {
			t.Fatal(err)
		}
		if got, err := items.Get(ctx, dynamocas.Key{Partition: "añ€"}); err != nil || got.SKU != "añ€" || got.Remaining != 2 {
			t.Fatalf("Get of añ€: %+v, %v", got, err)
		}
	})
}

// TestTableKeyTooLong: keys up to DynamoDB's limits (2048 bytes for a
// partition key, 1024 for a sort key) work; a longer one is refused with
// cas.ErrInvalidKey naming the limit before anything is sent. (The
// server's refusal came back as a read error or as cas.ErrTooLarge.)
func TestTableKeyTooLong(t *testing.T) {
	dynamotest.Each(t, func(t *testing.T, srv dynamotest.Server) {
		cli, count := dynamotest.CountingClient(t, srv)
		items, _ := newStocks(t, cli)
		pairs := newPairs(t, cli)
		ctx := dynamotest.Ctx(t, 30*time.Second)
		longest := strings.Repeat("k", dynamocas.MaxPartitionKeyBytes)
		if _, err := items.Insert(ctx, stock{SKU: longest, Remaining: 1}); err != nil {
			t.Fatalf("Insert of a %d-byte partition key: %v", len(longest), err)
		}
		if got, err := items.Get(ctx, dynamocas.Key{Partition: longest}); err != nil || got.SKU != longest {
			t.Fatalf("Get of a %d-byte partition key: %v", len(longest), err)
		}
		longestSort := strings.Repeat("s", dynamocas.MaxSortKeyBytes)
		if _, err := pairs.Insert(ctx, pair{PK: "a", SK: longestSort}); err != nil {
			t.Fatalf("Insert of a %d-byte sort key: %v", len(longestSort), err)
		}
		if got, err := pairs.Get(ctx, dynamocas.Key{Partition: "a", Sort: longestSort}); err != nil || got.SK != longestSort {
			t.Fatalf("Get of a %d-byte sort key: %v", len(longestSort), err)
		}

		count.Reset()
		long := longest + "k"
		_, err := items.Insert(ctx, stock{SKU: long})
		wantInvalidKey(t, "Insert of a 2049-byte partition key", err, "2048 bytes")
		keyCalls(ctx, items, dynamocas.Key{Partition: long}, "remaining", 1, func(what string, err error) {
			wantInvalidKey(t, what+" of a 2049-byte partition key", err, "2048 bytes")
		})
		_, err = items.Get(ctx, dynamocas.Key{Partition: []byte(long)})
		wantInvalidKey(t, "Get of a 2049-byte binary partition key", err, "2048 bytes")
		_, err = pairs.Insert(ctx, pair{PK: "a", SK: longestSort + "s"})
		wantInvalidKey(t, "Insert of a 1025-byte sort key", err, "1024 bytes")
		keyCalls(ctx, pairs, dynamocas.Key{Partition: "a", Sort: longestSort + "s"}, "n", 1, func(what string, err error) {
			wantInvalidKey(t, what+" of a 1025-byte sort key", err, "1024 bytes")
		})
		if n := sent(count); n != 0 {
			t.Errorf("the refused calls sent %d requests, want none", n)
		}
	})
}
