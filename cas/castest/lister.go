package castest

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/occkit/occkit/cas"
)

var listerTests = []test{
	{"KeysWithPrefix", func(t *testing.T, h *Harness, s cas.Store) {
		l := capability[cas.Lister](t, s)
		ctx := context.Background()
		for _, k := range []string{"a/1", "a/2", "ab", "b/1"} {
			mustCreate(t, s, k, "v")
		}
		// Deleted keys are not listed, a fenced one (which may leave a
		// tombstone holding its token) included.
		v := mustCreate(t, s, "a/deleted", "v")
		if err := s.CompareAndDelete(ctx, "a/deleted", v); err != nil {
			t.Fatal(err)
		}
		if f, ok := s.(cas.FencedStore); ok {
			v, err := f.CompareAndSwapFenced(ctx, "a/fenced", 0, 7, []byte("v"))
			if err != nil {
				t.Fatal(err)
			}
			if err := s.CompareAndDelete(ctx, "a/fenced", v); err != nil {
				t.Fatal(err)
			}
		}
		for prefix, want := range map[string][]string{
			"a/":   {"a/1", "a/2"},
			"a":    {"a/1", "a/2", "ab"},
			"":     {"a/1", "a/2", "ab", "b/1"},
			"none": nil,
		} {
			got, err := l.KeysWithPrefix(ctx, prefix)
			if err != nil {
				t.Fatalf("KeysWithPrefix(%q): %v", prefix, err)
			}
			slices.Sort(got)
			if !slices.Equal(got, want) {
				t.Fatalf("KeysWithPrefix(%q) = %q, want %q", prefix, got, want)
			}
		}
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		if _, err := l.KeysWithPrefix(cctx, "a/"); !errors.Is(err, context.Canceled) {
			t.Fatalf("KeysWithPrefix with a cancelled context: %v, want context.Canceled", err)
		}
	}},
}
