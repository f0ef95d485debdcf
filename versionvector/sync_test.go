package versionvector

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/occkit/occkit/adapters/memcas"
	"github.com/occkit/occkit/cas"
)

// newListingStore returns a store that can list its keys (memcas is a
// cas.Lister).
func newListingStore() *memcas.Store { return memcas.New() }

var _ Lister = (*memcas.Store)(nil)

// storedBytes returns the raw value of key in s, nil if absent.
func storedBytes(t *testing.T, s cas.Store, key string) []byte {
	t.Helper()
	it, err := s.Get(context.Background(), key)
	if errors.Is(err, cas.ErrNotFound) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return it.Value
}

func TestSync(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name      string
		eu, us    []string // blind writes in each region before the sync
		wantStats SyncStats
		want      []string
	}{
		{"key in neither", nil, nil, SyncStats{Keys: 1}, nil},
		{"key in the first only", []string{"e1"}, nil, SyncStats{Keys: 1, UpdatedB: 1}, []string{"e1"}},
		{"key in the second only", nil, []string{"u1"}, SyncStats{Keys: 1, UpdatedA: 1}, []string{"u1"}},
		{"concurrent writes become siblings in both", []string{"e1", "e2"}, []string{"u1"}, SyncStats{Keys: 1, UpdatedA: 1, UpdatedB: 1}, []string{"e1", "e2", "u1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			eu, us := memcas.New(), memcas.New()
			reu := NewRegister(eu, cas.JSON[string]())
			rus := NewRegister(us, cas.JSON[string]())
			for _, v := range tt.eu {
				if err := reu.Put(ctx, "k", CausalContext{}, v, "eu"); err != nil {
					t.Fatal(err)
				}
			}
			for _, v := range tt.us {
				if err := rus.Put(ctx, "k", CausalContext{}, v, "us"); err != nil {
					t.Fatal(err)
				}
			}
			st, err := Sync(ctx, eu, us, "k")
			if err != nil || st != tt.wantStats {
				t.Fatalf("Sync = %+v, %v; want %+v", st, err, tt.wantStats)
			}
			for _, r := range []*Register[string]{reu, rus} {
				got, _, err := r.Get(ctx, "k")
				if tt.want == nil {
					if !errors.Is(err, cas.ErrNotFound) {
						t.Fatalf("Get = %v, %v; want not found", got, err)
					}
					continue
				}
				if err != nil || !slices.Equal(got, tt.want) {
					t.Fatalf("Get = %v, %v; want %v", got, err, tt.want)
				}
			}
			if a, b := storedBytes(t, eu, "k"), storedBytes(t, us, "k"); !bytes.Equal(a, b) {
				t.Fatalf("stores differ after sync: %x vs %x", a, b)
			}
			// A second pass finds nothing to do.
			if st, err := Sync(ctx, us, eu, "k"); err != nil || st != (SyncStats{Keys: 1}) {
				t.Fatalf("second Sync = %+v, %v; want no writes", st, err)
			}
		})
	}
}

func TestSyncKeysAndPrefix(t *testing.T) {
	ctx := context.Background()
	eu, us := newListingStore(), newListingStore()
	reu := NewRegister(eu, cas.JSON[int]())
	rus := NewRegister(us, cas.JSON[int]())
	for i, k := range []string{"cart/1", "cart/2", "user/1"} {
		if err := reu.Put(ctx, k, CausalContext{}, i, "eu"); err != nil {
			t.Fatal(err)
		}
	}
	if err := rus.Put(ctx, "cart/3", CausalContext{}, 9, "us"); err != nil {
		t.Fatal(err)
	}

	t.Run("prefix", func(t *testing.T) {
		st, err := SyncPrefix(ctx, eu, us, "cart/")
		if err != nil || st != (SyncStats{Keys: 3, UpdatedA: 1, UpdatedB: 2}) {
			t.Fatalf("SyncPrefix = %+v, %v", st, err)
		}
		if _, _, err := rus.Get(ctx, "user/1"); !errors.Is(err, cas.ErrNotFound) {
			t.Fatalf("a key outside the prefix was synced: %v", err)
		}
	})
	t.Run("unsupported store", func(t *testing.T) {
		type plain struct{ cas.Store } // hides KeysWithPrefix
		_, err := SyncPrefix(ctx, eu, plain{memcas.New()}, "cart/")
		if !errors.Is(err, errors.ErrUnsupported) {
			t.Fatalf("SyncPrefix with a store that cannot list = %v, want errors.ErrUnsupported", err)
		}
	})
	t.Run("keys, one of them broken", func(t *testing.T) {
		if _, err := us.CompareAndSwap(ctx, "bad", 0, []byte("junk")); err != nil {
			t.Fatal(err)
		}
		st, err := SyncKeys(ctx, eu, us, []string{"bad", "user/1"})
		if !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), `"bad"`) {
			t.Fatalf("SyncKeys = %v, want the broken key's ErrMalformed", err)
		}
		if st.UpdatedB != 1 {
			t.Fatalf("the good key was not synced: %+v", st)
		}
		if _, _, err := rus.Get(ctx, "user/1"); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("cancelled", func(t *testing.T) {
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		if _, err := SyncKeys(cctx, eu, us, []string{"cart/1", "cart/2"}); !errors.Is(err, context.Canceled) {
			t.Fatalf("SyncKeys = %v, want context.Canceled", err)
		}
	})
}

func TestPruneStore(t *testing.T) {
	ctx := context.Background()
	eu, old := memcas.New(), memcas.New()
	reu := NewRegister(eu, cas.JSON[string]())
	rold := NewRegister(old, cas.JSON[string]())
	if err := rold.Put(ctx, "k", CausalContext{}, "from old", "old"); err != nil {
		t.Fatal(err)
	}
	if _, err := Sync(ctx, eu, old, "k"); err != nil {
		t.Fatal(err)
	}
	// While old's value is still a sibling, pruning keeps it.
	if err := Prune(ctx, eu, "k", []string{"old"}); err != nil {
		t.Fatal(err)
	}
	if vals, _, _ := reu.Get(ctx, "k"); !slices.Equal(vals, []string{"from old"}) {
		t.Fatalf("prune dropped a live sibling: %v", vals)
	}
	_, cc, _ := reu.Get(ctx, "k")
	if err := reu.Put(ctx, "k", cc, "new", "eu"); err != nil {
		t.Fatal(err)
	}
	if _, err := Sync(ctx, eu, old, "k"); err != nil {
		t.Fatal(err)
	}
	before := len(storedBytes(t, eu, "k"))
	for _, s := range []cas.Store{eu, old} {
		if err := Prune(ctx, s, "k", []string{"old"}); err != nil {
			t.Fatal(err)
		}
	}
	set, _, _ := reu.GetSet(ctx, "k")
	if _, ok := set.Join()["old"]; ok || !slices.Equal(set.Values(), []string{"new"}) {
		t.Fatalf("after prune: %v", set)
	}
	after := len(storedBytes(t, eu, "k"))
	if after >= before {
		t.Fatalf("prune did not shrink the stored set: %d → %d bytes", before, after)
	}
	if err := Prune(ctx, eu, "missing", []string{"old"}); err != nil {
		t.Fatalf("Prune of a missing key: %v", err)
	}
}
