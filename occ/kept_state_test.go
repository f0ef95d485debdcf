package occ

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

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

// gatedCAS holds the first CompareAndSwap it sees until release is
// closed, and after applying it writes the key again itself (another
// process's write), so that what the writer caches is stale at once.
type gatedCAS struct {
	*memcas.Store
	once    sync.Once
	held    chan struct{}
	release chan struct{}
}

func (g *gatedCAS) CompareAndSwap(ctx context.Context, key string, expected cas.Version, value []byte) (cas.Version, error) {
	first := false
	g.once.Do(func() { first = true })
	if !first {
		return g.Store.CompareAndSwap(ctx, key, expected, value)
	}
	close(g.held)
	<-g.release
	v, err := g.Store.CompareAndSwap(ctx, key, expected, value)
	if err == nil {
		_, err = g.Store.CompareAndSwap(ctx, key, v, []byte("50"))
	}
	return v, err
}

// TestCombinedRefusalOfACachedStateIsChecked: a combined batch that starts
// from a cache entry another process has made stale, and whose callers all
// refuse it, reads the key and asks them again instead of failing them.
func TestCombinedRefusalOfACachedStateIsChecked(t *testing.T) {
	ctx := context.Background()
	g := &gatedCAS{Store: memcas.New(), held: make(chan struct{}), release: make(chan struct{})}
	typed := cas.NewTyped[int](g, cas.JSON[int]())
	if _, err := g.Store.CompareAndSwap(ctx, "k", 0, []byte("30")); err != nil {
		t.Fatal(err)
	}
	cache := NewCache(g, 16)
	comb := NewCombiner(WithQueueFromStart())
	opts := []Option{WithCache(cache), WithCombiner(comb)}
	first := make(chan error, 1)
	go func() {
		_, _, err := Update(ctx, typed, "k", func(n int, _ bool) (int, error) { return n + 1, nil }, opts...)
		first <- err
	}()
	<-g.held // the first write is in flight: the next call queues behind it
	second := make(chan error, 1)
	var got int
	go func() {
		var err error
		got, _, err = Update(ctx, typed, "k", func(n int, _ bool) (int, error) {
			if n == 31 { // what the first call wrote, and cached
				return 0, errSoldOut
			}
			return n - 1, nil
		}, opts...)
		second <- err
	}()
	time.Sleep(100 * time.Millisecond) // let it queue
	close(g.release)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if err := <-second; err != nil || got != 49 {
		t.Fatalf("combined call from a stale cache entry: %d, %v; want 49 (the key holds 50)", got, err)
	}
}
