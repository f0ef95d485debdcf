package dynamocas_test

import (
	"errors"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"

	"github.com/occkit/occkit/adapters/dynamocas"
	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/internal/dynamotest"
)

// bigStock is a stock item with a large attribute beside its count.
type bigStock struct {
	SKU     string      `dynamodbav:"sku"`
	Data    string      `dynamodbav:"data"`
	N       int64       `dynamodbav:"n"`
	Version cas.Version `dynamodbav:"version"`
}

// TestTableAddOverItemLimit: a delta whose longer number would take the
// item over DynamoDB's 400 KB fails at once with cas.ErrTooLarge after
// one UpdateItem, and writes nothing. (The item passes the bounds when
// read back, so treating the refusal as "read the item and try again"
// sent the delta forever, without a wait.) On dynalite, which enforces
// the limit as DynamoDB does; minidyn does not.
func TestTableAddOverItemLimit(t *testing.T) {
	srv := dynamotest.Dynalite(t)
	cli, count := dynamotest.CountingClient(t, srv)
	name := createTable(t, cli, "sku", types.ScalarAttributeTypeS, "", "")
	ctx := dynamotest.Ctx(t, 30*time.Second)
	// The largest item the server takes, its count 0.
	put := func(n int) error {
		_, err := cli.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(name), Item: map[string]types.AttributeValue{
			"sku": &types.AttributeValueMemberS{Value: "big"}, "data": &types.AttributeValueMemberS{Value: strings.Repeat("x", n)},
			"n": &types.AttributeValueMemberN{Value: "0"}, "version": &types.AttributeValueMemberN{Value: "1"},
		}})
		return err
	}
	lo, hi := dynamocas.MaxItemBytes-1024, dynamocas.MaxItemBytes
	for lo < hi {
		if mid := (lo + hi + 1) / 2; put(mid) == nil {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	if err := put(lo); err != nil {
		t.Fatal(err)
	}
	tbl, err := dynamocas.NewTable[bigStock](cli, dynamocas.TableConfig{Table: name, PartitionKey: "sku"})
	if err != nil {
		t.Fatal(err)
	}
	count.Reset()
	actx := dynamotest.Ctx(t, 5*time.Second)
	start := time.Now()
	_, err = tbl.Add(actx, dynamocas.Key{Partition: "big"}, "n", 123456789012345678, cas.Bounds{})
	if !errors.Is(err, cas.ErrTooLarge) {
		t.Fatalf("Add that takes the item over the limit: %v after %v (%d UpdateItem, %d GetItem), want cas.ErrTooLarge at once",
			err, time.Since(start), count.Get("UpdateItem"), count.Get("GetItem"))
	}
	if u, g := count.Get("UpdateItem"), count.Get("GetItem"); u != 1 || g != 0 {
		t.Fatalf("Add that takes the item over the limit sent %d UpdateItem and %d GetItem, want 1 and 0", u, g)
	}
	got, err := tbl.Get(ctx, dynamocas.Key{Partition: "big"})
	if err != nil || got.N != 0 || got.Version != 1 || len(got.Data) != lo {
		t.Fatalf("after the refused Add: n %d, version %d, %d bytes of data (%v); want it unchanged", got.N, got.Version, len(got.Data), err)
	}
}

// TestTableAddPersistentValidation: a ValidationException that persists
// (here every UpdateItem's answer), with the item read back still within
// the bounds, ends Add after a bounded number of sends with that error,
// instead of sending the delta again forever.
func TestTableAddPersistentValidation(t *testing.T) {
	dynamotest.Each(t, func(t *testing.T, srv dynamotest.Server) {
		items, name := newStocks(t, dynamotest.Client(t, srv))
		ctx := dynamotest.Ctx(t, 30*time.Second)
		v := stockBook(t, ctx, items)
		var sends atomic.Int64
		refused := openStocks(t, dynamotest.ClientWith(t, srv, func(next http.RoundTripper) http.RoundTripper {
			return dynamotest.RoundTripFunc(func(r *http.Request) (*http.Response, error) {
				if dynamotest.Operation(r) != "UpdateItem" {
					return next.RoundTrip(r)
				}
				sends.Add(1)
				_, _ = io.Copy(io.Discard, r.Body)
				r.Body.Close()
				return validationAnswer(r, "One or more parameter values were invalid: refused by the test"), nil
			})
		}), name, dynamocas.TableConfig{})
		_, err := refused.Add(dynamotest.Ctx(t, 5*time.Second), dynamocas.Key{Partition: "book"}, "remaining", -1, cas.AtLeast(0))
		var api smithy.APIError
		if !errors.As(err, &api) || api.ErrorCode() != "ValidationException" || errors.Is(err, cas.ErrTooLarge) {
			t.Fatalf("Add refused by a lasting ValidationException: %v after %d sends, want that ValidationException", err, sends.Load())
		}
		if n := sends.Load(); n != dynamocas.MaxUnexplainedRefusals {
			t.Fatalf("Add refused by a lasting ValidationException sent the delta %d times, want %d", n, dynamocas.MaxUnexplainedRefusals)
		}
		got, err := items.Get(ctx, dynamocas.Key{Partition: "book"})
		if err != nil || got.Remaining != 5 || got.Version != v {
			t.Fatalf("after the refused Add: %+v (%v), want it unchanged", got, err)
		}
	})
}

// validationAnswer is the answer of a DynamoDB-compatible server that
// refuses r with a ValidationException saying msg.
func validationAnswer(r *http.Request, msg string) *http.Response {
	body := `{"__type":"com.amazon.coral.validate#ValidationException","message":"` + msg + `"}`
	return &http.Response{
		StatusCode:    http.StatusBadRequest,
		Status:        "400 Bad Request",
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        http.Header{"Content-Type": {"application/x-amz-json-1.0"}},
		Body:          io.NopCloser(strings.NewReader(body)),
		ContentLength: int64(len(body)),
		Request:       r,
	}
}
