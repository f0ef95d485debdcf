package cas_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/occkit/occkit/adapters/memcas"
	"github.com/occkit/occkit/cas"
)

func TestCheckKey(t *testing.T) {
	l := cas.Limits{MaxKeyBytes: 8}
	tests := []struct {
		key  string
		ok   bool
		want string
	}{
		{"k", true, ""},
		{"12345678", true, ""},
		{"日本", true, ""},
		{"", false, "empty"},
		{"123456789", false, "9 bytes, limit 8"},
		{"a\xffb", false, "not valid UTF-8"},
		{"a\x00b", false, "NUL"},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("%q", tc.key), func(t *testing.T) {
			err := l.CheckKey("get", tc.key)
			if tc.ok {
				if err != nil {
					t.Fatalf("CheckKey(%q) = %v, want nil", tc.key, err)
				}
				return
			}
			if !errors.Is(err, cas.ErrInvalidKey) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("CheckKey(%q) = %v, want ErrInvalidKey saying %q", tc.key, err, tc.want)
			}
			var ke *cas.KeyError
			if !errors.As(err, &ke) || ke.Op != "get" || ke.Key != tc.key {
				t.Fatalf("CheckKey(%q) = %#v, want a *KeyError naming op and key", tc.key, err)
			}
		})
	}
}

func TestLimitsDefaults(t *testing.T) {
	l := cas.Limits{}.WithDefaults()
	if l.MaxKeyBytes != cas.DefaultMaxKeyBytes || l.MaxValueBytes != cas.DefaultMaxValueBytes || l.MaxCommitOps != cas.DefaultMaxCommitOps {
		t.Fatalf("defaults = %+v", l)
	}
	if err := (cas.Limits{}).CheckValue("put", "k", make([]byte, cas.DefaultMaxValueBytes+1)); !errors.Is(err, cas.ErrTooLarge) {
		t.Fatalf("CheckValue over the default limit = %v", err)
	}
	ops := []cas.Op{cas.Put("a", 0, make([]byte, 6)), cas.Put("b", 0, make([]byte, 6))}
	if err := (cas.Limits{MaxCommitBytes: 12}).Commit(context.Background(), ops); !errors.Is(err, cas.ErrTooLarge) {
		t.Fatalf("commit of 14 bytes with a 12-byte limit = %v", err)
	}
	if err := (cas.Limits{MaxCommitBytes: 14}).Commit(context.Background(), ops); err != nil {
		t.Fatalf("commit of 14 bytes with a 14-byte limit = %v", err)
	}
}

func TestConflictError(t *testing.T) {
	native := errors.New("native")
	tests := []struct {
		name         string
		err          *cas.ConflictError
		notFound     bool
		wantInString string
	}{
		{"NoCurrent", &cas.ConflictError{Key: "k", Expected: 3}, false, `key "k": expected version 3`},
		{"Current", &cas.ConflictError{Key: "k", Expected: 3, Current: cas.Item{Key: "k", Version: 5}, HasCurrent: true}, false, "current version 5"},
		{"Absent", &cas.ConflictError{Key: "k", Expected: 3, HasCurrent: true}, true, "key does not exist"},
		{"Native", &cas.ConflictError{Key: "k", Expected: 3, Err: native}, false, ": native"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var err error = fmt.Errorf("wrapped: %w", tc.err)
			if !errors.Is(err, cas.ErrConflict) {
				t.Error("does not match ErrConflict")
			}
			if got := errors.Is(err, cas.ErrNotFound); got != tc.notFound {
				t.Errorf("errors.Is(ErrNotFound) = %v", got)
			}
			if errors.Is(err, cas.ErrFenced) || errors.Is(err, cas.ErrAmbiguous) {
				t.Error("matches an unrelated sentinel")
			}
			if got := errors.Is(err, native); got != (tc.err.Err != nil) {
				t.Errorf("errors.Is(native) = %v", got)
			}
			if !strings.Contains(err.Error(), tc.wantInString) {
				t.Errorf("Error() = %q, want it to contain %q", err.Error(), tc.wantInString)
			}
		})
	}
}

func TestFencedError(t *testing.T) {
	err := fmt.Errorf("w: %w", &cas.FencedError{Key: "k", Token: 3, Highest: 7})
	if !errors.Is(err, cas.ErrFenced) || errors.Is(err, cas.ErrConflict) {
		t.Fatalf("FencedError matching is wrong: %v", err)
	}
	if !strings.Contains(err.Error(), "token 3") || !strings.Contains(err.Error(), "token 7") {
		t.Fatalf("Error() = %q", err)
	}
}

type plainStore struct{ cas.Store }

func TestCapabilities(t *testing.T) {
	s := memcas.New()
	if _, err := cas.AsFenced(s); err != nil {
		t.Fatal(err)
	}
	if _, err := cas.AsCommitter(s); err != nil {
		t.Fatal(err)
	}
	p := plainStore{s}
	if _, err := cas.AsFenced(p); !errors.Is(err, errors.ErrUnsupported) || !strings.Contains(err.Error(), "plainStore") {
		t.Fatalf("AsFenced(plain) = %v", err)
	}
	if _, err := cas.AsCommitter(p); !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("AsCommitter(plain) = %v", err)
	}
}

func TestTypedEncodeError(t *testing.T) {
	ts := cas.NewTyped(memcas.New(), cas.JSON[func()]())
	_, err := ts.CompareAndSwap(context.Background(), "k", 0, func() {})
	var ce *cas.CodecError
	if !errors.As(err, &ce) || ce.Decode || ce.Key != "k" {
		t.Fatalf("encoding a func: %v, want an encode *CodecError", err)
	}
	if _, err := ts.Store().Get(context.Background(), "k"); !errors.Is(err, cas.ErrNotFound) {
		t.Fatalf("a failed encode wrote something: %v", err)
	}
}

func TestBytesCodec(t *testing.T) {
	ctx := context.Background()
	ts := cas.NewTyped(memcas.New(), cas.Bytes())
	v, err := ts.CompareAndSwap(ctx, "k", 0, []byte("raw"))
	if err != nil {
		t.Fatal(err)
	}
	got, gv, err := ts.Get(ctx, "k")
	if err != nil || gv != v || string(got) != "raw" {
		t.Fatalf("Get = %q v%d, %v", got, gv, err)
	}
}

// FuzzCheckKey checks that key validation accepts exactly the keys the
// contract allows and never panics.
func FuzzCheckKey(f *testing.F) {
	for _, s := range []string{"", "k", "a\x00", "\xff", "日本", strings.Repeat("x", 1025)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, key string) {
		err := cas.Limits{}.CheckKey("get", key)
		valid := key != "" && len(key) <= cas.DefaultMaxKeyBytes && utf8.ValidString(key) && !strings.ContainsRune(key, 0)
		if valid != (err == nil) {
			t.Fatalf("CheckKey(%q) = %v, valid = %v", key, err, valid)
		}
		if err != nil && !errors.Is(err, cas.ErrInvalidKey) {
			t.Fatalf("CheckKey(%q) = %v, not ErrInvalidKey", key, err)
		}
	})
}

func TestAmbiguousError(t *testing.T) {
	native := errors.New("connection reset")
	err := fmt.Errorf("w: %w", &cas.AmbiguousError{Op: "compare-and-swap", Key: "k", WriteID: "abc", Err: native})
	if !errors.Is(err, cas.ErrAmbiguous) || !errors.Is(err, native) || errors.Is(err, cas.ErrConflict) {
		t.Fatalf("AmbiguousError matching is wrong: %v", err)
	}
	if !strings.Contains(err.Error(), "write id abc") {
		t.Fatalf("Error() = %q", err)
	}
}

func TestLimitsOrWithin(t *testing.T) {
	d := cas.Limits{MaxKeyBytes: 10, MaxValueBytes: 20, MaxCommitOps: 3, MaxCommitBytes: 40}
	if got := (cas.Limits{MaxValueBytes: 5}).Or(d); got != (cas.Limits{MaxKeyBytes: 10, MaxValueBytes: 5, MaxCommitOps: 3, MaxCommitBytes: 40}) {
		t.Fatalf("Or = %+v", got)
	}
	tests := []struct {
		l    cas.Limits
		want string // "" for no error, else the field the error names
	}{
		{cas.Limits{}, ""},
		{d, ""},
		{cas.Limits{MaxKeyBytes: 11}, "MaxKeyBytes"},
		{cas.Limits{MaxValueBytes: 21}, "MaxValueBytes"},
		{cas.Limits{MaxCommitOps: 4}, "MaxCommitOps"},
		{cas.Limits{MaxCommitBytes: 41}, "MaxCommitBytes"},
		{cas.Limits{MaxCommitOps: -1}, "MaxCommitOps"},
	}
	for _, tc := range tests {
		err := tc.l.Within(d)
		if (err == nil) != (tc.want == "") || (err != nil && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%+v.Within(%+v) = %v, want an error naming %q", tc.l, d, err, tc.want)
		}
	}
	// A zero field of the maximums means none.
	if err := (cas.Limits{MaxValueBytes: 1 << 40}).Within(cas.Limits{MaxKeyBytes: 1}); err != nil {
		t.Errorf("no value maximum: %v", err)
	}
}
