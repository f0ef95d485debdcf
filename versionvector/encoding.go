package versionvector

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"unicode/utf8"
)

// The binary encoding of a vector is
//
//	uvarint(number of entries)
//	for each entry, in increasing byte order of replica ID:
//	    uvarint(len(id)) id uvarint(counter)
//
// with every varint in its shortest form and no zero counter, so that a
// vector has exactly one encoding. The empty vector is the single byte 0x00;
// a vector of three replicas named like "eu-west-1" with counters below
// 2²¹ takes 1 + 3 × (1 + 9 + 3) = 40 bytes.

// minVectorEntry is the smallest encoded entry: a 1-byte ID and a 1-byte
// counter, each after a 1-byte length or value.
const minVectorEntry = 3

// validID reports whether id can be encoded: non-empty, valid UTF-8.
func validID(id string) bool { return id != "" && utf8.ValidString(id) }

func invalidID(id string) error {
	return fmt.Errorf("%w: %q", ErrInvalidReplicaID, id)
}

// AppendBinary appends the binary encoding of v to b (see
// encoding.BinaryAppender). It fails with an error matching
// ErrInvalidReplicaID if an ID with a non-zero counter is empty or not valid
// UTF-8.
func (v Vector) AppendBinary(b []byte) ([]byte, error) {
	ids := v.ids()
	b = binary.AppendUvarint(b, uint64(len(ids)))
	for _, id := range ids {
		if !validID(id) {
			return nil, invalidID(id)
		}
		b = binary.AppendUvarint(b, uint64(len(id)))
		b = append(b, id...)
		b = binary.AppendUvarint(b, v[id])
	}
	return b, nil
}

// MarshalBinary returns the compact binary encoding of v: a varint count,
// then each replica ID (length-prefixed) and counter (a varint), in
// increasing byte order of ID, zero counters left out. Equal vectors have
// equal encodings.
func (v Vector) MarshalBinary() ([]byte, error) {
	return v.AppendBinary(make([]byte, 0, 1+len(v)*16))
}

// UnmarshalBinary decodes the encoding MarshalBinary writes into a new map
// stored in *v. It accepts only that one encoding: truncated input, trailing
// bytes, unsorted or duplicate IDs, empty or non-UTF-8 IDs, zero counters
// and over-long varints fail with a [*DecodeError] (matching ErrMalformed),
// and *v is left unchanged.
func (v *Vector) UnmarshalBinary(data []byte) error {
	out, err := decodeVector(data, "vector")
	if err != nil {
		return err
	}
	*v = out
	return nil
}

func decodeVector(data []byte, what string) (Vector, error) {
	r := reader{buf: data, what: what}
	out, err := r.vector()
	if err != nil {
		return nil, err
	}
	if err := r.end(); err != nil {
		return nil, err
	}
	return out, nil
}

// reader decodes the binary encodings, checking that they are canonical.
type reader struct {
	buf  []byte
	off  int
	what string
}

func (r *reader) fail(kind DecodeErrorKind) error {
	return &DecodeError{What: r.what, Format: "binary", Offset: r.off, Kind: kind}
}

func (r *reader) remaining() int { return len(r.buf) - r.off }

// uvarint reads a varint in its shortest form.
func (r *reader) uvarint() (uint64, error) {
	x, n := binary.Uvarint(r.buf[r.off:])
	switch {
	case n == 0:
		return 0, r.fail(DecodeTruncated)
	case n < 0:
		return 0, r.fail(DecodeOverflow)
	case n > 1 && r.buf[r.off+n-1] == 0:
		// A last byte of 0 after a continuation byte adds nothing: the
		// same number has a shorter encoding.
		return 0, r.fail(DecodeNonCanonical)
	}
	r.off += n
	return x, nil
}

// count reads a number of items each at least minSize bytes long, and
// checks that the rest of the input can hold them: garbage cannot claim
// more items than the input has bytes. That bounds the count, not what
// the items cost once decoded: allocating count items up front costs up
// to len(input)/minSize times the item's size, fine for the small,
// fixed-size entries of vectors and sets, but not for values of a
// caller's type T, which may be large; their decoder grows its slice as
// values decode instead.
func (r *reader) count(minSize int) (int, error) {
	start := r.off
	n, err := r.uvarint()
	if err != nil {
		return 0, err
	}
	if n > uint64(r.remaining()/minSize) {
		r.off = start
		return 0, r.fail(DecodeTruncated)
	}
	return int(n), nil
}

// bytes reads a length-prefixed byte string; the result aliases the input
// and has no spare capacity.
func (r *reader) bytes() ([]byte, error) {
	start := r.off
	n, err := r.uvarint()
	if err != nil {
		return nil, err
	}
	if n > uint64(r.remaining()) {
		r.off = start
		return nil, r.fail(DecodeTruncated)
	}
	end := r.off + int(n)
	b := r.buf[r.off:end:end]
	r.off = end
	return b, nil
}

// id reads a replica ID that must sort after prev (unless first).
func (r *reader) id(prev string, first bool) (string, error) {
	start := r.off
	b, err := r.bytes()
	if err != nil {
		return "", err
	}
	id := string(b)
	switch {
	case !validID(id):
		r.off = start
		return "", r.fail(DecodeBadReplicaID)
	case !first && id == prev:
		r.off = start
		return "", r.fail(DecodeDuplicate)
	case !first && id < prev:
		r.off = start
		return "", r.fail(DecodeUnsorted)
	}
	return id, nil
}

// counter reads a non-zero counter.
func (r *reader) counter() (uint64, error) {
	start := r.off
	n, err := r.uvarint()
	if err != nil {
		return 0, err
	}
	if n == 0 {
		r.off = start
		return 0, r.fail(DecodeZeroCounter)
	}
	return n, nil
}

func (r *reader) vector() (Vector, error) {
	n, err := r.count(minVectorEntry)
	if err != nil {
		return nil, err
	}
	out := make(Vector, n)
	var prev string
	for i := range n {
		id, err := r.id(prev, i == 0)
		if err != nil {
			return nil, err
		}
		c, err := r.counter()
		if err != nil {
			return nil, err
		}
		out[id] = c
		prev = id
	}
	return out, nil
}

func (r *reader) end() error {
	if r.off != len(r.buf) {
		return r.fail(DecodeTrailingData)
	}
	return nil
}

// MarshalJSON encodes v as a JSON object from replica ID to counter, keys in
// increasing byte order, zero counters left out: {"eu":3,"us":1}. A nil
// vector is {}. It fails with an error matching ErrInvalidReplicaID for an
// empty or non-UTF-8 ID.
//
// Counters are JSON numbers; JavaScript reads those above 2⁵³ inexactly.
func (v Vector) MarshalJSON() ([]byte, error) {
	ids := v.ids()
	b := make([]byte, 0, 2+len(ids)*16)
	b = append(b, '{')
	for i, id := range ids {
		if !validID(id) {
			return nil, invalidID(id)
		}
		if i > 0 {
			b = append(b, ',')
		}
		k, err := json.Marshal(id)
		if err != nil {
			return nil, err
		}
		b = append(b, k...)
		b = append(b, ':')
		b = strconv.AppendUint(b, v[id], 10)
	}
	return append(b, '}'), nil
}

// UnmarshalJSON decodes a JSON object from replica ID to counter into a new
// map stored in *v. Keys may come in any order (JSON objects are unordered
// and tools reorder them), but a key twice, an empty key, a counter that is
// 0, negative, fractional or above 2⁶⁴−1, input that is not valid UTF-8 and
// anything but one object fail with a [*DecodeError] (matching
// ErrMalformed), and *v is left unchanged. JSON null leaves *v unchanged, as
// encoding/json does.
func (v *Vector) UnmarshalJSON(data []byte) error {
	out, err := decodeVectorJSON(data, "vector")
	if err != nil {
		return err
	}
	if out != nil {
		*v = out
	}
	return nil
}

func decodeVectorJSON(data []byte, what string) (Vector, error) {
	if !utf8.Valid(data) {
		return nil, &DecodeError{What: what, Format: "json", Offset: invalidUTF8Offset(data), Kind: DecodeSyntax, Err: errors.New("not valid UTF-8")}
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	fail := func(kind DecodeErrorKind, err error) error {
		return &DecodeError{What: what, Format: "json", Offset: int(dec.InputOffset()), Kind: kind, Err: err}
	}
	tok, err := dec.Token()
	if err != nil {
		return nil, fail(DecodeSyntax, err)
	}
	if tok == nil {
		if err := jsonEnd(dec); err != nil {
			return nil, fail(DecodeTrailingData, err)
		}
		return nil, nil
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, fail(DecodeSyntax, errors.New("not a JSON object"))
	}
	out := make(Vector)
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, fail(DecodeSyntax, err)
		}
		id, ok := tok.(string)
		if !ok {
			return nil, fail(DecodeSyntax, errors.New("object key is not a string"))
		}
		if id == "" {
			return nil, fail(DecodeBadReplicaID, nil)
		}
		if _, dup := out[id]; dup {
			return nil, fail(DecodeDuplicate, nil)
		}
		tok, err = dec.Token()
		if err != nil {
			return nil, fail(DecodeSyntax, err)
		}
		num, ok := tok.(json.Number)
		if !ok {
			return nil, fail(DecodeSyntax, fmt.Errorf("counter of %q is not a number", id))
		}
		c, err := strconv.ParseUint(string(num), 10, 64)
		if err != nil {
			if errors.Is(err, strconv.ErrRange) {
				return nil, fail(DecodeOverflow, nil)
			}
			return nil, fail(DecodeSyntax, fmt.Errorf("counter %s of %q is not an unsigned integer", num, id))
		}
		if c == 0 {
			return nil, fail(DecodeZeroCounter, nil)
		}
		out[id] = c
	}
	if _, err := dec.Token(); err != nil { // the closing brace
		return nil, fail(DecodeSyntax, err)
	}
	if err := jsonEnd(dec); err != nil {
		return nil, fail(DecodeTrailingData, err)
	}
	return out, nil
}

// jsonEnd checks that nothing but white space follows the value.
func jsonEnd(dec *json.Decoder) error {
	if _, err := dec.Token(); err != io.EOF {
		if err == nil {
			err = errors.New("more than one JSON value")
		}
		return err
	}
	return nil
}

func invalidUTF8Offset(b []byte) int {
	for i := 0; i < len(b); {
		r, n := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && n <= 1 {
			return i
		}
		i += n
	}
	return len(b)
}
