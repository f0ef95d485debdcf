package versionvector

import (
	"fmt"
	"math"
	"slices"
)

// Vector is a version vector: for each replica ID, how many events of that
// replica are known. A missing entry is 0, and an entry holding 0 means the
// same as a missing one.
//
// Vectors are values: Increment, Merge, Prune and Clone return new vectors
// and never modify their arguments. A Vector is safe for concurrent reads;
// like any map, it must not be written while another goroutine uses it.
type Vector map[string]uint64

// Ordering is how two vectors relate in the causal order. It is a plain
// value, safe for concurrent use.
type Ordering int8

// The four possible orderings of two vectors a and b, as returned by
// Compare(a, b).
const (
	// Equal: a and b know the same events.
	Equal Ordering = iota
	// Before: b knows every event a knows, and more; a happened before b.
	Before
	// After: a knows every event b knows, and more; b happened before a.
	After
	// Concurrent: each knows an event the other does not.
	Concurrent
)

// String returns "equal", "before", "after" or "concurrent".
func (o Ordering) String() string {
	switch o {
	case Equal:
		return "equal"
	case Before:
		return "before"
	case After:
		return "after"
	case Concurrent:
		return "concurrent"
	}
	return fmt.Sprintf("Ordering(%d)", int8(o))
}

// Increment returns a new vector with replica's counter one larger: the
// vector of a new event at replica that follows every event v knows. It
// panics if the counter is already 2⁶⁴−1, which counting cannot reach.
func (v Vector) Increment(replica string) Vector {
	c := v[replica]
	if c == math.MaxUint64 {
		panic(fmt.Sprintf("versionvector: counter of replica %q overflows", replica))
	}
	out := make(Vector, len(v)+1)
	for id, n := range v {
		if n != 0 {
			out[id] = n
		}
	}
	out[replica] = c + 1
	return out
}

// Clone returns a copy of v without its zero entries. The copy of a nil or
// empty vector is an empty, non-nil vector.
func (v Vector) Clone() Vector {
	out := make(Vector, len(v))
	for id, n := range v {
		if n != 0 {
			out[id] = n
		}
	}
	return out
}

// Prune returns a copy of v without the entries of the retired replicas.
//
// Pruning forgets events, so it changes comparisons: compare a pruned vector
// only with vectors pruned of the same replicas. Prune a replica only once it
// will never write again and every store has received its writes (see
// [Set.Prune] and the package documentation, "Retiring a replica").
func (v Vector) Prune(retired ...string) Vector {
	out := v.Clone()
	for _, id := range retired {
		delete(out, id)
	}
	return out
}

// ids returns the replica IDs with a non-zero counter, sorted.
func (v Vector) ids() []string {
	ids := make([]string, 0, len(v))
	for id, n := range v {
		if n != 0 {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}

// Merge returns the least upper bound of a and b: for each replica, the
// larger of the two counters. It knows every event either knows, and
// nothing more. Merge is commutative, associative and idempotent.
func Merge(a, b Vector) Vector {
	out := make(Vector, max(len(a), len(b)))
	for id, n := range a {
		if n != 0 {
			out[id] = n
		}
	}
	for id, n := range b {
		if n > out[id] {
			out[id] = n
		}
	}
	return out
}

// Compare returns how a relates to b: Equal, Before (b descends from a),
// After (a descends from b) or Concurrent.
func Compare(a, b Vector) Ordering {
	var aAhead, bAhead bool
	for id, x := range a {
		y := b[id]
		if x > y {
			aAhead = true
		} else if x < y {
			bAhead = true
		}
	}
	for id, y := range b {
		if _, ok := a[id]; !ok && y != 0 {
			bAhead = true
		}
	}
	switch {
	case aAhead && bAhead:
		return Concurrent
	case aAhead:
		return After
	case bAhead:
		return Before
	}
	return Equal
}

// Descends reports whether a knows every event b knows (Compare(a, b) is
// After or Equal): a write made with a read at a may overwrite one at b.
func Descends(a, b Vector) bool {
	for id, y := range b {
		if a[id] < y {
			return false
		}
	}
	return true
}
