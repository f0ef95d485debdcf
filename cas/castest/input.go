package castest

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/occkit/occkit/cas"
)

func badKeys(h *Harness) map[string]string {
	return map[string]string{
		"Empty":       "",
		"InvalidUTF8": "bad\xff\xfekey",
		"NUL":         "a\x00b",
		"TooLong":     strings.Repeat("k", h.Limits.MaxKeyBytes+1),
	}
}

var inputTests = []test{
	{"InvalidKeys", func(t *testing.T, h *Harness, s cas.Store) {
		ctx := context.Background()
		for name, k := range badKeys(h) {
			t.Run(name, func(t *testing.T) {
				if _, err := s.Get(ctx, k); !errors.Is(err, cas.ErrInvalidKey) {
					t.Errorf("get: %v, want ErrInvalidKey", err)
				}
				if _, err := s.CompareAndSwap(ctx, k, 0, []byte("v")); !errors.Is(err, cas.ErrInvalidKey) {
					t.Errorf("compare-and-swap: %v, want ErrInvalidKey", err)
				}
				if err := s.CompareAndDelete(ctx, k, 1); !errors.Is(err, cas.ErrInvalidKey) {
					t.Errorf("compare-and-delete: %v, want ErrInvalidKey", err)
				}
				if f, ok := s.(cas.FencedStore); ok {
					if _, err := f.CompareAndSwapFenced(ctx, k, 0, 1, []byte("v")); !errors.Is(err, cas.ErrInvalidKey) {
						t.Errorf("compare-and-swap-fenced: %v, want ErrInvalidKey", err)
					}
				}
				if c, ok := s.(cas.Committer); ok {
					if _, err := c.Commit(ctx, []cas.Op{cas.Put("fine", 0, nil), cas.Put(k, 0, []byte("v"))}); !errors.Is(err, cas.ErrInvalidKey) {
						t.Errorf("commit: %v, want ErrInvalidKey", err)
					}
					wantAbsent(t, h, s, "fine")
				}
			})
		}
	}},
	{"LongestKey", func(t *testing.T, h *Harness, s cas.Store) {
		k := strings.Repeat("k", h.Limits.MaxKeyBytes)
		v := mustCreate(t, s, k, "v")
		wantItem(t, h, s, k, "v", v)
	}},
	{"ValueTooLarge", func(t *testing.T, h *Harness, s cas.Store) {
		ctx := context.Background()
		big := make([]byte, h.Limits.MaxValueBytes+1)
		if _, err := s.CompareAndSwap(ctx, "k", 0, big); !errors.Is(err, cas.ErrTooLarge) {
			t.Fatalf("create with %d bytes: %v, want ErrTooLarge", len(big), err)
		}
		wantAbsent(t, h, s, "k")
		v := mustCreate(t, s, "k", "small")
		if _, err := s.CompareAndSwap(ctx, "k", v, big); !errors.Is(err, cas.ErrTooLarge) {
			t.Fatalf("swap with %d bytes: %v, want ErrTooLarge", len(big), err)
		}
		if f, ok := s.(cas.FencedStore); ok {
			if _, err := f.CompareAndSwapFenced(ctx, "k", v, 1, big); !errors.Is(err, cas.ErrTooLarge) {
				t.Fatalf("fenced swap with %d bytes: %v, want ErrTooLarge", len(big), err)
			}
		}
		wantItem(t, h, s, "k", "small", v)
	}},
	{"LargestValue", func(t *testing.T, h *Harness, s cas.Store) {
		val := make([]byte, h.Limits.MaxValueBytes)
		for i := range val {
			val[i] = byte(i * 7)
		}
		v, err := s.CompareAndSwap(context.Background(), "k", 0, val)
		if err != nil {
			t.Fatalf("create with %d bytes (the limit): %v", len(val), err)
		}
		it, err := getAt(h, s, "k", v)
		if err != nil || it.Version != v || string(it.Value) != string(val) {
			t.Fatalf("get after largest write: %d bytes v%d, %v", len(it.Value), it.Version, err)
		}
	}},
	{"CancelledContext", func(t *testing.T, h *Harness, s cas.Store) {
		v := mustCreate(t, s, "k", "one")
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		wantRefused(t, ctx, s, v, context.Canceled, "context.Canceled")
		if _, err := s.CompareAndSwap(ctx, "new", 0, []byte("two")); !errors.Is(err, context.Canceled) {
			t.Errorf("create: %v, want context.Canceled", err)
		}
		wantItem(t, h, s, "k", "one", v)
		wantAbsent(t, h, s, "new")
	}},
	{"NilContext", func(t *testing.T, h *Harness, s cas.Store) {
		v := mustCreate(t, s, "k", "one")
		var nilCtx context.Context // a caller's mistake: refused, not a panic
		wantRefused(t, nilCtx, s, v, cas.ErrNilContext, "cas.ErrNilContext")
		wantItem(t, h, s, "k", "one", v)
	}},
	{"ExpiredDeadline", func(t *testing.T, h *Harness, s cas.Store) {
		ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
		defer cancel()
		if _, err := s.CompareAndSwap(ctx, "k", 0, []byte("v")); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("compare-and-swap: %v, want context.DeadlineExceeded", err)
		}
		wantAbsent(t, h, s, "k")
	}},
}

// wantRefused makes every call s offers on "k", whose version is v, with
// ctx, and expects each to fail with want (named wantName in the
// messages): a context that cannot be used refuses every call alike, reads
// as well as writes, single-key as well as capability calls.
func wantRefused(t *testing.T, ctx context.Context, s cas.Store, v cas.Version, want error, wantName string) {
	t.Helper()
	if _, err := s.Get(ctx, "k"); !errors.Is(err, want) {
		t.Errorf("get: %v, want %s", err, wantName)
	}
	if _, err := s.CompareAndSwap(ctx, "k", v, []byte("two")); !errors.Is(err, want) {
		t.Errorf("compare-and-swap: %v, want %s", err, wantName)
	}
	if err := s.CompareAndDelete(ctx, "k", v); !errors.Is(err, want) {
		t.Errorf("compare-and-delete: %v, want %s", err, wantName)
	}
	if f, ok := s.(cas.FencedStore); ok {
		if _, err := f.CompareAndSwapFenced(ctx, "k", v, 1, []byte("two")); !errors.Is(err, want) {
			t.Errorf("compare-and-swap-fenced: %v, want %s", err, wantName)
		}
	}
	if c, ok := s.(cas.Committer); ok {
		if _, err := c.Commit(ctx, []cas.Op{cas.Put("k", v, []byte("two"))}); !errors.Is(err, want) {
			t.Errorf("commit: %v, want %s", err, wantName)
		}
	}
}
