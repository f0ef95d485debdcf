package versionvector

import (
	"encoding/binary"
	"fmt"

	"github.com/occkit/occkit/cas"
)

// setFormat is the first byte of every encoded set, so that a later version
// of the package can change the layout and still read old data.
const setFormat = 1

// minSetEntry is the smallest encoded set entry: ID length, a 1-byte ID,
// counter and value count.
const minSetEntry = 4

// maxPreallocSiblings bounds the siblings of one replica the decoder
// allocates room for before decoding them; more grow the slice.
const maxPreallocSiblings = 4

// SetCodec returns a codec for sets of T whose values are encoded with c.
// A [Register] stores its sets with it; use it with cas.NewTyped and
// occ.Update to keep sets in a store yourself. The codec is safe for
// concurrent use if c is.
//
// The encoding is a format byte (1), then a varint count of entries, then
// for each replica in increasing byte order of ID: the ID (length-prefixed),
// its counter (a varint), the number of its siblings and each sibling's
// encoding by c (length-prefixed), oldest first. Every varint is in its
// shortest form, so a set has one encoding. The overhead over the values
// themselves is 2 bytes per key, 2 + len(ID) + the counter's varint (3 bytes
// below 2²¹ writes) per replica that has ever written the key, and the
// length prefix (1 or 2 bytes below 16 KiB) of each sibling: 45 bytes for
// three replicas named like "eu-west-1" and one sibling.
//
// Unmarshal rejects anything else (see [DecodeError]); a value c fails to
// decode is returned as c's error. Values decoded by a codec that aliases
// its input, such as cas.Bytes, alias the data given to Unmarshal.
func SetCodec[T any](c cas.Codec[T]) cas.Codec[Set[T]] { return setCodec[T]{c: c} }

type setCodec[T any] struct{ c cas.Codec[T] }

func (sc setCodec[T]) Marshal(s Set[T]) ([]byte, error) {
	b := make([]byte, 0, 2+len(s.entries)*24)
	b = append(b, setFormat)
	b = binary.AppendUvarint(b, uint64(len(s.entries)))
	for _, e := range s.entries {
		if !validID(e.id) {
			return nil, invalidID(e.id)
		}
		b = binary.AppendUvarint(b, uint64(len(e.id)))
		b = append(b, e.id...)
		b = binary.AppendUvarint(b, e.n)
		b = binary.AppendUvarint(b, uint64(len(e.vals)))
		for _, v := range e.vals {
			enc, err := sc.c.Marshal(v)
			if err != nil {
				return nil, fmt.Errorf("versionvector: encode sibling of replica %q: %w", e.id, err)
			}
			b = binary.AppendUvarint(b, uint64(len(enc)))
			b = append(b, enc...)
		}
	}
	return b, nil
}

func (sc setCodec[T]) Unmarshal(data []byte, s *Set[T]) error {
	r := reader{buf: data, what: "set"}
	if len(data) == 0 {
		return r.fail(DecodeTruncated)
	}
	if data[0] != setFormat {
		return r.fail(DecodeUnknownFormat)
	}
	r.off = 1
	n, err := r.count(minSetEntry)
	if err != nil {
		return err
	}
	out := Set[T]{entries: make([]entry[T], 0, n)}
	var prev string
	for i := range n {
		id, err := r.id(prev, i == 0)
		if err != nil {
			return err
		}
		counter, err := r.counter()
		if err != nil {
			return err
		}
		start := r.off
		k, err := r.count(1)
		if err != nil {
			return err
		}
		if uint64(k) > counter {
			r.off = start
			return r.fail(DecodeTooManyValues)
		}
		// k is at most the bytes left, but a T can be far larger than
		// the byte of its length prefix: grow the slice as values decode
		// instead of trusting k, so that garbage claiming many values
		// costs no more than the values it really holds.
		var vals []T
		if k > 0 {
			vals = make([]T, 0, min(k, maxPreallocSiblings))
		}
		for range k {
			raw, err := r.bytes()
			if err != nil {
				return err
			}
			vals = append(vals, *new(T))
			if err := sc.c.Unmarshal(raw, &vals[len(vals)-1]); err != nil {
				return fmt.Errorf("versionvector: decode sibling of replica %q: %w", id, err)
			}
		}
		out.entries = append(out.entries, entry[T]{id: id, n: counter, vals: vals})
		prev = id
	}
	if err := r.end(); err != nil {
		return err
	}
	*s = out
	return nil
}
