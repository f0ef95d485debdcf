package versionvector

import (
	"fmt"
	"maps"
	"math"
	"testing"

	"pgregory.net/rapid"
)

func TestCompare(t *testing.T) {
	tests := []struct {
		name string
		a, b Vector
		want Ordering
	}{
		{"both empty", nil, Vector{}, Equal},
		{"zero entry equals missing", Vector{"a": 0}, nil, Equal},
		{"same", Vector{"a": 1, "b": 2}, Vector{"b": 2, "a": 1}, Equal},
		{"empty before any event", nil, Vector{"a": 1}, Before},
		{"smaller counter", Vector{"a": 1, "b": 2}, Vector{"a": 2, "b": 2}, Before},
		{"missing replica", Vector{"a": 1}, Vector{"a": 1, "b": 1}, Before},
		{"after", Vector{"a": 3, "b": 1}, Vector{"a": 2}, After},
		{"after with zero entry on the other side", Vector{"a": 1}, Vector{"a": 1, "b": 0}, Equal},
		{"concurrent counters", Vector{"a": 2, "b": 1}, Vector{"a": 1, "b": 2}, Concurrent},
		{"concurrent replicas", Vector{"a": 1}, Vector{"b": 1}, Concurrent},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Compare(tt.a, tt.b); got != tt.want {
				t.Errorf("Compare(%v, %v) = %v, want %v", tt.a, tt.b, got, tt.want)
			}
			wantDescends := tt.want == After || tt.want == Equal
			if got := Descends(tt.a, tt.b); got != wantDescends {
				t.Errorf("Descends(%v, %v) = %v, want %v", tt.a, tt.b, got, wantDescends)
			}
		})
	}
}

func TestIncrement(t *testing.T) {
	tests := []struct {
		name    string
		v       Vector
		replica string
		want    Vector
	}{
		{"nil vector", nil, "a", Vector{"a": 1}},
		{"existing replica", Vector{"a": 4, "b": 1}, "a", Vector{"a": 5, "b": 1}},
		{"new replica", Vector{"a": 4}, "b", Vector{"a": 4, "b": 1}},
		{"zero entry dropped", Vector{"a": 0, "b": 2}, "b", Vector{"b": 3}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := maps.Clone(tt.v)
			got := tt.v.Increment(tt.replica)
			if !maps.Equal(got, tt.want) {
				t.Errorf("Increment = %v, want %v", got, tt.want)
			}
			if !maps.Equal(tt.v, before) {
				t.Errorf("Increment modified its receiver: %v, was %v", tt.v, before)
			}
			if Compare(got, tt.v) != After {
				t.Errorf("Compare(incremented, original) = %v, want after", Compare(got, tt.v))
			}
		})
	}
	t.Run("overflow panics", func(t *testing.T) {
		defer func() {
			if recover() == nil {
				t.Error("Increment of a counter at 2⁶⁴−1 did not panic")
			}
		}()
		Vector{"a": math.MaxUint64}.Increment("a")
	})
}

func TestPruneVector(t *testing.T) {
	v := Vector{"a": 1, "old": 7, "b": 0}
	got := v.Prune("old", "gone")
	if want := (Vector{"a": 1}); !maps.Equal(got, want) {
		t.Errorf("Prune = %v, want %v", got, want)
	}
	if v["old"] != 7 {
		t.Error("Prune modified its receiver")
	}
}

func TestOrderingString(t *testing.T) {
	for o, want := range map[Ordering]string{Equal: "equal", Before: "before", After: "after", Concurrent: "concurrent", 9: "Ordering(9)"} {
		if got := o.String(); got != want {
			t.Errorf("Ordering(%d).String() = %q, want %q", o, got, want)
		}
	}
}

// --- Laws, as plain functions so that mutant_test.go can run them against
// broken implementations and check that they catch the bug. ---

var lawIDs = []string{"a", "b", "c", "d"}

// genVector draws small vectors over a few replicas, with explicit zero
// entries now and then (they must mean the same as missing ones).
func genVector() *rapid.Generator[Vector] {
	return rapid.Custom(func(t *rapid.T) Vector {
		v := Vector{}
		for _, id := range lawIDs {
			if rapid.Bool().Draw(t, "has_"+id) {
				v[id] = rapid.Uint64Range(0, 4).Draw(t, id)
			}
		}
		return v
	})
}

// sameVector is equality of vectors as causal histories (zero entries are
// missing ones), independent of Compare so that it can judge Compare.
func sameVector(x, y Vector) bool {
	for id, n := range x {
		if y[id] != n {
			return false
		}
	}
	for id, n := range y {
		if x[id] != n {
			return false
		}
	}
	return true
}

type mergeFunc func(a, b Vector) Vector

// mergeLaws checks that merge is the least upper bound: commutative,
// associative, idempotent, an upper bound of both sides and no more, and
// that it leaves its arguments alone.
func mergeLaws(merge mergeFunc, a, b, c Vector) error {
	a0, b0 := maps.Clone(a), maps.Clone(b)
	ab := merge(a, b)
	if !maps.Equal(a, a0) || !maps.Equal(b, b0) {
		return fmt.Errorf("merge modified its arguments")
	}
	if ba := merge(b, a); !sameVector(ab, ba) {
		return fmt.Errorf("not commutative: merge(%v, %v) = %v, merge(b, a) = %v", a, b, ab, ba)
	}
	if l, r := merge(ab, c), merge(a, merge(b, c)); !sameVector(l, r) {
		return fmt.Errorf("not associative: (%v ⊔ %v) ⊔ %v = %v, but a ⊔ (b ⊔ c) = %v", a, b, c, l, r)
	}
	if aa := merge(a, a); !sameVector(aa, a) {
		return fmt.Errorf("not idempotent: merge(%v, itself) = %v", a, aa)
	}
	for _, id := range lawIDs {
		if ab[id] < a[id] || ab[id] < b[id] {
			return fmt.Errorf("not an upper bound: merge(%v, %v) = %v", a, b, ab)
		}
		if ab[id] > max(a[id], b[id]) {
			return fmt.Errorf("not the least upper bound: merge(%v, %v) = %v", a, b, ab)
		}
	}
	for id := range ab {
		if ab[id] != 0 && a[id] == 0 && b[id] == 0 {
			return fmt.Errorf("merge(%v, %v) = %v invents replica %q", a, b, ab, id)
		}
	}
	return nil
}

type compareFunc func(a, b Vector) Ordering

var inverse = map[Ordering]Ordering{Equal: Equal, Before: After, After: Before, Concurrent: Concurrent}

// compareLaws checks that compare agrees with merge (a is before b exactly
// when merging a into b changes nothing in b, and so on) and is
// antisymmetric, and that Descends agrees with compare.
func compareLaws(compare compareFunc, a, b Vector) error {
	o := compare(a, b)
	m := Merge(a, b)
	var want Ordering
	switch {
	case sameVector(a, b):
		want = Equal
	case sameVector(m, b):
		want = Before
	case sameVector(m, a):
		want = After
	default:
		want = Concurrent
	}
	if o != want {
		return fmt.Errorf("compare(%v, %v) = %v, but their merge %v says %v", a, b, o, m, want)
	}
	if r := compare(b, a); r != inverse[o] {
		return fmt.Errorf("not antisymmetric: compare(a, b) = %v, compare(b, a) = %v for a=%v b=%v", o, r, a, b)
	}
	if d := Descends(a, b); d != (o == After || o == Equal) {
		return fmt.Errorf("Descends(%v, %v) = %v, but compare says %v", a, b, d, o)
	}
	return nil
}

func TestVectorLaws(t *testing.T) {
	t.Run("merge is the least upper bound", rapid.MakeCheck(func(t *rapid.T) {
		a, b, c := genVector().Draw(t, "a"), genVector().Draw(t, "b"), genVector().Draw(t, "c")
		if err := mergeLaws(Merge, a, b, c); err != nil {
			t.Fatal(err)
		}
	}))
	t.Run("compare is consistent with merge", rapid.MakeCheck(func(t *rapid.T) {
		a, b := genVector().Draw(t, "a"), genVector().Draw(t, "b")
		if err := compareLaws(Compare, a, b); err != nil {
			t.Fatal(err)
		}
	}))
	t.Run("increment is strictly after", rapid.MakeCheck(func(t *rapid.T) {
		v := genVector().Draw(t, "v")
		id := rapid.SampledFrom(lawIDs).Draw(t, "replica")
		w := v.Increment(id)
		if Compare(w, v) != After || w[id] != v[id]+1 {
			t.Fatalf("%v.Increment(%q) = %v", v, id, w)
		}
	}))
	t.Run("encodings round-trip", rapid.MakeCheck(func(t *rapid.T) {
		v := genVector().Draw(t, "v")
		b, err := v.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		var back Vector
		if err := back.UnmarshalBinary(b); err != nil || !sameVector(back, v) {
			t.Fatalf("binary %x of %v decodes to %v, %v", b, v, back, err)
		}
		j, err := v.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		back = nil
		if err := back.UnmarshalJSON(j); err != nil || !sameVector(back, v) {
			t.Fatalf("JSON %s of %v decodes to %v, %v", j, v, back, err)
		}
	}))
}
