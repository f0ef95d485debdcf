package holds

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/occkit/occkit/cas"
)

var errFn = errors.New("fn failed")

func TestNext(t *testing.T) {
	limits := cas.Limits{MaxValueBytes: 4}
	cur := cas.Item{Key: "k", Version: 3, Value: []byte("old")}
	tests := []struct {
		name        string
		fn          func(cas.Item) ([]byte, bool, error)
		wantWrite   bool
		wantErr     error
		wantRelease bool
	}{
		{"Write", func(cas.Item) ([]byte, bool, error) { return []byte("new"), true, nil }, true, nil, false},
		{"NoWrite", func(cas.Item) ([]byte, bool, error) { return nil, false, nil }, false, nil, true},
		{"FnError", func(cas.Item) ([]byte, bool, error) { return []byte("new"), true, errFn }, false, errFn, true},
		{"TooLarge", func(cas.Item) ([]byte, bool, error) { return []byte("too large"), true, nil }, false, cas.ErrTooLarge, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			released := 0
			next, write, err := Next(context.Background(), limits, "k", cur, tc.fn, func() { released++ })
			if write != tc.wantWrite || !errors.Is(err, tc.wantErr) || (tc.wantErr == nil && err != nil) {
				t.Fatalf("Next = %q, %v, %v; want write %v, error %v", next, write, err, tc.wantWrite, tc.wantErr)
			}
			if want := map[bool]int{true: 1}[tc.wantRelease]; released != want {
				t.Fatalf("released %d times, want %d", released, want)
			}
		})
	}
	t.Run("Panic", func(t *testing.T) {
		released := 0
		defer func() {
			if recover() == nil || released != 1 {
				t.Fatalf("released %d times after fn panicked, want once and the panic going on", released)
			}
		}()
		_, _, _ = Next(context.Background(), limits, "k", cur, func(cas.Item) ([]byte, bool, error) { panic("fn") }, func() { released++ })
	})
}

// TestCommit: the holds are taken in key order, fn gets the items in the
// order of keys, and release gets the keys still held on every path out.
func TestCommit(t *testing.T) {
	keys := []string{"c", "a", "b"}
	errTake := errors.New("take failed")
	errCommit := errors.New("commit failed")
	write := func(ks ...string) func([]cas.Item) ([]cas.Op, error) {
		return func([]cas.Item) ([]cas.Op, error) {
			ops := []cas.Op{{Kind: cas.OpCheck, Key: "c"}}
			for _, k := range ks {
				ops = append(ops, cas.Op{Kind: cas.OpPut, Key: k, Value: []byte("v")})
			}
			return ops, nil
		}
	}
	tests := []struct {
		name        string
		failTake    string // the key whose take fails
		fn          func([]cas.Item) ([]cas.Op, error)
		failCommit  bool
		wantErr     error
		wantTaken   []string
		wantRelease []string
	}{
		{"WritesSome", "", write("a"), false, nil, []string{"a", "b", "c"}, []string{"b", "c"}},
		{"WritesAll", "", write("a", "b", "c"), false, nil, []string{"a", "b", "c"}, nil},
		{"NoOps", "", func([]cas.Item) ([]cas.Op, error) { return nil, nil }, false, nil, []string{"a", "b", "c"}, []string{"a", "b", "c"}},
		{"FnError", "", func([]cas.Item) ([]cas.Op, error) { return nil, errFn }, false, errFn, []string{"a", "b", "c"}, []string{"a", "b", "c"}},
		{"CommitFails", "", write("a", "b", "c"), true, errCommit, []string{"a", "b", "c"}, []string{"a", "b", "c"}},
		{"TakeFails", "b", write("a"), false, errTake, []string{"a", "b"}, []string{"a", "b"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var taken, released []string
			take := func(k string) (cas.Item, error) {
				taken = append(taken, k)
				if k == tc.failTake {
					return cas.Item{}, errTake
				}
				return cas.Item{Key: k, Version: 1}, nil
			}
			fn := func(cur []cas.Item) ([]cas.Op, error) {
				for i, it := range cur {
					if it.Key != keys[i] {
						t.Errorf("fn's item %d is %q, want %q (the order of keys)", i, it.Key, keys[i])
					}
				}
				return tc.fn(cur)
			}
			commit := func(ops []cas.Op, cur map[string]cas.Item) ([]cas.Version, error) {
				if len(cur) != len(keys) {
					t.Errorf("commit got %d items, want %d", len(cur), len(keys))
				}
				if tc.failCommit {
					return nil, errCommit
				}
				return make([]cas.Version, len(ops)), nil
			}
			_, err := Commit(keys, take, fn, commit, func(left []string) { released = append(released, left...) })
			if !errors.Is(err, tc.wantErr) || (tc.wantErr == nil && err != nil) {
				t.Fatalf("Commit: %v, want %v", err, tc.wantErr)
			}
			if !slices.Equal(taken, tc.wantTaken) || !slices.Equal(released, tc.wantRelease) {
				t.Fatalf("took %q and released %q, want %q and %q", taken, released, tc.wantTaken, tc.wantRelease)
			}
		})
	}
	t.Run("Panic", func(t *testing.T) {
		var released []string
		defer func() {
			if recover() == nil || !slices.Equal(released, []string{"a", "b", "c"}) {
				t.Fatalf("released %q after fn panicked, want every key and the panic going on", released)
			}
		}()
		_, _ = Commit(keys, func(k string) (cas.Item, error) { return cas.Item{Key: k}, nil },
			func([]cas.Item) ([]cas.Op, error) { panic("fn") },
			func([]cas.Op, map[string]cas.Item) ([]cas.Version, error) { return nil, nil },
			func(left []string) { released = append(released, left...) })
	})
}
