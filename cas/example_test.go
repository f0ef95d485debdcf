package cas_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/occkit/occkit/adapters/memcas"
	"github.com/occkit/occkit/cas"
)

// A write conditional on the version the writer read: the second writer,
// holding a stale version, is refused and learns the current state from the
// conflict itself.
func Example() {
	ctx := context.Background()
	store := memcas.New()

	v1, _ := store.CompareAndSwap(ctx, "greeting", 0, []byte("hello")) // 0: create
	_, _ = store.CompareAndSwap(ctx, "greeting", v1, []byte("hi"))     // someone else updates

	_, err := store.CompareAndSwap(ctx, "greeting", v1, []byte("hey")) // stale version
	var conflict *cas.ConflictError
	if errors.As(err, &conflict) && conflict.HasCurrent {
		fmt.Printf("conflict: current value %q\n", conflict.Current.Value)
	}
	// Output: conflict: current value "hi"
}

// Typed values with a JSON codec.
func ExampleNewTyped() {
	type cart struct {
		Items []string `json:"items"`
	}
	ctx := context.Background()
	carts := cas.NewTyped(memcas.New(), cas.JSON[cart]())
	v, _ := carts.CompareAndSwap(ctx, "cart/ada", 0, cart{Items: []string{"book"}})
	c, got, _ := carts.Get(ctx, "cart/ada")
	fmt.Println(c.Items, got == v)
	// Output: [book] true
}
