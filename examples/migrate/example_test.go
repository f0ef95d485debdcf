package migrate_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/occkit/occkit/adapters/memcas"
	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/examples/migrate"
)

// Buy on any store: the last unit is sold once.
func ExampleBuy() {
	ctx := context.Background()
	stock := cas.NewTyped(memcas.New(), cas.JSON[int]()) // or rediscas, etcdcas, pgcas...
	_, _ = stock.CompareAndSwap(ctx, "stock/teapot", 0, 1)

	left, err := migrate.Buy(ctx, stock, "teapot")
	fmt.Println(left, err)
	_, err = migrate.Buy(ctx, stock, "teapot")
	fmt.Println(errors.Is(err, migrate.ErrSoldOut))
	// Output:
	// 0 <nil>
	// true
}
