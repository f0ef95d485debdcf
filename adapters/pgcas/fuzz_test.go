package pgcas

import (
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/internal/rowupdate"
)

// The pure validators (table, schema and column names; versions and
// fencing tokens as bigints) are fuzzed: they need no server. Run one with
//
//	go test -run '^$' -fuzz '^FuzzQuoteTable$' -fuzztime 20s ./adapters/pgcas/

// unquote parses a possibly schema-qualified, quoted identifier as
// PostgreSQL does, or reports that it is not one (which would let a name
// escape its quotes).
func unquote(s string) ([]string, bool) {
	var parts []string
	for {
		if !strings.HasPrefix(s, `"`) {
			return nil, false
		}
		s = s[1:]
		var b strings.Builder
		for {
			i := strings.IndexByte(s, '"')
			if i < 0 {
				return nil, false
			}
			b.WriteString(s[:i])
			s = s[i+1:]
			if !strings.HasPrefix(s, `"`) {
				break
			}
			b.WriteByte('"')
			s = s[1:]
		}
		parts = append(parts, b.String())
		if s == "" {
			return parts, true
		}
		if s[0] != '.' {
			return nil, false
		}
		s = s[1:]
	}
}

// FuzzQuoteTable checks that any schema and table name is refused when
// PostgreSQL would change it (empty, over 63 bytes, NUL) and otherwise
// quoted into exactly one identifier per part that reads back as the name:
// no name can inject SQL.
func FuzzQuoteTable(f *testing.F) {
	f.Add("", "", "occkit_kv")
	f.Add("public", "kv", "d")
	f.Add("", `kv"; DROP TABLE users; --`, "d")
	f.Add(`a"."b`, `"`, "d")
	f.Add("s", "a\x00b", "d")
	f.Add("", strings.Repeat("x", 64), "d")
	f.Add(strings.Repeat("é", 32), "t", "d")
	f.Add("", "", "")
	f.Add("s.t", "t.u", "d")
	f.Fuzz(func(t *testing.T, schema, table, def string) {
		q, err := quoteTable(schema, table, def)
		name := table
		if name == "" {
			name = def
		}
		want := []string{name}
		if schema != "" {
			want = []string{schema, name}
		}
		valid := true
		for _, p := range want {
			valid = valid && p != "" && len(p) <= 63 && !strings.ContainsRune(p, 0)
			if cerr := checkIdentifier(p); (cerr == nil) != (p != "" && len(p) <= 63 && !strings.ContainsRune(p, 0)) {
				t.Fatalf("checkIdentifier(%q) = %v", p, cerr)
			}
		}
		if !valid {
			if err == nil || q != "" {
				t.Fatalf("quoteTable(%q, %q, %q) = %q, %v, want an error", schema, table, def, q, err)
			}
			return
		}
		if err != nil {
			t.Fatalf("quoteTable(%q, %q, %q) = %v", schema, table, def, err)
		}
		got, ok := unquote(q)
		if !ok || !reflect.DeepEqual(got, want) {
			t.Fatalf("quoteTable(%q, %q, %q) = %s, which reads as %q (%v)", schema, table, def, q, got, ok)
		}
	})
}

// FuzzVersionAndToken checks the mapping of versions and fencing tokens to
// bigint columns: a version no bigint holds becomes -1 (no row has a
// negative version), a token no bigint holds is refused with a
// *cas.KeyError matching cas.ErrTooLarge, and a row's integer version
// field never turns negative into a huge version.
func FuzzVersionAndToken(f *testing.F) {
	f.Add(uint64(0), uint64(0), int64(0))
	f.Add(uint64(math.MaxInt64), uint64(math.MaxInt64), int64(math.MaxInt64))
	f.Add(uint64(1<<63), uint64(1<<63), int64(-1))
	f.Add(uint64(1<<64-1), uint64(1<<64-1), int64(math.MinInt64))
	f.Fuzz(func(t *testing.T, v, token uint64, rowInt int64) {
		pv := pgVersion(cas.Version(v))
		if v <= math.MaxInt64 && pv != int64(v) || v > math.MaxInt64 && pv != -1 {
			t.Fatalf("pgVersion(%d) = %d", v, pv)
		}
		err := checkToken("k", token)
		if token <= math.MaxInt64 {
			if err != nil {
				t.Fatalf("checkToken(%d) = %v", token, err)
			}
		} else {
			var ke *cas.KeyError
			if !errors.As(err, &ke) || ke.Key != "k" || !errors.Is(err, cas.ErrTooLarge) {
				t.Fatalf("checkToken(%d) = %v (%T)", token, err, err)
			}
		}
		if got := rowupdate.ToVersion(reflect.ValueOf(rowInt)); got != cas.Version(max(rowInt, 0)) {
			t.Fatalf("rowupdate.ToVersion(%d) = %d", rowInt, got)
		}
		if got := rowupdate.ToVersion(reflect.ValueOf(int32(rowInt))); got != cas.Version(max(int32(rowInt), 0)) {
			t.Fatalf("rowupdate.ToVersion(int32 %d) = %d", int32(rowInt), got)
		}
		if got := rowupdate.ToVersion(reflect.ValueOf(v)); got != cas.Version(v) {
			t.Fatalf("rowupdate.ToVersion(uint64 %d) = %d", v, got)
		}
		if got := rowupdate.ToVersion(reflect.ValueOf("1")); got != 0 {
			t.Fatalf("rowupdate.ToVersion(string) = %d", got)
		}
	})
}
