package cas

import (
	"errors"
	"math"
	"testing"
)

// TestBoundsBefore checks Before against exact arithmetic on the edges of
// the int64 range.
func TestBoundsBefore(t *testing.T) {
	vals := []int64{math.MinInt64, math.MinInt64 + 1, -5, -1, 0, 1, 5, math.MaxInt64 - 1, math.MaxInt64}
	bounds := []Bounds{{}, AtLeast(0), AtMost(0), Between(-5, 5), Between(math.MaxInt64-1, math.MaxInt64), AtLeast(math.MaxInt64), AtMost(math.MinInt64), Between(math.MinInt64, math.MinInt64+1)}
	for _, b := range bounds {
		for _, n := range vals {
			lo, hi := b.Before(n)
			for _, v := range vals {
				min, max := b.Limits()
				// Exact: v+n as a float would round; compare with care.
				sum := v + n
				overflow := (n > 0 && sum < v) || (n < 0 && sum > v)
				want := !overflow && sum >= min && sum <= max
				if got := lo <= v && v <= hi; got != want {
					t.Errorf("%s Before(%d) = [%d, %d]: v=%d allowed %v, want %v", b, n, lo, hi, v, got, want)
				}
				if got := b.Allows(v, n); got != want {
					t.Errorf("%s Allows(%d, %d) = %v, want %v", b, v, n, got, want)
				}
			}
		}
	}
}

func TestParseInt(t *testing.T) {
	for _, ok := range []string{"0", "-1", "42", "9223372036854775807", "-9223372036854775808"} {
		if v, err := ParseInt("k", []byte(ok)); err != nil || string(FormatInt(v)) != ok {
			t.Errorf("ParseInt(%q) = %d, %v", ok, v, err)
		}
	}
	for _, bad := range []string{"", "-", "-0", "007", "+1", " 1", "1 ", "1.0", "1e3", "9223372036854775808", "-9223372036854775809", `"1"`, "0x10"} {
		if _, err := ParseInt("k", []byte(bad)); err == nil {
			t.Errorf("ParseInt(%q) accepted", bad)
		}
	}
}

// TestRefusedOnResend checks the two refusals a delta's record can hold.
func TestRefusedOnResend(t *testing.T) {
	err := RefusedOnResend("k", -3, AtLeast(0), false)
	var be *BoundError
	if !errors.As(err, &be) || be.Key != "k" || be.Add != -3 || be.HasCurrent || errors.Is(err, ErrNotInteger) {
		t.Fatalf("bounds: %#v, want a *BoundError for k, -3, without a current value", err)
	}
	err = RefusedOnResend("k", -3, AtLeast(0), true)
	var ke *KeyError
	if !errors.Is(err, ErrNotInteger) || errors.Is(err, ErrBound) || !errors.As(err, &ke) || ke.Key != "k" || ke.Op != "add" {
		t.Fatalf("not an integer: %v, want a *KeyError for k matching ErrNotInteger", err)
	}
}
