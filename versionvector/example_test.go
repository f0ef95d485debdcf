package versionvector_test

import (
	"context"
	"fmt"
	"slices"

	"github.com/occkit/occkit/adapters/memcas"
	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/versionvector"
)

// Cart is a shopping cart.
type Cart struct {
	Items []string `json:"items"`
}

// union merges two carts: every item either holds, once, sorted. It is
// commutative, associative and idempotent, so the order siblings are merged
// in does not matter.
func union(a, b Cart) Cart {
	items := slices.Concat(a.Items, b.Items)
	slices.Sort(items)
	return Cart{Items: slices.Compact(items)}
}

func check(err error) {
	if err != nil {
		panic(err)
	}
}

// A shopping cart written in two regions: each region has its own store
// and replica ID, and anti-entropy (Sync) exchanges their writes. Ada adds
// an item on her phone, served from Europe, and another on her laptop,
// served from the US, before the regions have talked: neither write is lost.
// They are siblings until a read resolves them with the union, and the write
// made after that read replaces both.
func Example() {
	ctx := context.Background()
	eu, us := memcas.New(), memcas.New()
	resolve := versionvector.ResolveOnRead(versionvector.MergeWith(union))
	euCarts := versionvector.NewRegister(eu, cas.JSON[Cart](), resolve)
	usCarts := versionvector.NewRegister(us, cas.JSON[Cart](), resolve)

	// The cart is created in Europe and copied to the US.
	check(euCarts.Put(ctx, "cart/ada", versionvector.CausalContext{}, Cart{Items: []string{"book"}}, "eu"))
	_, err := versionvector.Sync(ctx, eu, us, "cart/ada")
	check(err)

	// Read, add an item, write with the context read.
	add := func(carts *versionvector.Register[Cart], item, region string) {
		cur, cc, err := carts.Get(ctx, "cart/ada")
		check(err)
		check(carts.Put(ctx, "cart/ada", cc, union(cur[0], Cart{Items: []string{item}}), region))
	}
	add(euCarts, "pen", "eu")
	add(usCarts, "lamp", "us")

	_, err = versionvector.Sync(ctx, eu, us, "cart/ada")
	check(err)
	set, _, err := euCarts.GetSet(ctx, "cart/ada")
	check(err)
	fmt.Println("siblings:", set.Values())

	cart, _, err := usCarts.Get(ctx, "cart/ada")
	check(err)
	fmt.Println("resolved:", cart[0].Items)

	add(usCarts, "mug", "us")
	_, err = versionvector.Sync(ctx, eu, us, "cart/ada")
	check(err)
	set, _, err = euCarts.GetSet(ctx, "cart/ada")
	check(err)
	fmt.Println("after the next write:", set.Values())
	// Output:
	// siblings: [{[book pen]} {[book lamp]}]
	// resolved: [book lamp pen]
	// after the next write: [{[book lamp mug pen]}]
}

// Comparing version vectors: each write increments its replica's counter,
// and two writes that did not see each other are concurrent.
func ExampleCompare() {
	base := versionvector.Vector{}.Increment("eu")
	eu := base.Increment("eu")
	us := base.Increment("us")
	fmt.Println(versionvector.Compare(base, eu))
	fmt.Println(versionvector.Compare(eu, us))
	merged := versionvector.Merge(eu, us)
	fmt.Println(merged, versionvector.Compare(merged, us))
	// Output:
	// before
	// concurrent
	// map[eu:2 us:1] after
}

// The DVVSet on its own: a write with the context of a read replaces what
// was read; a write that read nothing becomes a sibling.
func ExampleSet_Update() {
	s := versionvector.NewSet("eu", "v1")
	read := s.Join()
	s = s.Update(nil, "eu", "blind") // did not read: kept beside v1
	fmt.Println(s.Values())
	s = s.Update(read, "us", "v2") // read v1 only: replaces v1, keeps "blind"
	fmt.Println(s.Values(), s.Join())
	// Output:
	// [v1 blind]
	// [blind v2] map[eu:2 us:1]
}

// Last-writer-wins by a timestamp the application keeps in its values.
func ExampleLastWriterWins() {
	type profile struct {
		Email     string
		UpdatedAt int64
	}
	ctx := context.Background()
	profiles := versionvector.NewRegister(memcas.New(), cas.JSON[profile](),
		versionvector.ResolveOnWrite(versionvector.LastWriterWins(func(p profile) int64 { return p.UpdatedAt })))
	check(profiles.Put(ctx, "user/ada", versionvector.CausalContext{}, profile{"ada@new.example", 20}, "eu"))
	check(profiles.Put(ctx, "user/ada", versionvector.CausalContext{}, profile{"ada@old.example", 10}, "eu"))
	vals, _, err := profiles.Get(ctx, "user/ada")
	check(err)
	fmt.Println(vals)
	// Output: [{ada@new.example 20}]
}

// Anti-entropy over every key of two stores needs the key lists: stores that
// cannot list keys make SyncPrefix fail with errors.ErrUnsupported, and
// SyncKeys takes the keys from the caller instead.
func ExampleSyncKeys() {
	ctx := context.Background()
	eu, us := memcas.New(), memcas.New()
	carts := versionvector.NewRegister(eu, cas.JSON[Cart]())
	for _, k := range []string{"cart/ada", "cart/bob"} {
		check(carts.Put(ctx, k, versionvector.CausalContext{}, Cart{Items: []string{"book"}}, "eu"))
	}
	st, err := versionvector.SyncKeys(ctx, eu, us, []string{"cart/ada", "cart/bob"})
	check(err)
	fmt.Printf("%+v\n", st)
	// Output: {Keys:2 UpdatedA:0 UpdatedB:2}
}
