package castest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/occkit/occkit/cas"
)

// wantGetMany checks GetMany's answer for keys against what Get says of
// each key. With StaleReads, where either may read an older state, both
// are read again until they agree.
func wantGetMany(t *testing.T, h *Harness, s cas.Store, b cas.BatchGetter, keys []string) {
	t.Helper()
	h.settle(t, func() error {
		got, err := b.GetMany(context.Background(), keys)
		switch {
		case err != nil:
			return wrong("GetMany(%q): %w", keys, err)
		case len(got) != len(keys):
			return wrong("GetMany(%q) returned %d items", keys, len(got))
		}
		for i, k := range keys {
			want, err := s.Get(context.Background(), k)
			switch {
			case errors.Is(err, cas.ErrNotFound):
				want = cas.Item{Key: k}
			case err != nil:
				return wrong("get %q: %w", k, err)
			}
			g := got[i]
			switch {
			case g.Key != k:
				return wrong("GetMany item %d = %+v, for key %q", i, g, k)
			case g.Version != want.Version:
				return fmt.Errorf("GetMany item %d = %+v, want %+v (as Get reads it)", i, g, want)
			case string(g.Value) != string(want.Value) || (want.Version == 0) != (g.Value == nil):
				return wrong("GetMany item %d = %+v, want %+v (as Get reads it)", i, g, want)
			}
		}
		return nil
	})
}

var getManyTests = []test{
	{"LikeGet", func(t *testing.T, h *Harness, s cas.Store) {
		b := capability[cas.BatchGetter](t, s)
		ctx := context.Background()
		mustCreate(t, s, "a", "one")
		vb := mustCreate(t, s, "b", "two")
		mustSwap(t, s, "b", vb, "")
		vd := mustCreate(t, s, "deleted", "x")
		if err := s.CompareAndDelete(ctx, "deleted", vd); err != nil {
			t.Fatal(err)
		}
		// Out of key order, with absent and deleted keys among them.
		keys := []string{"missing", "b", "deleted", "a"}
		wantGetMany(t, h, s, b, keys)
		if got, err := b.GetMany(ctx, nil); err != nil || len(got) != 0 {
			t.Fatalf("GetMany of no keys = %v, %v; want nothing", got, err)
		}
	}},
	{"ManyKeys", func(t *testing.T, h *Harness, s cas.Store) {
		b := capability[cas.BatchGetter](t, s)
		n := min(h.Limits.MaxCommitOps, 100)
		keys := make([]string, n)
		for i := range keys {
			keys[i] = fmt.Sprintf("k%03d", n-i)
			if i%3 != 0 {
				mustCreate(t, s, keys[i], keys[i])
			}
		}
		wantGetMany(t, h, s, b, keys)
	}},
	{"BadInput", func(t *testing.T, h *Harness, s cas.Store) {
		b := capability[cas.BatchGetter](t, s)
		ctx := context.Background()
		for _, keys := range [][]string{{"a", ""}, {"a", "a"}, {"a", "x\x00y"}} {
			if _, err := b.GetMany(ctx, keys); !errors.Is(err, cas.ErrInvalidKey) {
				t.Errorf("GetMany(%q): %v, want an error matching cas.ErrInvalidKey", keys, err)
			}
		}
		tooMany := make([]string, h.Limits.MaxCommitOps+1)
		for i := range tooMany {
			tooMany[i] = fmt.Sprint("k", i)
		}
		if _, err := b.GetMany(ctx, tooMany); !errors.Is(err, cas.ErrTooLarge) {
			t.Errorf("GetMany of %d keys (limit %d): %v, want cas.ErrTooLarge", len(tooMany), h.Limits.MaxCommitOps, err)
		}
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		if _, err := b.GetMany(cctx, []string{"a"}); !errors.Is(err, context.Canceled) {
			t.Errorf("GetMany with a cancelled context: %v", err)
		}
		//lint:ignore SA1012 a nil context is the input under test
		if _, err := b.GetMany(nil, []string{"a"}); !errors.Is(err, cas.ErrNilContext) { //nolint:staticcheck
			t.Errorf("GetMany with a nil context: %v, want cas.ErrNilContext", err)
		}
	}},
	// Each item is a state its key had: read while writers advance two
	// keys, every item's value is the value written at its version, never
	// a value paired with another write's version.
	{"ConsistentItems", func(t *testing.T, h *Harness, s cas.Store) {
		b := capability[cas.BatchGetter](t, s)
		ctx := context.Background()
		keys := []string{"x", "y"}
		var mu sync.Mutex
		written := map[keyVersion]string{} // the value written at each version
		created := map[string]cas.Version{}
		for _, k := range keys {
			created[k] = mustCreate(t, s, k, "0")
			written[keyVersion{k, created[k]}] = "0"
		}
		var wg sync.WaitGroup
		stop := make(chan struct{})
		for _, k := range keys {
			it := cas.Item{Key: k, Version: created[k]}
			wg.Go(func() {
				for n := 1; ; n++ {
					select {
					case <-stop:
						return
					default:
					}
					val := fmt.Sprint(n)
					v, err := s.CompareAndSwap(ctx, k, it.Version, []byte(val))
					if err != nil {
						t.Errorf("writer of %q: %v", k, err)
						return
					}
					mu.Lock()
					written[keyVersion{k, v}] = val
					mu.Unlock()
					it.Version = v
				}
			})
		}
		var seen [][]cas.Item
		for range 50 {
			got, err := b.GetMany(ctx, keys)
			if err != nil {
				close(stop)
				wg.Wait()
				t.Fatalf("GetMany: %v", err)
			}
			seen = append(seen, got)
		}
		close(stop)
		wg.Wait()
		for _, got := range seen {
			for _, it := range got {
				if h.StaleReads && it.Version == 0 && it.Value == nil {
					continue // read from before the key was made
				}
				if want, ok := written[keyVersion{it.Key, it.Version}]; !ok || want != string(it.Value) {
					t.Fatalf("item %+v: the value written at that version was %q (known: %v)", it, want, ok)
				}
			}
		}
	}},
}

// keyVersion names one state of a key.
type keyVersion struct {
	key     string
	version cas.Version
}
