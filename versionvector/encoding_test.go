package versionvector

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"maps"
	"runtime"
	"strings"
	"testing"

	"github.com/occkit/occkit/cas"
)

func TestVectorBinaryEncoding(t *testing.T) {
	tests := []struct {
		name string
		v    Vector
		want []byte
	}{
		{"nil", nil, []byte{0}},
		{"zero entries left out", Vector{"a": 0}, []byte{0}},
		{"sorted by ID", Vector{"us": 1, "eu": 3}, []byte{2, 2, 'e', 'u', 3, 2, 'u', 's', 1}},
		{"multi-byte counter", Vector{"a": 300}, []byte{1, 1, 'a', 0xac, 0x02}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.v.MarshalBinary()
			if err != nil || !bytes.Equal(got, tt.want) {
				t.Fatalf("MarshalBinary = %x, %v; want %x", got, err, tt.want)
			}
			var back Vector
			if err := back.UnmarshalBinary(got); err != nil || !sameVector(back, tt.v) {
				t.Fatalf("UnmarshalBinary(%x) = %v, %v", got, back, err)
			}
		})
	}
	for _, bad := range []string{"", "\xff"} {
		if _, err := (Vector{bad: 1}).MarshalBinary(); !errors.Is(err, ErrInvalidReplicaID) {
			t.Errorf("MarshalBinary with ID %q: %v, want ErrInvalidReplicaID", bad, err)
		}
		if _, err := (Vector{bad: 1}).MarshalJSON(); !errors.Is(err, ErrInvalidReplicaID) {
			t.Errorf("MarshalJSON with ID %q: %v, want ErrInvalidReplicaID", bad, err)
		}
	}
}

func TestVectorBinaryDecodeErrors(t *testing.T) {
	tests := []struct {
		name string
		in   []byte
		kind DecodeErrorKind
		off  int
	}{
		{"empty input", nil, DecodeTruncated, 0},
		{"count without entries", []byte{1}, DecodeTruncated, 0},
		{"ID longer than input", []byte{1, 5, 'a', 1}, DecodeTruncated, 1},
		{"missing counter", []byte{1, 2, 'a', 'b'}, DecodeTruncated, 4},
		{"count larger than input can hold", []byte{0xff, 0xff, 0x03, 1, 'a', 1}, DecodeTruncated, 0},
		{"trailing byte", []byte{1, 1, 'a', 1, 0}, DecodeTrailingData, 4},
		{"unsorted IDs", []byte{2, 1, 'b', 1, 1, 'a', 1}, DecodeUnsorted, 4},
		{"duplicate ID", []byte{2, 1, 'a', 1, 1, 'a', 2}, DecodeDuplicate, 4},
		{"zero counter", []byte{1, 1, 'a', 0}, DecodeZeroCounter, 3},
		{"over-long counter", []byte{1, 1, 'a', 0x81, 0x00}, DecodeNonCanonical, 3},
		{"over-long count", []byte{0x80, 0x00}, DecodeNonCanonical, 0},
		{"counter over 64 bits", []byte{1, 1, 'a', 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02}, DecodeOverflow, 3},
		{"empty ID", []byte{1, 0, 1, 0}, DecodeBadReplicaID, 1},
		{"ID not UTF-8", []byte{1, 1, 0xff, 1}, DecodeBadReplicaID, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := Vector{"keep": 1}
			err := v.UnmarshalBinary(tt.in)
			checkDecodeError(t, err, tt.kind, "binary")
			var de *DecodeError
			if errors.As(err, &de) && de.Offset != tt.off {
				t.Errorf("offset %d, want %d (%v)", de.Offset, tt.off, err)
			}
			if !maps.Equal(v, Vector{"keep": 1}) {
				t.Errorf("failed decode changed the vector to %v", v)
			}
			var c CausalContext
			checkDecodeError(t, c.UnmarshalBinary(tt.in), tt.kind, "binary")
		})
	}
}

func checkDecodeError(t *testing.T, err error, kind DecodeErrorKind, format string) {
	t.Helper()
	if !errors.Is(err, ErrMalformed) {
		t.Fatalf("error %v does not match ErrMalformed", err)
	}
	var de *DecodeError
	if !errors.As(err, &de) {
		t.Fatalf("error %v is not a *DecodeError", err)
	}
	if de.Kind != kind || de.Format != format {
		t.Fatalf("error %v: kind %v, format %s; want %v, %s", err, de.Kind, de.Format, kind, format)
	}
	if !strings.HasPrefix(err.Error(), "versionvector: ") {
		t.Errorf("error %q lacks the package prefix", err)
	}
}

func TestVectorJSON(t *testing.T) {
	got, err := json.Marshal(Vector{"us": 1, "eu": 3, "a\"b": 2, "zero": 0})
	if want := `{"a\"b":2,"eu":3,"us":1}`; err != nil || string(got) != want {
		t.Fatalf("json.Marshal = %s, %v; want %s", got, err, want)
	}
	if got, _ := json.Marshal(Vector(nil)); string(got) != "{}" {
		t.Errorf("nil vector marshals to %s, want {}", got)
	}
	ok := []struct {
		in   string
		want Vector
	}{
		{`{}`, Vector{}},
		{` { "eu" : 3 , "us":1 } `, Vector{"eu": 3, "us": 1}},
		{`{"us":1,"eu":3}`, Vector{"eu": 3, "us": 1}},
		{`{"a":18446744073709551615}`, Vector{"a": 1<<64 - 1}},
	}
	for _, tt := range ok {
		var v Vector
		if err := json.Unmarshal([]byte(tt.in), &v); err != nil || !maps.Equal(v, tt.want) {
			t.Errorf("Unmarshal(%s) = %v, %v; want %v", tt.in, v, err, tt.want)
		}
	}
	v := Vector{"keep": 1}
	if err := v.UnmarshalJSON([]byte("null")); err != nil || !maps.Equal(v, Vector{"keep": 1}) {
		t.Errorf("null: %v, %v; want no change", v, err)
	}
}

func TestVectorJSONDecodeErrors(t *testing.T) {
	tests := []struct {
		name string
		in   string
		kind DecodeErrorKind
	}{
		{"duplicate key", `{"a":1,"a":2}`, DecodeDuplicate},
		{"duplicate key by escape", `{"a":1,"\u0061":2}`, DecodeDuplicate},
		{"zero counter", `{"a":0}`, DecodeZeroCounter},
		{"empty ID", `{"":1}`, DecodeBadReplicaID},
		{"negative", `{"a":-1}`, DecodeSyntax},
		{"fraction", `{"a":1.5}`, DecodeSyntax},
		{"exponent", `{"a":1e3}`, DecodeSyntax},
		{"too large", `{"a":18446744073709551616}`, DecodeOverflow},
		{"string counter", `{"a":"1"}`, DecodeSyntax},
		{"nested object", `{"a":{}}`, DecodeSyntax},
		{"array", `[]`, DecodeSyntax},
		{"number", `1`, DecodeSyntax},
		{"unterminated", `{"a":1`, DecodeSyntax},
		{"trailing comma", `{"a":1,}`, DecodeSyntax},
		{"two values", `{"a":1}{}`, DecodeTrailingData},
		{"trailing garbage", `{"a":1} x`, DecodeTrailingData},
		{"not UTF-8", "{\"\xff\":1}", DecodeSyntax},
		{"empty", ``, DecodeSyntax},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := Vector{"keep": 1}
			checkDecodeError(t, v.UnmarshalJSON([]byte(tt.in)), tt.kind, "json")
			if !maps.Equal(v, Vector{"keep": 1}) {
				t.Errorf("failed decode changed the vector to %v", v)
			}
		})
	}
}

func TestCausalContextText(t *testing.T) {
	var zero CausalContext
	if txt, err := zero.MarshalText(); err != nil || len(txt) != 0 {
		t.Fatalf("zero context text %q, %v; want empty", txt, err)
	}
	c := CausalContext{vv: Vector{"eu": 3, "us": 1}}
	txt, err := c.MarshalText()
	if err != nil {
		t.Fatal(err)
	}
	var back CausalContext
	if err := back.UnmarshalText(txt); err != nil || !maps.Equal(back.vv, c.vv) {
		t.Fatalf("UnmarshalText(%s) = %v, %v", txt, back, err)
	}
	if got, want := c.String(), `{"eu":3,"us":1}`; got != want {
		t.Errorf("String() = %s, want %s", got, want)
	}
	j, err := json.Marshal(struct{ C CausalContext }{c})
	if err != nil || !strings.Contains(string(j), `"`+string(txt)+`"`) {
		t.Errorf("json.Marshal = %s, %v; want the text token %s", j, err, txt)
	}
	if err := back.UnmarshalText(nil); err != nil || !back.IsZero() {
		t.Errorf("empty text: %v, %v; want the zero context", back, err)
	}

	bad := []struct {
		name string
		in   string
		kind DecodeErrorKind
	}{
		{"empty vector spelled out", "AA", DecodeNonCanonical},
		{"line break", string(txt[:4]) + "\n" + string(txt[4:]), DecodeNonCanonical},
		{"padding", string(txt) + "=", DecodeSyntax},
		{"standard alphabet", "+/", DecodeSyntax},
		{"non-zero trailing bits", "AB", DecodeSyntax},
		{"valid base64, bad vector", "AQ", DecodeTruncated},
	}
	for _, tt := range bad {
		t.Run(tt.name, func(t *testing.T) {
			c := CausalContext{vv: Vector{"keep": 1}}
			err := c.UnmarshalText([]byte(tt.in))
			var de *DecodeError
			if !errors.As(err, &de) || de.Kind != tt.kind || !errors.Is(err, ErrMalformed) {
				t.Fatalf("UnmarshalText(%q) = %v, want kind %v", tt.in, err, tt.kind)
			}
			if c.vv["keep"] != 1 {
				t.Error("failed decode changed the context")
			}
		})
	}
}

func TestSetCodec(t *testing.T) {
	c := SetCodec(cas.Bytes())
	s := NewSet("eu", []byte("x")).Update(nil, "eu", []byte("y")).Update(Vector{"eu": 1}, "us", []byte(""))
	b, err := c.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	want := []byte{1, 2, 2, 'e', 'u', 2, 1, 1, 'y', 2, 'u', 's', 1, 1, 0}
	if !bytes.Equal(b, want) {
		t.Fatalf("Marshal = %v, want %v (set %v)", b, want, s)
	}
	var back Set[[]byte]
	if err := c.Unmarshal(b, &back); err != nil || !sameDots(back, s) {
		t.Fatalf("Unmarshal = %v, %v", back, err)
	}
	if empty, _ := c.Marshal(Set[[]byte]{}); !bytes.Equal(empty, []byte{1, 0}) {
		t.Errorf("empty set encodes to %v, want [1 0]", empty)
	}

	bad := []struct {
		name string
		in   []byte
		kind DecodeErrorKind
	}{
		{"empty", nil, DecodeTruncated},
		{"unknown format", []byte{2, 0}, DecodeUnknownFormat},
		{"trailing", []byte{1, 0, 0}, DecodeTrailingData},
		{"more values than dots", []byte{1, 1, 1, 'a', 1, 2, 0, 0}, DecodeTooManyValues},
		{"value longer than input", []byte{1, 1, 1, 'a', 1, 1, 5, 'x'}, DecodeTruncated},
		{"zero counter", []byte{1, 1, 1, 'a', 0, 0}, DecodeZeroCounter},
		{"unsorted", []byte{1, 2, 1, 'b', 1, 0, 1, 'a', 1, 0}, DecodeUnsorted},
		{"duplicate", []byte{1, 2, 1, 'a', 1, 0, 1, 'a', 1, 0}, DecodeDuplicate},
		{"over-long value count", []byte{1, 1, 1, 'a', 1, 0x80, 0}, DecodeNonCanonical},
	}
	for _, tt := range bad {
		t.Run(tt.name, func(t *testing.T) {
			var s Set[[]byte]
			checkDecodeError(t, c.Unmarshal(tt.in, &s), tt.kind, "binary")
		})
	}

	t.Run("value the codec refuses", func(t *testing.T) {
		var s Set[int]
		err := SetCodec(cas.JSON[int]()).Unmarshal([]byte{1, 1, 1, 'a', 1, 1, 1, 'x'}, &s)
		var se *json.SyntaxError
		if err == nil || errors.Is(err, ErrMalformed) || !errors.As(err, &se) {
			t.Fatalf("Unmarshal = %v, want the codec's own error", err)
		}
	})
	t.Run("invalid replica ID", func(t *testing.T) {
		if _, err := c.Marshal(NewSet("", []byte("x"))); !errors.Is(err, ErrInvalidReplicaID) {
			t.Fatalf("Marshal = %v, want ErrInvalidReplicaID", err)
		}
	})
}

func TestDecodeErrorKindString(t *testing.T) {
	for k := DecodeTruncated; k <= DecodeOverflow; k++ {
		if s := k.String(); strings.HasPrefix(s, "DecodeErrorKind(") {
			t.Errorf("kind %d has no description", k)
		}
	}
	if s := DecodeErrorKind(99).String(); s != "DecodeErrorKind(99)" {
		t.Errorf("unknown kind: %q", s)
	}
}

// claimsManySiblings returns a malformed set whose one replica claims n
// siblings, followed by n bytes none of which starts a value (the first
// length prefix overflows): the count passes the "fits in the input"
// check, the values are not there.
func claimsManySiblings(n int) []byte {
	b := []byte{setFormat, 1, 1, 'a'}
	b = binary.AppendUvarint(b, 1<<40)     // counter
	b = binary.AppendUvarint(b, uint64(n)) // siblings claimed
	return append(b, bytes.Repeat([]byte{0xff}, n)...)
}

// page is a large value type: 4 KiB.
type page [4096]byte

type pageCodec struct{}

func (pageCodec) Marshal(p page) ([]byte, error) { return p[:], nil }

func (pageCodec) Unmarshal(data []byte, p *page) error {
	if len(data) != len(p) {
		return errors.New("a page is 4096 bytes")
	}
	copy(p[:], data)
	return nil
}

// Regression: the decoder allocated room for as many siblings as the
// input claimed, sized by T: 64 KiB of garbage made it allocate 256 MiB of
// pages. What it allocates now is bounded by what it decodes.
func TestSetCodecAllocationBoundedByInput(t *testing.T) {
	data := claimsManySiblings(1 << 16)
	c := SetCodec[page](pageCodec{})
	var s Set[page]
	checkDecodeError(t, c.Unmarshal(data, &s), DecodeOverflow, "binary")

	const runs = 5
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for range runs {
		_ = c.Unmarshal(data, &s)
	}
	runtime.ReadMemStats(&after)
	perRun := (after.TotalAlloc - before.TotalAlloc) / runs
	if limit := uint64(len(data)); perRun > limit {
		t.Fatalf("decoding %d malformed bytes allocated %d bytes, want at most the input's size", len(data), perRun)
	}
}
