package versionvector

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"
	"unicode/utf8"
)

// Every decoder is fuzzed. Each target checks that the decoder never panics,
// that what it refuses is a *DecodeError matching ErrMalformed, and that
// what it accepts is valid and re-encodes to the very same input (the
// encodings are canonical), or for JSON, to a value that decodes the same.
// Seed corpora are in testdata/fuzz/; run one with
//
//	go test -run '^$' -fuzz '^FuzzVectorBinary$' -fuzztime 20s ./versionvector/

func mustBeDecodeError(t *testing.T, err error) {
	t.Helper()
	var de *DecodeError
	if !errors.As(err, &de) || !errors.Is(err, ErrMalformed) {
		t.Fatalf("decoder error %v (%T) is not a *DecodeError matching ErrMalformed", err, err)
	}
	if de.Kind < DecodeTruncated || de.Kind > DecodeOverflow {
		t.Fatalf("decoder error %v has unknown kind %d", err, de.Kind)
	}
}

func checkVector(t *testing.T, v Vector) {
	t.Helper()
	for id, n := range v {
		if n == 0 || !validID(id) {
			t.Fatalf("decoded vector %v has entry %q:%d", v, id, n)
		}
	}
}

func FuzzVectorBinary(f *testing.F) {
	for _, v := range []Vector{nil, {"a": 1}, {"eu": 3, "us": 1}, {"eu-west-1": 1 << 20, "us-east-1": 1<<64 - 1}} {
		b, _ := v.MarshalBinary()
		f.Add(b)
	}
	f.Add([]byte{2, 1, 'b', 1, 1, 'a', 1})
	f.Add([]byte{1, 1, 'a', 0x81, 0x00})
	f.Fuzz(func(t *testing.T, data []byte) {
		var v Vector
		err := v.UnmarshalBinary(data)
		var c CausalContext
		cerr := c.UnmarshalBinary(data)
		if (err == nil) != (cerr == nil) {
			t.Fatalf("vector and causal context decoders disagree on %x: %v vs %v", data, err, cerr)
		}
		if err != nil {
			mustBeDecodeError(t, err)
			return
		}
		checkVector(t, v)
		out, err := v.MarshalBinary()
		if err != nil || !bytes.Equal(out, data) {
			t.Fatalf("%x decodes to %v, which encodes to %x, %v", data, v, out, err)
		}
		if out, err := c.MarshalBinary(); err != nil || !bytes.Equal(out, data) {
			t.Fatalf("causal context of %x re-encodes to %x, %v", data, out, err)
		}
		j, err := v.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		var back Vector
		if err := back.UnmarshalJSON(j); err != nil || !sameVector(back, v) {
			t.Fatalf("JSON %s of %v decodes to %v, %v", j, v, back, err)
		}
	})
}

func FuzzVectorJSON(f *testing.F) {
	for _, s := range []string{`{}`, `null`, `{"eu":3,"us":1}`, `{"us":1,"eu":3}`, ` {"a" : 18446744073709551615} `,
		`{"a":1,"a":2}`, `{"a":0}`, `{"a":1.5}`, `{"a\u0000b":1}`, `{"é":2}`, `[1]`, `{"a":1}{}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var v Vector
		err := v.UnmarshalJSON(data)
		if err != nil {
			mustBeDecodeError(t, err)
			return
		}
		if !json.Valid(data) || !utf8.Valid(data) {
			t.Fatalf("accepted invalid JSON %q", data)
		}
		if v == nil { // null
			if string(bytes.TrimSpace(data)) != "null" {
				t.Fatalf("%q decoded to a nil vector", data)
			}
			return
		}
		checkVector(t, v)
		j, err := v.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		var back Vector
		if err := back.UnmarshalJSON(j); err != nil || !sameVector(back, v) {
			t.Fatalf("%q decodes to %v, re-encoded as %s decodes to %v, %v", data, v, j, back, err)
		}
		if j2, _ := back.MarshalJSON(); !bytes.Equal(j, j2) {
			t.Fatalf("JSON encoding not deterministic: %s then %s", j, j2)
		}
		// What encoding/json makes of the same object agrees.
		var std map[string]uint64
		if err := json.Unmarshal(data, &std); err != nil || !sameVector(std, v) {
			t.Fatalf("encoding/json reads %q as %v, %v; we read %v", data, std, err, v)
		}
	})
}

func FuzzCausalContextText(f *testing.F) {
	for _, v := range []Vector{{"a": 1}, {"eu": 3, "us": 1}, {"eu-west-1": 1 << 20, "us-east-1": 1<<64 - 1}} {
		txt, _ := CausalContext{vv: v}.MarshalText()
		f.Add(txt)
	}
	for _, s := range []string{"", "AA", "AQ", "AB", "AQFhAQ==", "AQFh\nAQ", "+/"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var c CausalContext
		err := c.UnmarshalText(data)
		if err != nil {
			mustBeDecodeError(t, err)
			return
		}
		checkVector(t, c.vv)
		out, err := c.MarshalText()
		if err != nil || !bytes.Equal(out, data) {
			t.Fatalf("%q decodes to %v, which encodes to %q, %v", data, c, out, err)
		}
	})
}

func FuzzSetBinary(f *testing.F) {
	for _, s := range []Set[[]byte]{
		{},
		NewSet("eu", []byte("x")),
		NewSet("eu", []byte("x")).Update(nil, "eu", []byte("y")).Update(Vector{"eu": 1}, "us", nil),
		NewSet("eu", []byte(`{"items":["book"]}`)).Discard(Vector{"eu": 1, "us": 7}),
	} {
		b, _ := raw.Marshal(s)
		f.Add(b)
	}
	f.Add([]byte{1, 1, 1, 'a', 1, 2, 0, 0})
	f.Add([]byte{2, 0})
	f.Add(claimsManySiblings(1 << 16)) // see TestSetCodecAllocationBoundedByInput
	f.Fuzz(func(t *testing.T, data []byte) {
		var s Set[[]byte]
		err := raw.Unmarshal(data, &s)
		if err != nil {
			mustBeDecodeError(t, err)
			return
		}
		checkInvariants(t, s)
		out, err := raw.Marshal(s)
		if err != nil || !bytes.Equal(out, data) {
			t.Fatalf("%x decodes to %v, which encodes to %x, %v", data, s, out, err)
		}
		if len(s.Values()) != s.Len() {
			t.Fatalf("Values has %d siblings, Len says %d", len(s.Values()), s.Len())
		}
		if !sameDots(s.Sync(s), s) || !sameDots(s.Sync(Set[[]byte]{}), s) {
			t.Fatalf("sync of %v with itself or the empty set changes it", s)
		}
		if _, ok := s.nextCounter(s.Join(), "fuzz"); ok {
			u := s.Update(s.Join(), "fuzz", []byte("new"))
			if u.Len() != 1 || Compare(u.Join(), s.Join()) != After {
				t.Fatalf("a write that read %v leaves %v", s, u)
			}
		}
	})
}
