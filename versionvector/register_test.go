package versionvector

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/cenkalti/backoff/v4"
	"github.com/occkit/occkit/adapters/memcas"
	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/occ"
)

func TestRegisterGetPut(t *testing.T) {
	ctx := context.Background()
	r := NewRegister(memcas.New(), cas.JSON[string]())

	vals, cc, err := r.Get(ctx, "k")
	if !errors.Is(err, cas.ErrNotFound) || vals != nil || !cc.IsZero() {
		t.Fatalf("Get of a missing key = %v, %v, %v; want ErrNotFound, no values, zero context", vals, cc, err)
	}
	steps := []struct {
		name    string
		replica string
		useRead bool // write with the context of the last Get
		value   string
		want    []string
	}{
		{"create", "eu", false, "v1", []string{"v1"}},
		{"overwrite what was read", "eu", true, "v2", []string{"v2"}},
		{"blind write is a sibling", "eu", false, "blind", []string{"v2", "blind"}},
		{"write from another replica, blind", "us", false, "us1", []string{"v2", "blind", "us1"}},
		{"a write that read them all replaces them", "us", true, "all", []string{"all"}},
	}
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			var use CausalContext
			if st.useRead {
				use = cc
			}
			if err := r.Put(ctx, "k", use, st.value, st.replica); err != nil {
				t.Fatal(err)
			}
			vals, cc, err = r.Get(ctx, "k")
			if err != nil || !slices.Equal(vals, st.want) {
				t.Fatalf("Get = %v, %v; want %v", vals, err, st.want)
			}
		})
	}
	set, ver, err := r.GetSet(ctx, "k")
	if err != nil || ver == 0 || set.Len() != 1 {
		t.Fatalf("GetSet = %v, %d, %v", set, ver, err)
	}
}

func TestRegisterPutErrors(t *testing.T) {
	ctx := context.Background()
	store := memcas.New()
	r := NewRegister(store, cas.JSON[string]())
	if r.Store() != store {
		t.Error("Store() is not the store given")
	}

	t.Run("invalid replica ID", func(t *testing.T) {
		for _, id := range []string{"", "\xff"} {
			if err := r.Put(ctx, "k", CausalContext{}, "v", id); !errors.Is(err, ErrInvalidReplicaID) || !strings.HasPrefix(err.Error(), "versionvector: ") {
				t.Errorf("Put with replica %q = %v, want ErrInvalidReplicaID", id, err)
			}
		}
	})
	t.Run("forged counter overflows", func(t *testing.T) {
		var cc CausalContext
		if err := cc.UnmarshalBinary([]byte{1, 2, 'e', 'u', 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}); err != nil {
			t.Fatal(err)
		}
		if err := r.Put(ctx, "k", cc, "v", "eu"); !errors.Is(err, ErrCounterOverflow) {
			t.Fatalf("Put = %v, want ErrCounterOverflow", err)
		}
		if _, err := store.Get(ctx, "k"); !errors.Is(err, cas.ErrNotFound) {
			t.Fatalf("the refused write left something: %v", err)
		}
		if cc.vv["eu"] != math.MaxUint64 {
			t.Fatal("test context is not at the limit")
		}
	})
	t.Run("invalid key", func(t *testing.T) {
		if err := r.Put(ctx, "", CausalContext{}, "v", "eu"); !errors.Is(err, cas.ErrInvalidKey) {
			t.Fatalf("Put = %v, want cas.ErrInvalidKey", err)
		}
	})
	t.Run("cancelled context", func(t *testing.T) {
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		if err := r.Put(cctx, "k", CausalContext{}, "v", "eu"); !errors.Is(err, context.Canceled) {
			t.Fatalf("Put = %v, want context.Canceled", err)
		}
		if _, _, err := r.Get(cctx, "k"); !errors.Is(err, context.Canceled) {
			t.Fatalf("Get = %v, want context.Canceled", err)
		}
	})
	t.Run("garbage in the store", func(t *testing.T) {
		if _, err := store.CompareAndSwap(ctx, "junk", 0, []byte("not a set")); err != nil {
			t.Fatal(err)
		}
		_, _, err := r.Get(ctx, "junk")
		var ce *cas.CodecError
		if !errors.Is(err, ErrMalformed) || !errors.As(err, &ce) {
			t.Fatalf("Get = %v, want a *cas.CodecError matching ErrMalformed", err)
		}
		if err := r.Put(ctx, "junk", CausalContext{}, "v", "eu"); !errors.Is(err, ErrMalformed) {
			t.Fatalf("Put = %v, want ErrMalformed", err)
		}
	})
}

// TestRegisterConcurrentBlindWrites: many goroutines write the same key of
// one store without reading; the compare-and-swap retries keep every write,
// each as a sibling, and the siblings all carry distinct dots.
func TestRegisterConcurrentBlindWrites(t *testing.T) {
	ctx := context.Background()
	r := NewRegister(memcas.New(), cas.JSON[string]())
	const writers, each = 8, 25
	var wg sync.WaitGroup
	errs := make(chan error, writers*each)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				errs <- r.Put(ctx, "k", CausalContext{}, fmt.Sprintf("w%d-%d", w, i), "eu", occ.WithMaxAttempts(1000), zeroBackOffs())
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	set, _, err := r.GetSet(ctx, "k")
	if err != nil || set.Len() != writers*each {
		t.Fatalf("siblings %d, %v; want %d", set.Len(), err, writers*each)
	}
	if j := set.Join(); j["eu"] != writers*each {
		t.Fatalf("join %v, want eu:%d", j, writers*each)
	}
}

func zeroBackOffs() occ.Option {
	return occ.WithBackOffFunc(func() backoff.BackOff { return &backoff.ZeroBackOff{} })
}

type profile struct {
	Name    string `json:"name"`
	Updated int64  `json:"updated"`
}

func TestResolvers(t *testing.T) {
	ctx := context.Background()
	lww := LastWriterWins(func(p profile) int64 { return p.Updated })
	tests := []struct {
		name     string
		opts     []RegisterOption[profile]
		want     []profile // what Get returns after three concurrent writes
		wantKept int       // siblings left in the store
	}{
		{"no resolver", nil, []profile{{"ada", 20}, {"bob", 30}, {"cy", 10}}, 3},
		{"last writer wins on read", []RegisterOption[profile]{ResolveOnRead(lww)}, []profile{{"bob", 30}}, 3},
		{"last writer wins on write", []RegisterOption[profile]{ResolveOnWrite(lww)}, []profile{{"bob", 30}}, 1},
		{"merge on write", []RegisterOption[profile]{ResolveOnWrite(MergeWith(func(a, b profile) profile {
			return profile{Name: a.Name + "+" + b.Name, Updated: max(a.Updated, b.Updated)}
		}))}, []profile{{"ada+bob+cy", 30}}, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := NewRegister(memcas.New(), cas.JSON[profile](), tt.opts...)
			for _, p := range []profile{{"ada", 20}, {"bob", 30}, {"cy", 10}} {
				if err := r.Put(ctx, "p", CausalContext{}, p, "eu"); err != nil {
					t.Fatal(err)
				}
			}
			got, cc, err := r.Get(ctx, "p")
			if err != nil || !slices.Equal(got, tt.want) {
				t.Fatalf("Get = %v, %v; want %v", got, err, tt.want)
			}
			set, _, _ := r.GetSet(ctx, "p")
			if set.Len() != tt.wantKept {
				t.Fatalf("store keeps %d siblings, want %d", set.Len(), tt.wantKept)
			}
			// Writing back with the context of the resolved read
			// replaces every sibling.
			if err := r.Put(ctx, "p", cc, got[0], "eu"); err != nil {
				t.Fatal(err)
			}
			if set, _, _ := r.GetSet(ctx, "p"); set.Len() != 1 {
				t.Fatalf("after writing back: %d siblings, want 1", set.Len())
			}
		})
	}
	t.Run("last writer wins tie goes to the last sibling", func(t *testing.T) {
		got := lww([]profile{{"a", 1}, {"b", 2}, {"c", 2}})
		if got.Name != "c" {
			t.Fatalf("tie resolved to %v, want c", got)
		}
	})
}
