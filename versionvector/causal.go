package versionvector

import (
	"encoding/base64"
)

// CausalContext is what a reader of a [Register] has seen: hand it back with
// the next Put so that the write replaces exactly the siblings that were
// read, and no write the reader has not seen.
//
// It is opaque: ship it to clients as text (MarshalText, a short base64url
// token, also used by encoding/json) or bytes (MarshalBinary) and take it
// back unchanged. The zero value is the context of a reader that has seen
// nothing: a write with it replaces nothing. A CausalContext is an immutable
// value, safe for concurrent use.
type CausalContext struct {
	vv Vector
}

var textEncoding = base64.RawURLEncoding.Strict()

// IsZero reports whether c is the context of a reader that has seen nothing.
func (c CausalContext) IsZero() bool {
	for _, n := range c.vv {
		if n != 0 {
			return false
		}
	}
	return true
}

// MarshalBinary returns the binary encoding of the context, that of a
// [Vector]: 1 byte, plus 13 per replica for IDs of 9 bytes and counters
// below 2²¹ (40 bytes for three replicas, 54 characters as text).
func (c CausalContext) MarshalBinary() ([]byte, error) { return c.vv.MarshalBinary() }

// UnmarshalBinary decodes what MarshalBinary wrote. Malformed input fails
// with a [*DecodeError] (matching ErrMalformed) and leaves c unchanged.
func (c *CausalContext) UnmarshalBinary(data []byte) error {
	v, err := decodeVector(data, "causal context")
	if err != nil {
		return err
	}
	c.vv = v
	return nil
}

// MarshalText returns the context as URL-safe base64 without padding of its
// binary encoding, or the empty string for the empty context. It is safe in
// URLs, HTTP headers and JSON strings.
func (c CausalContext) MarshalText() ([]byte, error) {
	if c.IsZero() {
		return []byte{}, nil
	}
	b, err := c.MarshalBinary()
	if err != nil {
		return nil, err
	}
	out := make([]byte, textEncoding.EncodedLen(len(b)))
	textEncoding.Encode(out, b)
	return out, nil
}

// UnmarshalText decodes what MarshalText wrote; the empty string is the
// empty context. Only the exact text MarshalText writes is accepted (no
// padding, no line breaks, no other base64 alphabet); anything else fails
// with a [*DecodeError] (matching ErrMalformed) and leaves c unchanged.
func (c *CausalContext) UnmarshalText(text []byte) error {
	if len(text) == 0 {
		c.vv = nil
		return nil
	}
	b := make([]byte, textEncoding.DecodedLen(len(text)))
	n, err := textEncoding.Decode(b, text)
	if err != nil {
		off := 0
		if ce, ok := err.(base64.CorruptInputError); ok {
			off = int(ce)
		}
		return &DecodeError{What: "causal context", Format: "text", Offset: off, Kind: DecodeSyntax, Err: err}
	}
	v, err := decodeVector(b[:n], "causal context")
	if err != nil {
		return err
	}
	// The decoder skips line breaks; the encoder writes none, and the empty
	// vector is written as the empty string.
	if textEncoding.EncodedLen(n) != len(text) || len(v) == 0 {
		return &DecodeError{What: "causal context", Format: "text", Kind: DecodeNonCanonical}
	}
	c.vv = v
	return nil
}

// String returns the context as a JSON object from replica ID to counter,
// for logs and debugging: {"eu":3,"us":1}.
func (c CausalContext) String() string {
	b, err := c.vv.MarshalJSON()
	if err != nil {
		return "{invalid}"
	}
	return string(b)
}
