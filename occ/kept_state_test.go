package occ

import (
	"context"
	"errors"
	"testing"

	"github.com/occkit/occkit/adapters/memcas"
	"github.com/occkit/occkit/cas"
)

var errSoldOut = errors.New("sold out")

// TestRefusalOfAKeptStateIsChecked: a mutate (or a Txn's fn) that refuses
// the state this process kept for a key (a remembered write, a cache
// entry) while another process has changed the key since is asked again
// on a read: a refusal must come from a state that was current during the
// call. Here the kept state says "10" (sold out); the key holds "20".
func TestRefusalOfAKeptStateIsChecked(t *testing.T) {
	forgetAllStates(t)
	ctx := context.Background()
	refuseTen := func(n int, _ bool) (int, error) {
		if n == 10 {
			return 0, errSoldOut
		}
		return n - 1, nil
	}

	inner := memcas.New()
	staleStates(t, inner, inner, []string{"a"})
	if n, _, err := Update(ctx, cas.NewTyped[int](inner, cas.JSON[int]()), "a", refuseTen); err != nil || n != 19 {
		t.Fatalf("Update from a stale remembered state: %d, %v; want 19 (the refusal checked on a read)", n, err)
	}

	inner = memcas.New()
	staleStates(t, inner, inner, []string{"b"})
	err := Txn(ctx, inner, func(tx *Tx) error {
		v, _, err := tx.Get("b")
		if err != nil {
			return err
		}
		if string(v) == "10" {
			return errSoldOut
		}
		tx.Put("b", []byte("19"))
		return nil
	})
	if err != nil {
		t.Fatalf("Txn from a stale remembered state: %v; want the refusal checked on a read", err)
	}

	// A cache entry another process made stale.
	inner = memcas.New()
	typed := cas.NewTyped[int](inner, cas.JSON[int]())
	cache := NewCache(inner, 16)
	if _, _, err := Update(ctx, typed, "c", func(int, bool) (int, error) { return 10, nil }, WithCache(cache)); err != nil {
		t.Fatal(err)
	}
	it, _ := inner.Get(ctx, "c")
	if _, err := inner.CompareAndSwap(ctx, "c", it.Version, []byte("20")); err != nil {
		t.Fatal(err)
	}
	if n, _, err := Update(ctx, typed, "c", refuseTen, WithCache(cache)); err != nil || n != 19 {
		t.Fatalf("Update from a stale cache entry: %d, %v; want 19", n, err)
	}

	// A refusal of the current state stands.
	if _, _, err := Update(ctx, typed, "c", func(int, bool) (int, error) { return 0, errSoldOut }, WithCache(cache)); !errors.Is(err, errSoldOut) {
		t.Fatalf("a refusal of the current state: %v, want errSoldOut", err)
	}
}
