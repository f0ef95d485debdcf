package castest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/occkit/occkit/cas"
)

var basicTests = []test{
	{"GetMissing", func(t *testing.T, h *Harness, s cas.Store) {
		wantAbsent(t, h, s, "missing")
	}},
	{"CreateIfAbsent", func(t *testing.T, h *Harness, s cas.Store) {
		v := mustCreate(t, s, "k", "one")
		wantItem(t, h, s, "k", "one", v)
	}},
	{"CreateExistingConflicts", func(t *testing.T, h *Harness, s cas.Store) {
		v := mustCreate(t, s, "k", "one")
		_, err := s.CompareAndSwap(context.Background(), "k", 0, []byte("two"))
		wantConflict(t, h, err, "k", 0, v, "one")
		wantItem(t, h, s, "k", "one", v)
	}},
	{"SwapIncreasesVersion", func(t *testing.T, h *Harness, s cas.Store) {
		v1 := mustCreate(t, s, "k", "one")
		v2 := mustSwap(t, s, "k", v1, "two")
		v3 := mustSwap(t, s, "k", v2, "three")
		wantItem(t, h, s, "k", "three", v3)
	}},
	{"StaleVersionConflicts", func(t *testing.T, h *Harness, s cas.Store) {
		v1 := mustCreate(t, s, "k", "one")
		v2 := mustSwap(t, s, "k", v1, "two")
		_, err := s.CompareAndSwap(context.Background(), "k", v1, []byte("lost"))
		wantConflict(t, h, err, "k", v1, v2, "two")
		wantItem(t, h, s, "k", "two", v2)
	}},
	{"UnknownVersionConflicts", func(t *testing.T, h *Harness, s cas.Store) {
		v1 := mustCreate(t, s, "k", "one")
		_, err := s.CompareAndSwap(context.Background(), "k", v1+1_000_000, []byte("future"))
		wantConflict(t, h, err, "k", v1+1_000_000, v1, "one")
		wantItem(t, h, s, "k", "one", v1)
	}},
	{"SwapMissingKeyConflicts", func(t *testing.T, h *Harness, s cas.Store) {
		_, err := s.CompareAndSwap(context.Background(), "k", 7, []byte("x"))
		wantConflict(t, h, err, "k", 7, 0, "")
		wantAbsent(t, h, s, "k")
	}},
	{"Delete", func(t *testing.T, h *Harness, s cas.Store) {
		v1 := mustCreate(t, s, "k", "one")
		if err := s.CompareAndDelete(context.Background(), "k", v1); err != nil {
			t.Fatalf("delete: %v", err)
		}
		wantAbsent(t, h, s, "k")
	}},
	{"DeleteStaleConflicts", func(t *testing.T, h *Harness, s cas.Store) {
		v1 := mustCreate(t, s, "k", "one")
		v2 := mustSwap(t, s, "k", v1, "two")
		err := s.CompareAndDelete(context.Background(), "k", v1)
		wantConflict(t, h, err, "k", v1, v2, "two")
		wantItem(t, h, s, "k", "two", v2)
	}},
	{"DeleteMissingConflicts", func(t *testing.T, h *Harness, s cas.Store) {
		err := s.CompareAndDelete(context.Background(), "k", 3)
		wantConflict(t, h, err, "k", 3, 0, "")
	}},
	{"DeleteVersionZeroInvalid", func(t *testing.T, h *Harness, s cas.Store) {
		v := mustCreate(t, s, "k", "one")
		if err := s.CompareAndDelete(context.Background(), "k", 0); !errors.Is(err, cas.ErrInvalidVersion) {
			t.Fatalf("delete at version 0: %v, want ErrInvalidVersion", err)
		}
		wantItem(t, h, s, "k", "one", v)
	}},
	{"NoABAAfterDeleteAndRecreate", func(t *testing.T, h *Harness, s cas.Store) {
		ctx := context.Background()
		v1 := mustCreate(t, s, "k", "one")
		if err := s.CompareAndDelete(ctx, "k", v1); err != nil {
			t.Fatalf("delete: %v", err)
		}
		v2 := mustCreate(t, s, "k", "one")
		if v2 <= v1 {
			t.Fatalf("re-created key got version %d, not above the deleted %d: versions were reused (ABA)", v2, v1)
		}
		_, err := s.CompareAndSwap(ctx, "k", v1, []byte("stale writer"))
		wantConflict(t, h, err, "k", v1, v2, "one")
		err = s.CompareAndDelete(ctx, "k", v1)
		wantConflict(t, h, err, "k", v1, v2, "one")
		wantItem(t, h, s, "k", "one", v2)
	}},
	{"KeysAreIndependent", func(t *testing.T, h *Harness, s cas.Store) {
		a := mustCreate(t, s, "a", "A")
		b := mustCreate(t, s, "b", "B")
		mustSwap(t, s, "a", a, "A2")
		wantItem(t, h, s, "b", "B", b)
		if _, err := s.CompareAndSwap(context.Background(), "b", a, []byte("x")); err == nil && a != b {
			t.Fatalf("write to b with a's version %d succeeded", a)
		}
	}},
	{"EmptyValue", func(t *testing.T, h *Harness, s cas.Store) {
		v := mustCreate(t, s, "k", "")
		it, err := getAt(h, s, "k", v)
		if err != nil || it.Version != v || len(it.Value) != 0 {
			t.Fatalf("get = %+v, %v; want an empty value at version %d", it, err, v)
		}
		v2, err := s.CompareAndSwap(context.Background(), "k", v, nil)
		if err != nil || v2 <= v {
			t.Fatalf("swap to nil value = %d, %v", v2, err)
		}
	}},
	{"BinaryValue", func(t *testing.T, h *Harness, s cas.Store) {
		val := make([]byte, 256)
		for i := range val {
			val[i] = byte(i)
		}
		v, err := s.CompareAndSwap(context.Background(), "k", 0, val)
		if err != nil {
			t.Fatal(err)
		}
		it, err := getAt(h, s, "k", v)
		if err != nil || it.Version != v || !bytes.Equal(it.Value, val) {
			t.Fatalf("get = %s v%d, %v; want all 256 byte values at v%d", describe(it.Value), it.Version, err, v)
		}
	}},
	{"UnicodeKey", func(t *testing.T, h *Harness, s cas.Store) {
		for _, k := range []string{"clé/日本/🙂", "with space", "a/b/c", "UPPER", "%_*?'\"\\"} {
			v := mustCreate(t, s, k, k)
			wantItem(t, h, s, k, k, v)
		}
	}},
	{"SlicesAreNotShared", func(t *testing.T, h *Harness, s cas.Store) {
		val := []byte("original")
		v, err := s.CompareAndSwap(context.Background(), "k", 0, val)
		if err != nil {
			t.Fatal(err)
		}
		copy(val, "CHANGED!")
		it, err := getAt(h, s, "k", v)
		if err != nil {
			t.Fatal(err)
		}
		copy(it.Value, "CHANGED!")
		wantItem(t, h, s, "k", "original", v)
	}},
	{"Typed", func(t *testing.T, h *Harness, s cas.Store) {
		type account struct {
			Owner   string `json:"owner"`
			Balance int64  `json:"balance"`
		}
		ctx := context.Background()
		ts := cas.NewTyped(s, cas.JSON[account]())
		v, err := ts.CompareAndSwap(ctx, "acct", 0, account{"ada", 100})
		if err != nil {
			t.Fatal(err)
		}
		h.settle(t, func() error {
			got, gv, err := ts.Get(ctx, "acct")
			switch {
			case err == nil && gv == v && got == (account{"ada", 100}):
				return nil
			case errors.Is(err, cas.ErrNotFound):
				return fmt.Errorf("typed get: %w", err)
			}
			return wrong("typed get = %+v v%d, %v", got, gv, err)
		})
		if _, _, err := ts.Get(ctx, "none"); !errors.Is(err, cas.ErrNotFound) {
			t.Fatalf("typed get of missing key: %v", err)
		}
		if _, err := s.CompareAndSwap(ctx, "bad", 0, []byte("{not json")); err != nil {
			t.Fatal(err)
		}
		h.settle(t, func() error {
			var ce *cas.CodecError
			_, _, err := ts.Get(ctx, "bad")
			switch {
			case errors.As(err, &ce) && ce.Decode:
				return nil
			case errors.Is(err, cas.ErrNotFound):
				return fmt.Errorf("typed get of invalid JSON: %w, want a decode *cas.CodecError", err)
			}
			return wrong("typed get of invalid JSON: %v, want a decode *cas.CodecError", err)
		})
	}},
}
