package migrate_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/occkit/occkit/adapters/pgcas"
	"github.com/occkit/occkit/examples/migrate"
	"github.com/occkit/occkit/internal/pgtest"
)

// itemsMigration adds what pgcas.Table needs to the "before" items table
// (sku, stock): a version column and the sequence its versions come from.
const itemsMigration = `
CREATE SEQUENCE items_version_seq START 2;                     -- never CYCLE it
ALTER TABLE items ADD COLUMN version bigint NOT NULL DEFAULT 1; -- existing rows: version 1
ALTER TABLE items ALTER COLUMN version SET DEFAULT nextval('items_version_seq');
ALTER SEQUENCE items_version_seq OWNED BY items.version;        -- dropped with the column
`

// ErrSoldOut is the package's, named as the guide's snippets name it.
var ErrSoldOut = migrate.ErrSoldOut

// Item is a row of items: the version travels in the row.
type Item struct {
	SKU     string `db:"sku"`
	Stock   int    `db:"stock"`
	Version int64  `db:"version"`
}

// BuyRow is the occkit version on pgcas.Table: Modify reads the row and
// its version, calls the function, and writes the row only if its version
// is still the one read (one UPDATE, which also draws the row's next
// version from items_version_seq); on a conflict it reads again and
// redoes. No lock, no transaction held open across the read and the write.
func BuyRow(ctx context.Context, items *pgcas.Table[Item], sku string) (int, error) {
	it, err := items.Modify(ctx, sku, func(it Item, exists bool) (Item, error) {
		if !exists || it.Stock <= 0 {
			return it, ErrSoldOut // not retried, nothing written
		}
		it.Stock--
		return it, nil
	})
	return it.Stock, err
}

// The "after" of docs/migrate.md's SELECT ... FOR UPDATE section: the
// migration on the "before" table, then 8 buyers selling out 40 units
// with BuyRow at default options. It runs against the server the tests
// use (OCCKIT_PG_URL), in a fresh schema.
func Example_pgcasTable() {
	ctx := context.Background()
	pool, done := pgtest.ExamplePool()
	defer done()
	if _, err := pool.Exec(ctx, `CREATE TABLE items (sku text PRIMARY KEY, stock int NOT NULL);
INSERT INTO items VALUES ('teapot', 40)`); err != nil { // the "before" table
		panic(err)
	}
	if _, err := pool.Exec(ctx, itemsMigration); err != nil {
		panic(err)
	}
	items, err := pgcas.NewTable[Item](pool, pgcas.TableConfig{Table: "items", KeyColumn: "sku"}) // once, kept
	if err != nil {
		panic(err)
	}
	var sold atomic.Int64
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for {
				_, err := BuyRow(ctx, items, "teapot")
				if errors.Is(err, migrate.ErrSoldOut) {
					return
				}
				if err != nil {
					fmt.Println(err)
					return
				}
				sold.Add(1)
			}
		})
	}
	wg.Wait()
	it, err := items.Get(ctx, "teapot")
	fmt.Println("sold:", sold.Load(), "left:", it.Stock, err)
	// Output: sold: 40 left: 0 <nil>
}

// TestGuideQuotesBuyRow: docs/migrate.md quotes BuyRow, Item and the
// migration as they are here, as TestGuideQuotesTheCode checks the
// package's own functions.
func TestGuideQuotesBuyRow(t *testing.T) {
	guide, err := os.ReadFile("../../docs/migrate.md")
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile("table_example_test.go")
	if err != nil {
		t.Fatal(err)
	}
	quotes := []string{strings.TrimSpace(itemsMigration)}
	for _, re := range []string{`(?ms)^func BuyRow\(.*?^}$`, `(?ms)^type Item struct \{.*?^}$`} {
		m := regexp.MustCompile(re).Find(src)
		if m == nil {
			t.Fatalf("%s not found in table_example_test.go", re)
		}
		quotes = append(quotes, string(m))
	}
	for _, q := range quotes {
		if !strings.Contains(string(guide), q) {
			t.Errorf("docs/migrate.md does not quote, as it is in the code:\n%s", q)
		}
	}
}
