package occ

import (
	"context"
	"slices"
	"strconv"
	"sync"
	"testing"

	"github.com/occkit/occkit/adapters/memcas"
	"github.com/occkit/occkit/cas"
)

// batchCounting is a countingCommitter that also reads in batches,
// recording every GetMany's keys.
type batchCounting struct {
	*countingCommitter
	batch cas.BatchGetter

	bmu     sync.Mutex
	batches [][]string
}

func (b *batchCounting) GetMany(ctx context.Context, keys []string) ([]cas.Item, error) {
	b.bmu.Lock()
	b.batches = append(b.batches, slices.Clone(keys))
	b.bmu.Unlock()
	return b.batch.GetMany(ctx, keys)
}

func (b *batchCounting) recordedBatches() [][]string {
	b.bmu.Lock()
	defer b.bmu.Unlock()
	return slices.Clone(b.batches)
}

// TestTxnPrefetch: a transfer that prefetches its two keys reads them in
// one GetMany and no Get, and still conflicts correctly; keys already
// read, written, or named twice are not read again; a transaction's blind
// writes are read at commit in one GetMany.
func TestTxnPrefetch(t *testing.T) {
	ctx := context.Background()
	mem := memcas.New()
	s := &batchCounting{countingCommitter: newCountingCommitter(mem), batch: mem}
	put(t, s, "a", "100")
	put(t, s, "b", "0")
	transfer := func(n int) error {
		return Txn(ctx, s, func(tx *Tx) error {
			if err := tx.Prefetch("a", "b", "a"); err != nil {
				return err
			}
			av, bv, err := getAB(tx)
			if err != nil {
				return err
			}
			x, _ := strconv.Atoi(string(av))
			y, _ := strconv.Atoi(string(bv))
			tx.Put("a", []byte(strconv.Itoa(x-n)))
			tx.Put("b", []byte(strconv.Itoa(y+n)))
			return nil
		})
	}
	if err := transfer(10); err != nil {
		t.Fatal(err)
	}
	if got := s.recordedBatches(); len(got) != 1 || !slices.Equal(got[0], []string{"a", "b"}) {
		t.Fatalf("GetMany calls %q, want one of [a b]", got)
	}
	if s.getsOf("a")+s.getsOf("b") != 0 {
		t.Fatalf("%d and %d Gets after a prefetch", s.getsOf("a"), s.getsOf("b"))
	}

	// Concurrent transfers: the prefetched versions are validated at
	// commit like any read, so the sum holds.
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 10 {
				if err := transfer(1); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	a, _ := mem.Get(ctx, "a")
	b, _ := mem.Get(ctx, "b")
	if string(a.Value) != "10" || string(b.Value) != "90" {
		t.Fatalf("a=%s b=%s after 90 units moved in all, want 10 and 90", a.Value, b.Value)
	}

	// Read or written keys are not fetched again.
	before := len(s.recordedBatches())
	if err := Txn(ctx, s, func(tx *Tx) error {
		if _, _, err := tx.Get("a"); err != nil {
			return err
		}
		tx.Put("c", []byte("new"))
		return tx.Prefetch("a", "c")
	}); err != nil {
		t.Fatal(err)
	}
	if got := s.recordedBatches(); len(got) != before {
		t.Fatalf("a prefetch of keys read and written sent %q", got[before:])
	}

	// Blind writes of three keys are read at commit in one round trip.
	before = len(s.recordedBatches())
	if err := Txn(ctx, s, func(tx *Tx) error {
		for _, k := range []string{"x", "y", "z"} {
			tx.Put(k, []byte("1"))
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	got := s.recordedBatches()[before:]
	if len(got) != 1 || len(got[0]) != 3 || s.getsOf("x")+s.getsOf("y")+s.getsOf("z") != 0 {
		t.Fatalf("blind writes read with GetMany %q and %d Gets, want one GetMany of 3 keys", got, s.getsOf("x")+s.getsOf("y")+s.getsOf("z"))
	}

	// On a store that cannot read in batches, Prefetch falls back to Gets.
	plain := newCountingCommitter(memcas.New())
	put(t, plain, "p", "1")
	if err := Txn(ctx, plain, func(tx *Tx) error {
		if err := tx.Prefetch("p", "q"); err != nil {
			return err
		}
		v, ok, err := tx.Get("q")
		if err != nil || ok || v != nil {
			t.Errorf("absent q read as %q, %v, %v", v, ok, err)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if plain.getsOf("p") != 1 || plain.getsOf("q") != 1 {
		t.Fatalf("fallback Gets: p %d, q %d; want one each", plain.getsOf("p"), plain.getsOf("q"))
	}
}
