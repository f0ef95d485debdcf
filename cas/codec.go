package cas

import (
	"encoding/json"
	"fmt"
)

// Codec turns values of type T into bytes and back. Implementations must be
// safe for concurrent use, and Unmarshal must not keep or alias data: the
// bytes may be shared (occ's version cache hands the same cached bytes to
// every update of a key).
type Codec[T any] interface {
	Marshal(v T) ([]byte, error)
	Unmarshal(data []byte, v *T) error
}

// JSON returns a Codec that encodes T with encoding/json.
func JSON[T any]() Codec[T] { return jsonCodec[T]{} }

type jsonCodec[T any] struct{}

func (jsonCodec[T]) Marshal(v T) ([]byte, error) { return json.Marshal(v) }

func (jsonCodec[T]) Unmarshal(data []byte, v *T) error { return json.Unmarshal(data, v) }

// Bytes returns a Codec for raw []byte values. Both directions copy, so a
// caller may modify what it decoded or encoded without touching bytes
// someone else holds (a cached entry, say).
func Bytes() Codec[[]byte] { return bytesCodec{} }

type bytesCodec struct{}

func (bytesCodec) Marshal(v []byte) ([]byte, error) { return append([]byte{}, v...), nil }

func (bytesCodec) Unmarshal(data []byte, v *[]byte) error {
	*v = append([]byte{}, data...)
	return nil
}

// CodecError is the error of a value that could not be encoded or decoded.
// It is never retryable: the same bytes fail the same way again.
type CodecError struct {
	Key string
	// Decode is true for a failed Unmarshal, false for a failed Marshal.
	Decode bool
	Err    error
}

// Error implements error.
func (e *CodecError) Error() string {
	verb := "encode"
	if e.Decode {
		verb = "decode"
	}
	return fmt.Sprintf("cas: %s value of key %q: %v", verb, truncate(e.Key, 64), e.Err)
}

// Unwrap returns the codec's error.
func (e *CodecError) Unwrap() error { return e.Err }
