package cas

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
)

// ErrBound reports a delta refused because the value it would leave lies
// outside its bounds: the "sold out" case. Nothing was written. The
// concrete error is a [*BoundError].
var ErrBound = errors.New("cas: delta would cross a bound")

// ErrNotInteger reports a delta on a key whose value is not an integer
// as [JSON][int64] writes it. Nothing was written.
var ErrNotInteger = errors.New("cas: value is not an integer")

// Bounds limit the value a delta may leave. The zero value sets no limit
// (the int64 range still applies: a delta that would overflow is refused
// as crossing a bound). Build them with [AtLeast], [AtMost] and [Between].
type Bounds struct {
	min, max       int64
	hasMin, hasMax bool
}

// AtLeast returns bounds that refuse a result below min: AtLeast(0) keeps
// a stock from going negative.
func AtLeast(min int64) Bounds { return Bounds{min: min, hasMin: true} }

// AtMost returns bounds that refuse a result above max (a quota).
func AtMost(max int64) Bounds { return Bounds{max: max, hasMax: true} }

// Between returns bounds that refuse a result below min or above max.
func Between(min, max int64) Bounds { return Bounds{min: min, max: max, hasMin: true, hasMax: true} }

// Min returns the lower bound, if any.
func (b Bounds) Min() (int64, bool) { return b.min, b.hasMin }

// Max returns the upper bound, if any.
func (b Bounds) Max() (int64, bool) { return b.max, b.hasMax }

// Limits returns the smallest and largest values b allows: math.MinInt64
// and math.MaxInt64 for a side without a bound.
func (b Bounds) Limits() (lo, hi int64) {
	lo, hi = math.MinInt64, math.MaxInt64
	if b.hasMin {
		lo = b.min
	}
	if b.hasMax {
		hi = b.max
	}
	return lo, hi
}

// Before returns the range [lo, hi] of current values v for which v+n is
// an int64 within b. lo > hi when there is none. Stores check lo <= v <= hi
// on the server, so that the server never computes a sum that overflows.
func (b Bounds) Before(n int64) (lo, hi int64) {
	min, max := b.Limits()
	// v+n >= min  <=>  v >= min-n ;  v+n <= max  <=>  v <= max-n. A
	// difference below the int64 range puts no limit on v (every v is
	// above it); one above the range allows no v at all, and the other
	// way round for the upper limit.
	lo, under, over := sub(min, n)
	switch {
	case under:
		lo = math.MinInt64
	case over:
		return 1, 0 // empty
	}
	hi, under, over = sub(max, n)
	switch {
	case over:
		hi = math.MaxInt64
	case under:
		return 1, 0 // empty
	}
	return lo, hi
}

// Allows reports whether v+n is an int64 within b.
func (b Bounds) Allows(v, n int64) bool {
	lo, hi := b.Before(n)
	return lo <= v && v <= hi
}

// sub returns a-b and whether the exact difference lies below or above
// the int64 range (the result is then meaningless).
func sub(a, b int64) (d int64, under, over bool) {
	d = a - b
	switch {
	case b > 0 && d > a:
		return d, true, false
	case b < 0 && d < a:
		return d, false, true
	}
	return d, false, false
}

// String returns the bounds as an interval, "[0, +inf)" say.
func (b Bounds) String() string {
	lo, hi := "(-inf", "+inf)"
	if b.hasMin {
		lo = "[" + strconv.FormatInt(b.min, 10)
	}
	if b.hasMax {
		hi = strconv.FormatInt(b.max, 10) + "]"
	}
	return lo + ", " + hi
}

// BoundError is the error of a delta whose result would lie outside its
// bounds. errors.Is(err, ErrBound) is true for it.
type BoundError struct {
	// Key is the key of the delta.
	Key string
	// Add is the delta that was refused.
	Add int64
	// Bounds are the delta's bounds.
	Bounds Bounds
	// Current is the key's value when the delta was refused (0 for an
	// absent key), when HasCurrent is true.
	Current int64
	// HasCurrent reports whether the store returned the current value.
	HasCurrent bool
}

// Error implements error.
func (e *BoundError) Error() string {
	msg := fmt.Sprintf("cas: adding %d to key %q would leave it outside %s", e.Add, truncate(e.Key, 64), e.Bounds)
	if e.HasCurrent {
		msg += fmt.Sprintf(" (value %d)", e.Current)
	}
	return msg
}

// Is reports whether target is ErrBound.
func (e *BoundError) Is(target error) bool { return target == ErrBound }

// Adder is a Store that applies bounded deltas on the server: it adds n to
// a key's integer value in one write, without a read before it and without
// a version to race on, so concurrent deltas of one key never conflict.
// occ.Add uses it, and falls back to a read-modify-write loop for stores
// without it.
//
// A delta is a write like any other: it gives the key a new version, so a
// concurrent CompareAndSwap that read the key before it conflicts, and
// deltas and read-modify-writes may be mixed on one key.
type Adder interface {
	Store

	// Add adds n to the integer value of key, if the result lies within b,
	// and returns the new value and the key's new version. The value is
	// the decimal text JSON[int64] writes and reads. An absent (or
	// deleted) key counts as 0: a delta that b allows creates it.
	//
	// It fails, writing nothing, with a *BoundError (ErrBound) when the
	// result would lie outside b or outside the int64 range, and with
	// ErrNotInteger when the current value is not an integer. A delta is
	// applied at most once: when its reply is lost the store resolves the
	// outcome by the delta's write id before it answers, and returns an
	// *AmbiguousError only when it cannot tell.
	Add(ctx context.Context, key string, n int64, b Bounds) (int64, Version, error)
}

// FormatInt returns the encoding of v that JSON[int64] writes, as a delta
// stores it.
func FormatInt(v int64) []byte { return strconv.AppendInt(nil, v, 10) }

// ParseInt decodes a value written by JSON[int64] or by a delta: an
// optional minus sign and decimal digits, without leading zeros, that fit
// an int64. Anything else fails with ErrNotInteger. Stores that apply
// deltas on the server accept exactly the same values.
func ParseInt(key string, value []byte) (int64, error) {
	ok := len(value) > 0 && len(value) <= 20
	digits := value
	if ok && digits[0] == '-' {
		digits = digits[1:]
		ok = len(digits) > 0 && digits[0] != '0'
	}
	ok = ok && len(digits) > 0 && (digits[0] != '0' || len(digits) == 1)
	for i := 0; ok && i < len(digits); i++ {
		ok = digits[i] >= '0' && digits[i] <= '9'
	}
	var v int64
	if ok {
		var err error
		v, err = strconv.ParseInt(string(value), 10, 64)
		ok = err == nil
	}
	if !ok {
		return 0, &KeyError{Op: "add", Key: key, Err: fmt.Errorf("%w: %q", ErrNotInteger, truncate(string(value), 32))}
	}
	return v, nil
}

// RefusedOnResend is the error of a delta whose record says that a send
// of it, made again after a lost reply, was refused: by b, or (notInteger)
// because the key's value was not an integer then. An Adder returns it
// when a later send of the same delta finds that record: the delta was
// never applied, and the caller hears the refusal it would have heard.
func RefusedOnResend(key string, n int64, b Bounds, notInteger bool) error {
	if notInteger {
		return &KeyError{Op: "add", Key: key, Err: fmt.Errorf("%w (the value was not an integer when the delta was sent again)", ErrNotInteger)}
	}
	return &BoundError{Key: key, Add: n, Bounds: b}
}
