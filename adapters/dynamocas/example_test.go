package dynamocas_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/occkit/occkit/adapters/dynamocas"
	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/occ"
	miniserver "github.com/truora/minidyn/server"
)

// An optimistic counter on DynamoDB. In an application the client comes
// from the usual AWS configuration (environment, shared config, instance
// role):
//
//	cfg, err := config.LoadDefaultConfig(ctx)
//	cli := dynamodb.NewFromConfig(cfg) // with o.BaseEndpoint for a local server
//
// This example runs against minidyn's DynamoDB-compatible HTTP server, in
// process, as the tests do.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cli, stop := localClient()
	defer stop()
	store, err := dynamocas.New(cli, dynamocas.Config{Table: "myapp-cas"})
	if err != nil {
		log.Fatal(err)
	}
	if err := store.CreateTable(ctx); err != nil { // once; a no-op when it exists
		log.Fatal(err)
	}
	counters := cas.NewTyped(store, cas.JSON[int]())
	n, version, err := occ.Update(ctx, counters, "visits", func(n int, _ bool) (int, error) {
		return n + 1, nil
	}, occ.WithRetryable(dynamocas.Retryable))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(n, version)
	// Output: 1 1
}

// A conflict carries the current item, so a retry needs no extra read.
// This example runs against minidyn's DynamoDB-compatible HTTP server, in
// process.
func ExampleStore_CompareAndSwap() {
	ctx := context.Background()
	cli, stop := localClient()
	defer stop()
	store, err := dynamocas.New(cli, dynamocas.Config{Table: "example"})
	if err != nil {
		log.Fatal(err)
	}
	if err := store.CreateTable(ctx); err != nil {
		log.Fatal(err)
	}
	v1, _ := store.CompareAndSwap(ctx, "greeting", 0, []byte("hello")) // 0: create
	_, _ = store.CompareAndSwap(ctx, "greeting", v1, []byte("hi"))     // someone else updates
	_, err = store.CompareAndSwap(ctx, "greeting", v1, []byte("hey"))  // stale version
	var conflict *cas.ConflictError
	if errors.As(err, &conflict) && conflict.HasCurrent {
		fmt.Printf("conflict: current value %q at version %d\n", conflict.Current.Value, conflict.Current.Version)
	}
	// Output: conflict: current value "hi" at version 2
}

// localClient starts minidyn's server on a loopback port and returns a
// client for it and the function that stops both.
func localClient() (*dynamodb.Client, func()) {
	srv := httptest.NewServer(miniserver.NewServer())
	tr := &http.Transport{}
	cli := dynamodb.New(dynamodb.Options{
		Region:       "us-east-1",
		BaseEndpoint: aws.String(srv.URL),
		Credentials:  credentials.NewStaticCredentialsProvider("local", "local", ""),
		HTTPClient:   &http.Client{Transport: tr},
	})
	return cli, func() {
		tr.CloseIdleConnections()
		srv.Close()
	}
}

// exampleTable creates an application's table with a string partition
// key, as a migration would.
func exampleTable(ctx context.Context, cli *dynamodb.Client, name, key string) {
	_, err := cli.CreateTable(ctx, &dynamodb.CreateTableInput{
		TableName:            aws.String(name),
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String(key), AttributeType: types.ScalarAttributeTypeS}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String(key), KeyType: types.KeyTypeHash}},
		BillingMode:          types.BillingModePayPerRequest,
	})
	if err != nil {
		log.Fatal(err)
	}
}

// A versioned repository over an application's own table, replacing
// "lock the item, read, write, unlock": Modify reads the item, applies the
// change and writes it only if its version is unchanged, retrying on a
// conflict. It runs against minidyn in process (in an application:
// dynamodb.NewFromConfig(cfg)).
func ExampleNewTable() {
	type Product struct {
		SKU     string      `dynamodbav:"sku"`
		Stock   int         `dynamodbav:"stock"`
		Version cas.Version `dynamodbav:"version"`
	}
	ctx := context.Background()
	cli, stop := localClient()
	defer stop()
	exampleTable(ctx, cli, "products", "sku")
	products, err := dynamocas.NewTable[Product](cli, dynamocas.TableConfig{
		Table:        "products",
		PartitionKey: "sku",
	})
	if err != nil {
		log.Fatal(err)
	}
	if _, err := products.Insert(ctx, Product{SKU: "sku-42", Stock: 2}); err != nil {
		log.Fatal(err)
	}
	errSoldOut := errors.New("sold out")
	for range 3 {
		p, err := products.Modify(ctx, dynamocas.Key{Partition: "sku-42"}, func(p Product, exists bool) (Product, error) {
			if !exists || p.Stock == 0 {
				return p, errSoldOut // returned as is, nothing written
			}
			p.Stock--
			return p, nil
		}, occ.WithRetryable(dynamocas.Retryable))
		fmt.Println(p.Stock, err)
	}
	// Output:
	// 1 <nil>
	// 0 <nil>
	// 0 sold out
}

// Versioned writes to two tables in one transaction: the order is created
// and the stock taken only if the product is still at the version read.
// It runs against minidyn in process.
func ExampleNewTx() {
	type Product struct {
		SKU     string      `dynamodbav:"sku"`
		Stock   int         `dynamodbav:"stock"`
		Version cas.Version `dynamodbav:"version"`
	}
	type Order struct {
		ID      string      `dynamodbav:"id"`
		SKU     string      `dynamodbav:"sku"`
		Version cas.Version `dynamodbav:"version"`
	}
	ctx := context.Background()
	cli, stop := localClient()
	defer stop()
	exampleTable(ctx, cli, "products", "sku")
	exampleTable(ctx, cli, "orders", "id")
	products, _ := dynamocas.NewTable[Product](cli, dynamocas.TableConfig{Table: "products", PartitionKey: "sku"})
	orders, _ := dynamocas.NewTable[Order](cli, dynamocas.TableConfig{Table: "orders", PartitionKey: "id"})
	if _, err := products.Insert(ctx, Product{SKU: "sku-42", Stock: 5}); err != nil {
		log.Fatal(err)
	}

	p, err := products.Get(ctx, dynamocas.Key{Partition: "sku-42"})
	if err != nil {
		log.Fatal(err)
	}
	p.Stock--
	tx := dynamocas.NewTx(cli)
	if err := products.TxUpdate(tx, p); err != nil { // at the version p was read at
		log.Fatal(err)
	}
	if err := orders.TxInsert(tx, Order{ID: "o-1001", SKU: p.SKU}); err != nil {
		log.Fatal(err)
	}
	_, err = tx.Commit(ctx)
	var amb *cas.AmbiguousError
	if errors.As(err, &amb) {
		// The answer was lost: committing the same Tx again reuses its
		// ClientRequestToken, which DynamoDB applies at most once.
		_, err = tx.Commit(ctx)
	}
	if err != nil {
		log.Fatal(err) // a *cas.ConflictError names the item that changed
	}
	p, _ = products.Get(ctx, dynamocas.Key{Partition: "sku-42"})
	o, err := orders.Get(ctx, dynamocas.Key{Partition: "o-1001"})
	fmt.Println(p.Stock, o.SKU, err)
	// Output: 4 sku-42 <nil>
}

// Retryable classifies throttling and transaction contention for occ.
func ExampleRetryable() {
	throttled := &types.ProvisionedThroughputExceededException{Message: aws.String("slow down")}
	conflict := &cas.ConflictError{Key: "k"}
	fmt.Println(dynamocas.Retryable(throttled), dynamocas.Retryable(conflict))
	// Output: true false
}
