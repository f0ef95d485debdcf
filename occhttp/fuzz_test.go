package occhttp_test

import (
	"errors"
	"net/http/httptest"
	"testing"

	"github.com/occkit/occkit/occhttp"
)

// FuzzParseETag: ParseETag never panics, accepts exactly the tags ETag
// makes, and fails otherwise with ErrBadPrecondition.
func FuzzParseETag(f *testing.F) {
	for _, s := range []string{`"1"`, `"18446744073709551615"`, `W/"1"`, `"0"`, `"01"`, `""`, `"`, `*`, `"a"`, "\"1\x00\""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, err := occhttp.ParseETag(s)
		if err != nil {
			if !errors.Is(err, occhttp.ErrBadPrecondition) {
				t.Fatalf("ParseETag(%q): %v does not match ErrBadPrecondition", s, err)
			}
			return
		}
		if occhttp.ETag(v) != s {
			t.Fatalf("ParseETag(%q) = %d, whose tag is %q", s, v, occhttp.ETag(v))
		}
	})
}

// FuzzReadPrecondition: any If-Match / If-None-Match value is either
// refused with ErrBadPrecondition or read into a precondition whose
// versions are all real (non-zero) versions.
func FuzzReadPrecondition(f *testing.F) {
	for _, s := range []string{`"1"`, `"1", "2"`, `*`, `W/"1", "x,y"`, ` , `, `"1`, `*, "1"`, `"1" "2"`} {
		f.Add(s, true)
		f.Add(s, false)
	}
	f.Fuzz(func(t *testing.T, value string, match bool) {
		r := httptest.NewRequest("PUT", "/", nil)
		name := "If-None-Match"
		if match {
			name = "If-Match"
		}
		r.Header.Set(name, value)
		p, err := occhttp.ReadPrecondition(r)
		if err != nil {
			if !errors.Is(err, occhttp.ErrBadPrecondition) {
				t.Fatalf("%s: %q: %v does not match ErrBadPrecondition", name, value, err)
			}
			return
		}
		for _, v := range p.Versions {
			if v == 0 {
				t.Fatalf("%s: %q: read version 0", name, value)
			}
		}
		if !match && p.Kind != occhttp.CreateOnly {
			t.Fatalf("If-None-Match: %q read as %v", value, p)
		}
	})
}
