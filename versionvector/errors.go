package versionvector

import (
	"errors"
	"fmt"
)

// Sentinel errors of this package, matched with [errors.Is].
var (
	// ErrMalformed reports bytes or text that are not a valid encoding of a
	// vector, a causal context or a set. The concrete error is a
	// [*DecodeError] saying what is wrong and where.
	ErrMalformed = errors.New("versionvector: malformed encoding")

	// ErrInvalidReplicaID reports a replica ID that cannot be encoded: the
	// empty string, or a string that is not valid UTF-8.
	ErrInvalidReplicaID = errors.New("versionvector: invalid replica ID")

	// ErrCounterOverflow reports a write whose new counter would not fit in
	// a uint64. It cannot happen by counting (2⁶⁴ writes), only when a causal
	// context or a stored set was forged with a counter of 2⁶⁴−1.
	ErrCounterOverflow = errors.New("versionvector: counter overflow")
)

// DecodeErrorKind says what is wrong with a malformed encoding. It is a
// plain value, safe for concurrent use.
type DecodeErrorKind uint8

// The kinds of malformed encodings.
const (
	// DecodeTruncated: the input ends in the middle of a value, or a length
	// or count claims more bytes than are left.
	DecodeTruncated DecodeErrorKind = iota + 1
	// DecodeTrailingData: a complete encoding is followed by more bytes.
	DecodeTrailingData
	// DecodeUnsorted: replica IDs are not in increasing byte order.
	DecodeUnsorted
	// DecodeDuplicate: a replica ID appears twice.
	DecodeDuplicate
	// DecodeZeroCounter: a counter is 0 (a missing entry means 0; encoders
	// never write one).
	DecodeZeroCounter
	// DecodeNonCanonical: a varint is longer than needed, or text is not
	// in the one form the encoder writes; accepting it would give one value
	// two encodings.
	DecodeNonCanonical
	// DecodeBadReplicaID: a replica ID is empty or not valid UTF-8.
	DecodeBadReplicaID
	// DecodeUnknownFormat: the format byte of a set is not one this
	// version of the package writes.
	DecodeUnknownFormat
	// DecodeTooManyValues: a set entry holds more values than its counter
	// has dots.
	DecodeTooManyValues
	// DecodeSyntax: the text is not valid JSON or base64 of the expected
	// shape.
	DecodeSyntax
	// DecodeOverflow: a number does not fit in a uint64.
	DecodeOverflow
)

// String describes the kind in a few words.
func (k DecodeErrorKind) String() string {
	switch k {
	case DecodeTruncated:
		return "truncated"
	case DecodeTrailingData:
		return "trailing data"
	case DecodeUnsorted:
		return "replica IDs not sorted"
	case DecodeDuplicate:
		return "duplicate replica ID"
	case DecodeZeroCounter:
		return "zero counter"
	case DecodeNonCanonical:
		return "non-canonical encoding"
	case DecodeBadReplicaID:
		return "invalid replica ID"
	case DecodeUnknownFormat:
		return "unknown format"
	case DecodeTooManyValues:
		return "more values than dots"
	case DecodeSyntax:
		return "syntax error"
	case DecodeOverflow:
		return "number overflows uint64"
	}
	return fmt.Sprintf("DecodeErrorKind(%d)", uint8(k))
}

// DecodeError is the error of a decoder given malformed input.
// errors.Is(err, ErrMalformed) is true for it; errors.As gives the details.
// It is not modified after it is returned, so it is safe for concurrent
// reads.
type DecodeError struct {
	// What is being decoded: "vector", "causal context" or "set".
	What string
	// Format is "binary", "json" or "text".
	Format string
	// Offset is the byte offset in the input where the problem was found.
	Offset int
	// Kind says what is wrong.
	Kind DecodeErrorKind
	// Err is the underlying error (from encoding/json or encoding/base64),
	// if any.
	Err error
}

// Error implements error.
func (e *DecodeError) Error() string {
	msg := fmt.Sprintf("versionvector: decode %s %s at byte %d: %v", e.Format, e.What, e.Offset, e.Kind)
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

// Is reports whether target is ErrMalformed.
func (e *DecodeError) Is(target error) bool { return target == ErrMalformed }

// Unwrap returns the underlying error, if any.
func (e *DecodeError) Unwrap() error { return e.Err }
