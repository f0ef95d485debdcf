package dynamocas_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/occkit/occkit/adapters/dynamocas"
	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/cas/castest"
	"github.com/occkit/occkit/internal/dynamotest"
	"github.com/occkit/occkit/occ"
)

// order is an item with nested fields: a map, a slice of structs, a
// pointer to a struct, a byte slice, a time and a set.
type order struct {
	Customer string            `dynamodbav:"customer"`
	ID       int64             `dynamodbav:"id"`
	Version  cas.Version       `dynamodbav:"version"`
	Lines    []line            `dynamodbav:"lines"`
	Shipping *address          `dynamodbav:"shipping,omitempty"`
	Tags     map[string]string `dynamodbav:"tags"`
	Labels   []string          `dynamodbav:"labels,stringset,omitempty"`
	Note     []byte            `dynamodbav:"note"`
	Placed   time.Time         `dynamodbav:"placed"`
}

type line struct {
	SKU      string `dynamodbav:"sku"`
	Quantity int    `dynamodbav:"qty"`
	Price    struct {
		Cents    int64  `dynamodbav:"cents"`
		Currency string `dynamodbav:"currency"`
	} `dynamodbav:"price"`
}

type address struct {
	Street string   `dynamodbav:"street"`
	Lines  []string `dynamodbav:"lines"`
	Geo    struct {
		Lat, Lon float64
	} `dynamodbav:"geo"`
}

// createTable makes a table with a partition key (and optionally a sort
// key) of the given types, deleted when the test ends.
func createTable(t testing.TB, cli *dynamodb.Client, pk string, pkType types.ScalarAttributeType, sk string, skType types.ScalarAttributeType) string {
	t.Helper()
	name := dynamotest.TableName("app")
	in := &dynamodb.CreateTableInput{
		TableName:            aws.String(name),
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String(pk), AttributeType: pkType}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String(pk), KeyType: types.KeyTypeHash}},
		BillingMode:          types.BillingModePayPerRequest,
	}
	if sk != "" {
		in.AttributeDefinitions = append(in.AttributeDefinitions, types.AttributeDefinition{AttributeName: aws.String(sk), AttributeType: skType})
		in.KeySchema = append(in.KeySchema, types.KeySchemaElement{AttributeName: aws.String(sk), KeyType: types.KeyTypeRange})
	}
	ctx := dynamotest.Ctx(t, 30*time.Second)
	if _, err := cli.CreateTable(ctx, in); err != nil {
		t.Fatal(err)
	}
	dynamotest.DeleteTable(t, cli, name)
	// Wait until it is usable (dynalite: --createTableMs 0).
	for {
		out, err := cli.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(name)})
		if err == nil && (out.Table.TableStatus == types.TableStatusActive || out.Table.TableStatus == "") {
			return name
		}
		if ctx.Err() != nil {
			t.Fatalf("table %s not active: %v", name, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func newOrders(t testing.TB, cli *dynamodb.Client) *dynamocas.Table[order] {
	t.Helper()
	name := createTable(t, cli, "customer", types.ScalarAttributeTypeS, "id", types.ScalarAttributeTypeN)
	tbl, err := dynamocas.NewTable[order](cli, dynamocas.TableConfig{Table: name, PartitionKey: "customer", SortKey: "id"})
	if err != nil {
		t.Fatal(err)
	}
	return tbl
}

// newStocks creates a table of stock items (partition key sku) and
// returns it open with cli, and its name for openStocks.
func newStocks(t testing.TB, cli *dynamodb.Client) (*dynamocas.Table[stock], string) {
	t.Helper()
	name := createTable(t, cli, "sku", types.ScalarAttributeTypeS, "", "")
	return openStocks(t, cli, name, dynamocas.TableConfig{}), name
}

// stockBook inserts the item "book", 5 remaining, into items and returns
// its version.
func stockBook(t testing.TB, ctx context.Context, items *dynamocas.Table[stock]) cas.Version {
	t.Helper()
	b, err := items.Insert(ctx, stock{SKU: "book", Remaining: 5})
	if err != nil {
		t.Fatal(err)
	}
	return b.Version
}

// openStocks opens the stock table name with cli and cfg (its Table and
// PartitionKey set here).
func openStocks(t testing.TB, cli *dynamodb.Client, name string, cfg dynamocas.TableConfig) *dynamocas.Table[stock] {
	t.Helper()
	cfg.Table, cfg.PartitionKey = name, "sku"
	tbl, err := dynamocas.NewTable[stock](cli, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return tbl
}

func sampleOrder() order {
	o := order{
		Customer: "ada",
		ID:       42,
		Lines:    []line{{SKU: "book", Quantity: 2}, {SKU: "pen", Quantity: 10}},
		Shipping: &address{Street: "1 Main St", Lines: []string{"flat 2", "floor 3"}},
		Tags:     map[string]string{"gift": "yes", "channel": "web"},
		Labels:   []string{"priority", "fragile"},
		Note:     []byte{0, 1, 2, 255},
		Placed:   time.Date(2025, 3, 4, 5, 6, 7, 8, time.UTC),
	}
	o.Lines[0].Price.Cents, o.Lines[0].Price.Currency = 1250, "EUR"
	o.Shipping.Geo.Lat, o.Shipping.Geo.Lon = 51.5, -0.12
	return o
}

func TestTableRoundTrip(t *testing.T) {
	dynamotest.Each(t, func(t *testing.T, srv dynamotest.Server) {
		orders := newOrders(t, dynamotest.Client(t, srv))
		ctx := dynamotest.Ctx(t, time.Minute)
		key := dynamocas.Key{Partition: "ada", Sort: 42}
		if _, err := orders.Get(ctx, key); !errors.Is(err, cas.ErrNotFound) {
			t.Fatalf("get before create: %v", err)
		}
		want := sampleOrder()
		want.Version = 99 // ignored by Insert
		created, err := orders.Insert(ctx, want)
		if err != nil || created.Version != 1 {
			t.Fatalf("create = %+v, %v", created, err)
		}
		v1 := created.Version
		got, err := orders.Get(ctx, key)
		if err != nil || got.Version != v1 {
			t.Fatalf("get = v%d, %v", got.Version, err)
		}
		want.Version = v1 // the version field is filled in by reads
		normalize(&got)
		normalize(&want)
		normalize(&created)
		if !reflect.DeepEqual(got, want) || !reflect.DeepEqual(created, want) {
			t.Fatalf("round trip:\n got %+v\nwant %+v\ncreated %+v", got, want, created)
		}
		// Replace at the right version; a stale version conflicts and
		// returns the current item.
		got.Lines = append(got.Lines, line{SKU: "ink", Quantity: 1})
		up, err := orders.Update(ctx, got)
		if err != nil || up.Version != v1+1 || len(up.Lines) != 3 {
			t.Fatalf("replace = %+v, %v", up, err)
		}
		v2 := up.Version
		stale := got // still at v1
		stale.Lines = nil
		cur, err := orders.Update(ctx, stale)
		var ce *cas.ConflictError
		if !errors.As(err, &ce) || ce.Key != "ada/42" || ce.Expected != v1 || !ce.HasCurrent || ce.Current.Version != v2 {
			t.Fatalf("stale replace: %v, want a conflict on ada/42 at current v%d", err, v2)
		}
		normalize(&cur)
		normalize(&up)
		if !reflect.DeepEqual(cur, up) {
			t.Fatalf("the conflict returned %+v, want the current item %+v", cur, up)
		}
		if cur, err := orders.Insert(ctx, got); !errors.As(err, &ce) || ce.Expected != 0 || !ce.HasCurrent || cur.Version != v2 {
			t.Fatalf("create of an existing item: %+v, %v", cur, err)
		}
		if _, err := orders.Update(ctx, sampleOrder()); !errors.Is(err, cas.ErrInvalidVersion) {
			t.Fatalf("update of an item with version 0: %v, want ErrInvalidVersion", err)
		}
		// Delete: stale fails, right version deletes.
		if err := orders.Delete(ctx, key, v1); !errors.Is(err, cas.ErrConflict) {
			t.Fatalf("stale delete: %v", err)
		}
		if err := orders.Delete(ctx, key, 0); !errors.Is(err, cas.ErrInvalidVersion) {
			t.Fatalf("delete at version 0: %v", err)
		}
		if err := orders.Delete(ctx, key, v2); err != nil {
			t.Fatal(err)
		}
		if _, err := orders.Get(ctx, key); !errors.Is(err, cas.ErrNotFound) {
			t.Fatalf("get after delete: %v", err)
		}
		err = orders.Delete(ctx, key, v2)
		if !errors.As(err, &ce) || !ce.HasCurrent || ce.Current.Version != 0 || !errors.Is(err, cas.ErrNotFound) {
			t.Fatalf("delete of a deleted item: %v, want a conflict with the item absent", err)
		}
	})
}

// normalize makes times comparable after a round trip.
func normalize(o *order) { o.Placed = o.Placed.UTC() }

func TestTableValidation(t *testing.T) {
	cli, closeIdle := dynamotest.NewClient("http://127.0.0.1:1")
	defer closeIdle()
	tests := []struct {
		name string
		cfg  dynamocas.TableConfig
		want string
	}{
		{"NoTable", dynamocas.TableConfig{PartitionKey: "id"}, "required"},
		{"NoPartitionKey", dynamocas.TableConfig{Table: "t"}, "required"},
		{"VersionIsKey", dynamocas.TableConfig{Table: "t", PartitionKey: "version"}, "must differ"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := dynamocas.NewTable[order](cli, tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("NewTable(%+v) = %v, want %q", tc.cfg, err, tc.want)
			}
		})
	}
	if _, err := dynamocas.NewTable[int](cli, dynamocas.TableConfig{Table: "t", PartitionKey: "id"}); err == nil {
		t.Fatal("NewTable[int] succeeded")
	}
	type noVersion struct {
		ID string `dynamodbav:"id"`
	}
	if _, err := dynamocas.NewTable[noVersion](cli, dynamocas.TableConfig{Table: "t", PartitionKey: "id"}); err == nil || !strings.Contains(err.Error(), "version attribute") {
		t.Fatalf("NewTable of a type without a version field: %v", err)
	}
	// Too large: refused before anything is sent (the endpoint is dead).
	tbl, err := dynamocas.NewTable[order](cli, dynamocas.TableConfig{Table: "t", PartitionKey: "customer", SortKey: "id"})
	if err != nil {
		t.Fatal(err)
	}
	big := sampleOrder()
	big.Note = make([]byte, dynamocas.MaxItemBytes)
	if _, err := tbl.Insert(context.Background(), big); !errors.Is(err, cas.ErrTooLarge) {
		t.Fatalf("put of a %d-byte note: %v, want ErrTooLarge", len(big.Note), err)
	}
	noKey := sampleOrder()
	noKey.Customer = ""
	if _, err := tbl.Insert(context.Background(), noKey); err == nil {
		t.Fatal("put without a partition key value succeeded")
	}
}

func TestTableModify(t *testing.T) {
	dynamotest.Each(t, func(t *testing.T, srv dynamotest.Server) {
		orders := newOrders(t, dynamotest.Client(t, srv))
		ctx := dynamotest.Ctx(t, time.Minute)
		key := dynamocas.Key{Partition: "ada", Sort: 42}
		add := func(o order, exists bool) (order, error) {
			if !exists {
				o = sampleOrder()
				o.Lines = nil
			}
			o.Lines = append(o.Lines, line{SKU: fmt.Sprint("sku", len(o.Lines)), Quantity: 1})
			return o, nil
		}
		o, err := orders.Modify(ctx, key, add)
		if err != nil || o.Version != 1 || len(o.Lines) != 1 {
			t.Fatalf("modify creating = %+v, %v", o, err)
		}
		o, err = orders.Modify(ctx, key, add)
		if err != nil || o.Version != 2 || len(o.Lines) != 2 {
			t.Fatalf("modify = %d lines v%d, %v", len(o.Lines), o.Version, err)
		}
		errNo := errors.New("no")
		if _, err := orders.Modify(ctx, key, func(order, bool) (order, error) { return order{}, errNo }); err != errNo {
			t.Fatalf("mutate's error: %v, want it as is", err)
		}
		_, err = orders.Modify(ctx, key, func(o order, _ bool) (order, error) { o.ID = 7; return o, nil })
		if !errors.Is(err, cas.ErrInvalidKey) {
			t.Fatalf("mutate changing the key: %v, want ErrInvalidKey", err)
		}
		if got, _ := orders.Get(ctx, key); got.Version != 2 {
			t.Fatalf("version after refused updates = %d, want 2", got.Version)
		}
		// An absent item: cur has its key fields set.
		other := dynamocas.Key{Partition: "bob", Sort: 7}
		o, err = orders.Modify(ctx, other, func(o order, exists bool) (order, error) {
			if exists || o.Customer != "bob" || o.ID != 7 {
				t.Errorf("cur = %+v, exists %v; want the zero order with its key", o, exists)
			}
			return o, nil
		})
		if err != nil || o.Version != 1 {
			t.Fatalf("modify creating bob/7 = %+v, %v", o, err)
		}
	})
}

// stock is an inventory item.
type stock struct {
	SKU       string      `dynamodbav:"sku"`
	Remaining int         `dynamodbav:"remaining"`
	Sold      int         `dynamodbav:"sold"`
	Version   cas.Version `dynamodbav:"version"`
}

var errSoldOut = errors.New("sold out")

// TestInventory sells from one item with 8 goroutines through
// Table.Modify: the stock never goes negative, and the sold count, the
// remaining stock and the sales the goroutines saw succeed all agree.
func TestInventory(t *testing.T) {
	dynamotest.Each(t, func(t *testing.T, srv dynamotest.Server) {
		const initial, workers = 60, 8
		cli := dynamotest.Client(t, srv)
		items, _ := newStocks(t, cli)
		ctx := dynamotest.Ctx(t, 2*time.Minute)
		if _, err := items.Insert(ctx, stock{SKU: "sku-42", Remaining: initial}); err != nil {
			t.Fatal(err)
		}
		key := dynamocas.Key{Partition: "sku-42"}
		var sold, soldOut atomic.Int64
		var wg sync.WaitGroup
		for range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					_, err := items.Modify(ctx, key, func(s stock, exists bool) (stock, error) {
						if !exists {
							return s, errors.New("item vanished")
						}
						if s.Remaining < 0 {
							return s, fmt.Errorf("stock went negative: %d", s.Remaining)
						}
						if s.Remaining == 0 {
							return s, errSoldOut
						}
						s.Remaining--
						s.Sold++
						return s, nil
					}, occ.WithMaxAttempts(1000), occ.WithRetryable(dynamocas.Retryable))
					switch {
					case err == nil:
						sold.Add(1)
					case errors.Is(err, errSoldOut):
						soldOut.Add(1)
						return
					default:
						t.Errorf("update: %v", err)
						return
					}
				}
			}()
		}
		wg.Wait()
		s, err := items.Get(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		v := s.Version
		if s.Remaining != 0 || s.Sold != initial || int(sold.Load()) != initial || s.Sold+s.Remaining != initial {
			t.Fatalf("remaining %d, sold %d (item) / %d (callers), want 0 and %d each", s.Remaining, s.Sold, sold.Load(), initial)
		}
		if v != initial+1 || soldOut.Load() != workers {
			t.Fatalf("version %d (want %d), %d workers saw sold out (want %d)", v, initial+1, soldOut.Load(), workers)
		}
	})
}

// TestTableTx commits versioned writes on two tables of different item
// types atomically (minidyn; dynalite has no TransactWriteItems): a stale
// version anywhere cancels everything, with a conflict naming the item.
func TestTableTx(t *testing.T) {
	srv := dynamotest.StartMinidyn(t)
	cli, count := dynamotest.CountingClient(t, srv)
	orders := newOrders(t, cli)
	items, _ := newStocks(t, cli)
	ctx := dynamotest.Ctx(t, time.Minute)
	sv := stockBook(t, ctx, items)

	// Place an order and take the stock, atomically.
	tx := dynamocas.NewTx(cli)
	o := sampleOrder()
	must(t, orders.TxInsert(tx, o))
	must(t, items.TxUpdate(tx, stock{SKU: "book", Remaining: 3, Sold: 2, Version: sv}))
	must(t, items.TxCheck(tx, dynamocas.Key{Partition: "pen"}, 0))
	vs, err := tx.Commit(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(vs, []cas.Version{1, sv + 1, 0}) {
		t.Fatalf("versions %v", vs)
	}
	if s, _ := items.Get(ctx, dynamocas.Key{Partition: "book"}); s.Remaining != 3 || s.Version != sv+1 {
		t.Fatalf("stock after commit: %+v", s)
	}

	// A stale stock version cancels the whole transaction.
	count.Reset()
	tx2 := dynamocas.NewTx(cli)
	o2 := sampleOrder()
	o2.ID = 43
	must(t, orders.TxInsert(tx2, o2))
	must(t, items.TxUpdate(tx2, stock{SKU: "book", Remaining: 2, Sold: 3, Version: sv}))
	_, err = tx2.Commit(ctx)
	var ce *cas.ConflictError
	if !errors.As(err, &ce) || ce.Key != "book" || ce.Expected != sv || !ce.HasCurrent || ce.Current.Version != sv+1 {
		t.Fatalf("stale commit: %v, want a conflict on book at v%d", err, sv+1)
	}
	var tce *types.TransactionCanceledException
	if !errors.As(err, &tce) {
		t.Fatalf("native error not reachable: %v", err)
	}
	if _, err := orders.Get(ctx, dynamocas.Key{Partition: "ada", Sort: 43}); !errors.Is(err, cas.ErrNotFound) {
		t.Fatalf("the cancelled transaction wrote the order: %v", err)
	}
	if count.Get("TransactWriteItems") != 1 {
		t.Fatalf("%d TransactWriteItems sent", count.Get("TransactWriteItems"))
	}

	// Delete in a transaction, then create the order again in one: the
	// second create is refused by the tombstone, and Commit creates over
	// it, above the deleted version; a check of absence passes on the
	// tombstone.
	tx3 := dynamocas.NewTx(cli)
	must(t, orders.TxDelete(tx3, dynamocas.Key{Partition: "ada", Sort: 42}, 1))
	if _, err := tx3.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	tx4 := dynamocas.NewTx(cli)
	must(t, orders.TxCheck(tx4, dynamocas.Key{Partition: "ada", Sort: 42}, 0))
	must(t, orders.TxInsert(tx4, o2))
	if vs, err := tx4.Commit(ctx); err != nil || !reflect.DeepEqual(vs, []cas.Version{0, 1}) {
		t.Fatalf("check of a deleted item's absence and a create: %v, %v", vs, err)
	}
	tx5 := dynamocas.NewTx(cli)
	must(t, orders.TxInsert(tx5, o))
	first := tx5.Token()
	vs, err = tx5.Commit(ctx)
	if err != nil || !reflect.DeepEqual(vs, []cas.Version{2}) || tx5.Token() == first {
		t.Fatalf("create over a tombstone of version 1: %v, %v (token changed: %v); want version 2", vs, err, tx5.Token() != first)
	}
	if got, err := orders.Get(ctx, dynamocas.Key{Partition: "ada", Sort: 42}); err != nil || got.Version != 2 {
		t.Fatalf("re-created order: %+v, %v", got, err)
	}
	big := dynamocas.NewTx(cli)
	for i := range dynamocas.MaxTransactItems + 1 {
		must(t, items.TxCheck(big, dynamocas.Key{Partition: fmt.Sprint(i)}, 0))
	}
	if _, err := big.Commit(ctx); !errors.Is(err, cas.ErrTooLarge) {
		t.Fatalf("commit of 101 operations: %v, want ErrTooLarge", err)
	}
	if _, err := dynamocas.NewTx(cli).Commit(ctx); !errors.Is(err, cas.ErrInvalidCommit) {
		t.Fatalf("empty commit: %v", err)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestTableModifyReadsAfterWait checks that Modify is occ.Update's loop:
// after a first conflict it retries at once from the item the conflict
// carried, and after a second one, which makes it wait, it reads the item
// again instead of trusting a state learned before the wait. Another
// writer gets in before each of the first two writes and once more during
// the wait: only a read after the wait sees that last write. (Table.Update,
// the copy of the loop Modify replaced, retried from the stale state.)
func TestTableModifyReadsAfterWait(t *testing.T) {
	srv := dynamotest.StartMinidyn(t)
	cli := dynamotest.Client(t, srv)
	items, name := newStocks(t, cli)
	others := openStocks(t, dynamotest.Client(t, srv), name, dynamocas.TableConfig{})
	ctx := dynamotest.Ctx(t, time.Minute)
	if _, err := items.Insert(ctx, stock{SKU: "k", Remaining: 10}); err != nil {
		t.Fatal(err)
	}
	key := dynamocas.Key{Partition: "k"}
	interfere := func() {
		if _, err := others.Modify(ctx, key, func(o stock, _ bool) (stock, error) { o.Sold++; return o, nil }); err != nil {
			t.Error(err)
		}
	}
	var seen []int // Sold as each call of mutate saw it
	got, err := items.Modify(ctx, key, func(s stock, _ bool) (stock, error) {
		seen = append(seen, s.Sold)
		if len(seen) <= 2 {
			interfere()
		}
		s.Remaining--
		return s, nil
	}, occ.WithBackOff(waitHook(interfere)), occ.WithMaxAttempts(5))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(seen, []int{0, 1, 3}) || got.Remaining != 9 || got.Sold != 3 {
		t.Fatalf("mutate saw sold %v and wrote %+v; want [0 1 3] (the third call after a fresh read) and remaining 9, sold 3", seen, got)
	}
}

// waitHook is a BackOff of no wait that calls do each time the loop is
// about to wait.
type waitHook func()

func (w waitHook) NextBackOff() time.Duration { w(); return 0 }
func (w waitHook) Reset()                     {}

// TestTableHolderPaused is the fault of a process pause for the table's
// exclusive path: the holder of an item's hold stops between its read and
// its write for five times the hold's bound. The other writers (another
// Table of the same items, as another process) wait only about that long,
// then proceed; the holder's late write is refused as a conflict; every
// increment of the others counts, none twice. A hold of an absent item
// that writes nothing leaves the item absent and creatable.
func TestTableHolderPaused(t *testing.T) {
	dynamotest.Each(t, func(t *testing.T, srv dynamotest.Server) {
		const bound = 200 * time.Millisecond
		cli := dynamotest.Client(t, srv)
		others, name := newStocks(t, cli)
		holder := openStocks(t, cli, name, dynamocas.TableConfig{ExclusiveTTL: bound})
		ctx := dynamotest.Ctx(t, time.Minute)
		key := dynamocas.Key{Partition: "n"}
		if _, err := others.Insert(ctx, stock{SKU: "n", Remaining: 100}); err != nil {
			t.Fatal(err)
		}
		firstDone, holderErr := castest.HolderPaused(t, bound, func(pause func()) error {
			_, err := holder.ExclusiveModify(ctx, key, func(cur stock, _ bool) (stock, bool, error) {
				pause()
				cur.Remaining = 1000
				return cur, true, nil
			})
			return err
		}, func() error {
			_, err := others.Modify(ctx, key, func(cur stock, _ bool) (stock, error) {
				cur.Remaining++
				return cur, nil
			})
			return err
		})
		if !errors.Is(holderErr, cas.ErrConflict) {
			t.Fatalf("the paused holder's write: %v, want a conflict (its hold ended, nothing written)", holderErr)
		}
		if got, err := others.Get(ctx, key); err != nil || got.Remaining != 120 {
			t.Fatalf("the item is %+v (%v), want 120 remaining", got, err)
		}
		if firstDone < bound/2 || firstDone >= 5*bound {
			t.Fatalf("the others' first increment after %v: they should wait for the hold (%v) and no longer", firstDone, bound)
		}

		// An exclusive update of an absent item that writes nothing.
		absent := dynamocas.Key{Partition: "absent"}
		if _, err := holder.ExclusiveModify(ctx, absent, func(cur stock, exists bool) (stock, bool, error) {
			if exists {
				t.Errorf("the absent item exists: %+v", cur)
			}
			return cur, false, nil
		}); err != nil {
			t.Fatal(err)
		}
		if _, err := others.Get(ctx, absent); !errors.Is(err, cas.ErrNotFound) {
			t.Fatalf("Get of an item only a hold touched: %v, want not found", err)
		}
		if got, err := others.Insert(ctx, stock{SKU: "absent", Remaining: 1}); err != nil || got.Version != 1 {
			t.Fatalf("Insert after a hold that wrote nothing: %+v, %v", got, err)
		}
	})
}

// TestModifyManyWaitsForHold: while an escalated Modify holds an item, a
// ModifyMany of it (another Table of the same items, as another process)
// waits instead of committing under the hold: the holder's write goes
// through, and the ModifyMany then applies on top of it. (minidyn: dynalite
// has no transactions.)
func TestModifyManyWaitsForHold(t *testing.T) {
	srv := dynamotest.StartMinidyn(t)
	cli := dynamotest.Client(t, srv)
	others, name := newStocks(t, cli)
	holder := openStocks(t, cli, name, dynamocas.TableConfig{})
	ctx := dynamotest.Ctx(t, time.Minute)
	a, b := dynamocas.Key{Partition: "a"}, dynamocas.Key{Partition: "b"}
	for _, sku := range []string{"a", "b"} {
		if _, err := others.Insert(ctx, stock{SKU: sku, Remaining: 10}); err != nil {
			t.Fatal(err)
		}
	}
	inFn, release := make(chan struct{}), make(chan struct{})
	holderDone := make(chan error, 1)
	go func() {
		_, err := holder.ExclusiveModify(ctx, a, func(cur stock, _ bool) (stock, bool, error) {
			close(inFn)
			<-release
			cur.Remaining = 100
			return cur, true, nil
		})
		holderDone <- err
	}()
	<-inFn
	manyDone := make(chan error, 1)
	go func() {
		_, err := others.ModifyMany(ctx, []dynamocas.Key{a, b}, func(cur []stock, _ []bool) ([]stock, error) {
			cur[0].Remaining--
			cur[1].Remaining--
			return cur, nil
		}, occ.WithExclusiveAfter(0))
		manyDone <- err
	}()
	select {
	case err := <-manyDone:
		close(release)
		t.Fatalf("ModifyMany ended (%v) while the item was held", err)
	case <-time.After(100 * time.Millisecond):
	}
	close(release)
	if err := <-holderDone; err != nil {
		t.Fatalf("the holder's write: %v, want it applied (nothing wrote the item under its hold)", err)
	}
	if err := <-manyDone; err != nil {
		t.Fatalf("ModifyMany after the hold: %v", err)
	}
	if got, err := others.Get(ctx, a); err != nil || got.Remaining != 99 {
		t.Fatalf("item a = %+v, %v; want 99 (the holder's 100, then ModifyMany's -1)", got, err)
	}
	if got, err := others.Get(ctx, b); err != nil || got.Remaining != 9 {
		t.Fatalf("item b = %+v, %v; want 9", got, err)
	}
}

// TestModifyManyEscalatedKeysWithSlashes: the escalated attempt of a
// ModifyMany (here the second, after a lost commit) holds and writes
// items whose keys name alike in errors (partition "a/b" and sort "c",
// partition "a" and sort "b/c"): each write goes to its own item.
func TestModifyManyEscalatedKeysWithSlashes(t *testing.T) {
	ctx := dynamotest.Ctx(t, 30*time.Second)
	cli := dynamotest.Client(t, dynamotest.StartMinidyn(t))
	name := createTable(t, cli, "p", types.ScalarAttributeTypeS, "s", types.ScalarAttributeTypeS)
	type item struct {
		P       string      `dynamodbav:"p"`
		S       string      `dynamodbav:"s"`
		N       int         `dynamodbav:"n"`
		Version cas.Version `dynamodbav:"version"`
	}
	tbl, err := dynamocas.NewTable[item](cli, dynamocas.TableConfig{Table: name, PartitionKey: "p", SortKey: "s"})
	if err != nil {
		t.Fatal(err)
	}
	keys := []dynamocas.Key{{Partition: "a/b", Sort: "c"}, {Partition: "a", Sort: "b/c"}}
	for _, k := range keys {
		if _, err := tbl.Insert(ctx, item{P: k.Partition.(string), S: k.Sort.(string)}); err != nil {
			t.Fatal(err)
		}
	}
	calls := 0
	out, err := tbl.ModifyMany(ctx, keys, func(cur []item, _ []bool) ([]item, error) {
		if calls++; calls == 1 {
			// Another writer moves the first item on: this attempt loses.
			if _, err := tbl.Update(ctx, cur[0]); err != nil {
				t.Error(err)
			}
		}
		cur[0].N += 1
		cur[1].N += 10
		return cur, nil
	}, occ.WithExclusiveAfter(1))
	if err != nil || calls != 2 {
		t.Fatalf("ModifyMany = %v after %d calls; want success on the escalated second", err, calls)
	}
	for i, want := range []int{1, 10} {
		got, err := tbl.Get(ctx, keys[i])
		if err != nil || got.N != want || out[i].N != want {
			t.Fatalf("item %v = %+v, %v (returned %+v); want n %d", keys[i], got, err, out[i], want)
		}
	}
}
