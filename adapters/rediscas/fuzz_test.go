package rediscas

import (
	"cmp"
	"encoding/binary"
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/internal/writeid"
)

// The decoders of what Redis hands back (script replies, a key's history,
// versions and fencing tokens as strings) are fuzzed: they need no server.
// Run one with
//
//	go test -run '^$' -fuzz '^FuzzParseReply$' -fuzztime 20s ./adapters/rediscas/

// notASentinel checks that a garbled answer is not mistaken for one of the
// outcomes callers act on.
func notASentinel(t *testing.T, err error) {
	t.Helper()
	for _, s := range []error{cas.ErrConflict, cas.ErrNotFound, cas.ErrAmbiguous, cas.ErrFenced} {
		if errors.Is(err, s) {
			t.Fatalf("error for a malformed reply %v matches %v", err, s)
		}
	}
}

// FuzzParseReply checks parseReply on replies of every shape go-redis can
// return for a script: it never panics, refuses anything but a non-empty
// array of strings, turns "okraw" with one 8-byte field into "ok" with the
// version in decimal, and otherwise keeps the status and fields as sent.
func FuzzParseReply(f *testing.F) {
	f.Add("ok", "12", "", uint8(1), uint8(0))
	f.Add("conflict", "3", "value", uint8(2), uint8(0))
	f.Add("okraw", "\x00\x00\x00\x00\x00\x00\x01\x00", "", uint8(1), uint8(0))
	f.Add("okraw", "\xff\xff\xff\xff\xff\xff\xff\xff", "", uint8(1), uint8(0))
	f.Add("okraw", "short", "", uint8(1), uint8(0))
	f.Add("okraw", "12345678", "x", uint8(2), uint8(0))
	f.Add("okraw", "", "", uint8(0), uint8(0))
	f.Add("fenced", "00000000000000000009", "", uint8(1), uint8(0))
	f.Add("", "", "", uint8(0), uint8(1))
	f.Add("ok", "", "", uint8(3), uint8(2))
	f.Add("ok", "", "", uint8(3), uint8(3))
	f.Add("ok", "", "", uint8(3), uint8(4))
	f.Add("ok", "", "", uint8(3), uint8(5))
	f.Fuzz(func(t *testing.T, status, a, b string, n, shape uint8) {
		fields := make([]string, n%8)
		for i := range fields {
			fields[i] = a
			if i%2 == 1 {
				fields[i] = b
			}
		}
		arr := []any{status}
		for _, s := range fields {
			arr = append(arr, s)
		}
		var v any = arr
		ok := true
		switch shape % 8 {
		case 1:
			v, ok = []any{}, false
		case 2:
			v, ok = status, false // a bare string
		case 3:
			v, ok = int64(len(status)), false // an integer reply
		case 4:
			v, ok = append(arr, int64(1)), false // a non-string element
		case 5:
			v, ok = nil, false
		case 6:
			v, ok = append([]any{[]any{status}}, fields), false // nested arrays
		}
		r, err := parseReply(v)
		if !ok {
			if err == nil {
				t.Fatalf("parseReply(%#v) = %+v, want an error", v, r)
			}
			notASentinel(t, err)
			return
		}
		if status == "okraw" {
			if len(fields) != 1 || len(fields[0]) != 8 {
				if err == nil {
					t.Fatalf("parseReply(%q) = %+v, want an error", arr, r)
				}
				notASentinel(t, err)
				return
			}
			want := binary.BigEndian.Uint64([]byte(fields[0]))
			got, perr := parseVersion(r.field(0))
			if err != nil || r.status != "ok" || len(r.fields) != 1 || perr != nil || got != want {
				t.Fatalf("parseReply(%q) = %+v, %v; version %d, %v, want %d", arr, r, err, got, perr, want)
			}
			return
		}
		if err != nil || r.status != status || !slices.Equal(r.fields, fields) {
			t.Fatalf("parseReply(%q) = %+v, %v", arr, r, err)
		}
		for i := range len(fields) + 2 {
			want := ""
			if i < len(fields) {
				want = fields[i]
			}
			if r.field(i) != want {
				t.Fatalf("field(%d) = %q, want %q", i, r.field(i), want)
			}
		}
	})
}

// FuzzParseHistory checks that any history string splits into whole
// 24-byte entries, newest first, that re-encode to the string (a partial
// tail is ignored), so resolving a lost answer never misreads an entry.
func FuzzParseHistory(f *testing.F) {
	ids := writeid.NewSource()
	f.Add(historyEntry(ids.Next(), 0) + historyEntry(ids.Next(), 1<<64-1))
	f.Add(historyEntry(ids.Next(), 7)[:23])
	f.Add("")
	f.Add(strings.Repeat("\x00", 49))
	f.Fuzz(func(t *testing.T, hist string) {
		es := parseHistory(hist)
		if len(es) != len(hist)/historyEntryLen {
			t.Fatalf("parseHistory(%x) has %d entries, want %d", hist, len(es), len(hist)/historyEntryLen)
		}
		var b strings.Builder
		for _, e := range es {
			b.WriteString(historyEntry(e.id, e.replaced))
		}
		if got := b.String(); got != hist[:len(es)*historyEntryLen] {
			t.Fatalf("parseHistory(%x) re-encodes to %x", hist, got)
		}
	})
}

// FuzzVersionAndToken checks versions and fencing tokens as the scripts
// store them: parseVersion accepts exactly the decimal uint64s and inverts
// formatVersion; encodeToken is 20 digits whose string order (what the
// scripts compare) is the numeric order; a conflict reply's version either
// parses or fails without being taken for a conflict.
func FuzzVersionAndToken(f *testing.F) {
	f.Add("1", uint64(1), uint64(2))
	f.Add("18446744073709551615", uint64(1<<64-1), uint64(0))
	f.Add("18446744073709551616", uint64(99999999999999999), uint64(100000000000000000))
	f.Add("-1", uint64(0), uint64(0))
	f.Add("+1", uint64(10), uint64(9))
	f.Add("", uint64(0), uint64(1))
	f.Add("0x10", uint64(0), uint64(1))
	f.Add(" 1", uint64(0), uint64(1))
	f.Fuzz(func(t *testing.T, s string, a, b uint64) {
		v, err := parseVersion(s)
		want, werr := strconv.ParseUint(s, 10, 64)
		if (err == nil) != (werr == nil) || (err == nil && v != want) || (err != nil && v != 0) {
			t.Fatalf("parseVersion(%q) = %d, %v", s, v, err)
		}
		if err == nil && formatVersion(cas.Version(v)) != strings.TrimLeft(s, "0") && s != strings.Repeat("0", len(s)) {
			t.Fatalf("parseVersion(%q) = %d, which formats as %q", s, v, formatVersion(cas.Version(v)))
		}
		if got, err := parseVersion(formatVersion(cas.Version(a))); err != nil || got != a {
			t.Fatalf("version %d round-trips to %d, %v", a, got, err)
		}

		cerr := conflict("k", 3, []string{s, "value"})
		var ce *cas.ConflictError
		if err != nil {
			if errors.As(cerr, &ce) || cerr == nil {
				t.Fatalf("conflict with version %q = %v, want a parse error", s, cerr)
			}
			notASentinel(t, cerr)
		} else if !errors.As(cerr, &ce) || !ce.HasCurrent || ce.Current.Version != cas.Version(v) ||
			string(ce.Current.Value) != "value" || ce.Expected != 3 || !errors.Is(cerr, cas.ErrConflict) {
			t.Fatalf("conflict with version %q = %#v", s, cerr)
		}
		if cerr := conflict("k", 3, []string{s}); !errors.As(cerr, &ce) || !errors.Is(cerr, cas.ErrNotFound) {
			t.Fatalf("conflict of an absent key = %v", cerr)
		}

		ta, tb := encodeToken(a), encodeToken(b)
		if len(ta) != 20 || len(tb) != 20 {
			t.Fatalf("encodeToken(%d) = %q", a, ta)
		}
		if c := cmp.Compare(ta, tb); c != cmp.Compare(a, b) {
			t.Fatalf("tokens %d and %d encode to %q and %q, which compare %d", a, b, ta, tb, c)
		}
		if got, err := strconv.ParseUint(ta, 10, 64); err != nil || got != a {
			t.Fatalf("token %q parses to %d, %v", ta, got, err)
		}
	})
}
