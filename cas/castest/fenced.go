package castest

import (
	"context"
	"errors"
	"testing"

	"github.com/occkit/occkit/cas"
)

func fencedSwap(t *testing.T, f cas.FencedStore, k string, expected cas.Version, token uint64, v string) cas.Version {
	t.Helper()
	ver, err := f.CompareAndSwapFenced(context.Background(), k, expected, token, []byte(v))
	if err != nil {
		t.Fatalf("fenced swap %q at v%d with token %d: %v", k, expected, token, err)
	}
	if ver <= expected {
		t.Fatalf("fenced swap %q returned version %d, want > %d", k, ver, expected)
	}
	return ver
}

func wantFenced(t *testing.T, err error, k string, token uint64) {
	t.Helper()
	if !errors.Is(err, cas.ErrFenced) {
		t.Fatalf("write with stale token %d: %v, want ErrFenced", token, err)
	}
	if errors.Is(err, cas.ErrConflict) {
		t.Fatalf("a fenced-off write must not look like a retryable conflict: %v", err)
	}
	var fe *cas.FencedError
	if !errors.As(err, &fe) || fe.Key != k || fe.Token != token {
		t.Fatalf("err = %#v, want a *cas.FencedError for key %q token %d", err, k, token)
	}
}

var fencedTests = []test{
	{"StaleTokenRejected", func(t *testing.T, h *Harness, s cas.Store) {
		f := capability[cas.FencedStore](t, s)
		ctx := context.Background()
		v1 := fencedSwap(t, f, "k", 0, 5, "by 5")
		_, err := f.CompareAndSwapFenced(ctx, "k", v1, 3, []byte("by 3"))
		wantFenced(t, err, "k", 3)
		wantItem(t, h, s, "k", "by 5", v1)
		v2 := fencedSwap(t, f, "k", v1, 5, "by 5 again")
		v3 := fencedSwap(t, f, "k", v2, 7, "by 7")
		_, err = f.CompareAndSwapFenced(ctx, "k", v3, 5, []byte("by 5, late"))
		wantFenced(t, err, "k", 5)
		wantItem(t, h, s, "k", "by 7", v3)
	}},
	{"StaleTokenBeatsVersion", func(t *testing.T, h *Harness, s cas.Store) {
		f := capability[cas.FencedStore](t, s)
		v1 := fencedSwap(t, f, "k", 0, 9, "by 9")
		// Both the token and the version are wrong: the writer must learn it
		// was fenced off, not that it should retry.
		_, err := f.CompareAndSwapFenced(context.Background(), "k", v1+1000, 2, []byte("x"))
		wantFenced(t, err, "k", 2)
		wantItem(t, h, s, "k", "by 9", v1)
	}},
	{"VersionStillChecked", func(t *testing.T, h *Harness, s cas.Store) {
		f := capability[cas.FencedStore](t, s)
		v1 := fencedSwap(t, f, "k", 0, 1, "one")
		v2 := fencedSwap(t, f, "k", v1, 2, "two")
		_, err := f.CompareAndSwapFenced(context.Background(), "k", v1, 3, []byte("three"))
		wantConflict(t, h, err, "k", v1, v2, "two")
		wantItem(t, h, s, "k", "two", v2)
	}},
	{"PlainWriteKeepsFence", func(t *testing.T, h *Harness, s cas.Store) {
		f := capability[cas.FencedStore](t, s)
		v1 := fencedSwap(t, f, "k", 0, 8, "by 8")
		v2 := mustSwap(t, s, "k", v1, "plain")
		_, err := f.CompareAndSwapFenced(context.Background(), "k", v2, 4, []byte("by 4"))
		wantFenced(t, err, "k", 4)
		wantItem(t, h, s, "k", "plain", v2)
	}},
	{"FenceSurvivesDelete", func(t *testing.T, h *Harness, s cas.Store) {
		f := capability[cas.FencedStore](t, s)
		ctx := context.Background()
		v1 := fencedSwap(t, f, "k", 0, 8, "by 8")
		if err := s.CompareAndDelete(ctx, "k", v1); err != nil {
			t.Fatal(err)
		}
		_, err := f.CompareAndSwapFenced(ctx, "k", 0, 4, []byte("by 4"))
		wantFenced(t, err, "k", 4)
		wantAbsent(t, h, s, "k")
		v2 := fencedSwap(t, f, "k", 0, 8, "by 8 again")
		if v2 <= v1 {
			t.Fatalf("re-created fenced key got version %d after %d", v2, v1)
		}
	}},
	{"TokensArePerKey", func(t *testing.T, h *Harness, s cas.Store) {
		f := capability[cas.FencedStore](t, s)
		fencedSwap(t, f, "a", 0, 100, "a")
		fencedSwap(t, f, "b", 0, 1, "b")
	}},
}
