package versionvector

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/occkit/occkit/adapters/memcas"
	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/occ"
)

// sizeReplicaID returns a replica ID as long as a cloud region name such as
// "eu-west-1" (9 bytes).
func sizeReplicaID(i int) string { return fmt.Sprintf("region-%02d", i) }

// TestEncodedSizes measures what causality costs per key, against the number
// of replicas that have written it: the encoded vector and causal context,
// and the bytes a stored set adds to its values, in the steady state (one
// sibling) and after one concurrent write per replica. The figures are
// logged (go test -v -run TestEncodedSizes) and quoted in
// docs/versionvector.md; the test fails if the overhead outgrows the formula
// the documentation gives.
func TestEncodedSizes(t *testing.T) {
	value := []byte(`{"items":["book","pen"],"updated":1767225600}`)
	const writesPerReplica = 100_000 // counters take 3 varint bytes
	t.Logf("value: %d bytes; replica IDs: 9 bytes; counters ≈ %d (3-byte varints)", len(value), writesPerReplica)
	t.Logf("%8s %8s %8s %8s %14s %14s %14s", "replicas", "vector", "json", "context", "set overhead", "per replica", "R siblings")
	for _, r := range []int{1, 2, 3, 5, 10, 20, 50} {
		v := Vector{}
		var s Set[[]byte]
		for i := range r {
			id := sizeReplicaID(i)
			v[id] = writesPerReplica + uint64(i)
			s = s.Discard(Vector{id: writesPerReplica + uint64(i) - 1})
		}
		// Steady state: the last write saw everything.
		s = s.Update(s.Join(), sizeReplicaID(0), value)
		one, err := raw.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		// Worst ordinary case: every replica wrote once concurrently.
		conc := s
		for i := range r {
			conc = conc.Update(nil, sizeReplicaID(i), value)
		}
		many, err := raw.Marshal(conc)
		if err != nil {
			t.Fatal(err)
		}
		bin, _ := v.MarshalBinary()
		js, _ := v.MarshalJSON()
		txt, _ := CausalContext{vv: v}.MarshalText()
		overhead := len(one) - len(value)
		manyOverhead := len(many) - conc.Len()*len(value)
		t.Logf("%8d %8d %8d %8d %14d %14.1f %14d", r, len(bin), len(js), len(txt), overhead, float64(overhead)/float64(r), manyOverhead)

		// The documented bound: 2 bytes per key, 1 + len(ID) + counter
		// (≤ 10) + 1 per replica, 1 or 2 per sibling of < 16 KiB.
		limit := 2 + r*(1+9+3+1) + 2
		if overhead > limit {
			t.Errorf("%d replicas: overhead %d bytes, documented bound %d", r, overhead, limit)
		}
	}
}

// BenchmarkPut compares a client's write through a Register (Get for the
// context, then Put: read, update the set, encode, compare-and-swap) with
// the same with a single version (Get, then occ.Update of the plain value)
// on the same kind of store, side by side in one run, for a key written by
// 3 and by 10 replicas.
func BenchmarkPut(b *testing.B) {
	ctx := context.Background()
	value := strings.Repeat("x", 64)
	b.Run("Get+occ.Update", func(b *testing.B) {
		typed := cas.NewTyped(memcas.New(), cas.JSON[string]())
		for b.Loop() {
			if _, _, err := occ.Update(ctx, typed, "k", func(string, bool) (string, error) { return value, nil }); err != nil {
				b.Fatal(err)
			}
			if _, _, err := typed.Get(ctx, "k"); err != nil {
				b.Fatal(err)
			}
		}
	})
	for _, r := range []int{3, 10} {
		b.Run(fmt.Sprintf("Get+Register.Put/replicas=%d", r), func(b *testing.B) {
			reg := NewRegister(memcas.New(), cas.JSON[string]())
			for i := range r {
				if err := reg.Put(ctx, "k", CausalContext{}, value, sizeReplicaID(i)); err != nil {
					b.Fatal(err)
				}
			}
			_, cc, _ := reg.Get(ctx, "k")
			for b.Loop() {
				if err := reg.Put(ctx, "k", cc, value, sizeReplicaID(0)); err != nil {
					b.Fatal(err)
				}
				_, cc, _ = reg.Get(ctx, "k")
			}
		})
	}
}
