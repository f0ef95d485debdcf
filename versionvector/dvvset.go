package versionvector

import (
	"fmt"
	"math"
	"slices"
	"strings"
)

// Set is a dotted version vector set (DVVSet): the concurrent values
// (siblings) of one key, with just enough causal information to tell which
// writes a later write has seen.
//
// Every write gets a dot: the ID of the replica that stored it and that
// replica's next counter. For each replica the set keeps one entry: the
// largest counter it has seen from that replica, and the values of the
// latest dots of that replica that no write has superseded yet. A write
// made with a causal context (the [Set.Join] a client read) discards exactly
// the values whose dots the context covers, so the siblings are always the
// writes no later write has seen: never more (repeated or stale contexts do
// not pile up copies), never fewer (nothing unseen is dropped). The size is
// one entry per replica plus the siblings, whatever the number of clients.
//
// Two rules keep the dots unique, which everything else relies on: a replica
// ID is used by one store only (a replica's writes go through that store's
// compare-and-swap, one at a time), and a key holding a set is never deleted
// and re-created (that would reuse counters); write a tombstone value
// instead.
//
// The zero Set is the empty set. Sets are values: every method returns a new
// Set and leaves its receiver and arguments unchanged, so a Set is safe for
// concurrent use (the values of type T are shared between sets, not copied).
type Set[T any] struct {
	entries []entry[T] // sorted by id, ids unique, n ≥ 1, len(vals) ≤ n
}

// entry is what a set knows of one replica: it has seen the dots (id, 1)
// to (id, n), and vals are the values of the dots (id, n−len(vals)+1) to
// (id, n) that are still siblings, oldest first.
type entry[T any] struct {
	id   string
	n    uint64
	vals []T
}

// low is the largest counter of this replica whose dot is known to be
// superseded: dots (id, 1) to (id, low) are dead.
func (e entry[T]) low() uint64 { return e.n - uint64(len(e.vals)) }

// last returns the values of the latest k dots, copied.
func (e entry[T]) last(k uint64) []T {
	if k == 0 {
		return nil
	}
	return slices.Clone(e.vals[uint64(len(e.vals))-k:])
}

// NewSet returns the set holding one value, written at replica by a writer
// that had read nothing: Set[T]{}.Update(nil, replica, v). The zero Set is
// the empty set.
func NewSet[T any](replica string, v T) Set[T] {
	return Set[T]{}.Update(nil, replica, v)
}

// Len returns the number of siblings.
func (s Set[T]) Len() int {
	n := 0
	for _, e := range s.entries {
		n += len(e.vals)
	}
	return n
}

// Values returns the siblings: the values no write has superseded, in a
// deterministic order (by the ID of the replica that stored them, then
// oldest first), the same on every store that holds the same set.
func (s Set[T]) Values() []T {
	out := make([]T, 0, s.Len())
	for _, e := range s.entries {
		out = append(out, e.vals...)
	}
	return out
}

// Join returns the causal context of the set: for each replica, the largest
// counter the set has seen. A write made with it supersedes every value of
// the set.
func (s Set[T]) Join() Vector {
	out := make(Vector, len(s.entries))
	for _, e := range s.entries {
		out[e.id] = e.n
	}
	return out
}

// Discard returns the set without the values whose dots cc covers: what is
// left after a client that read cc has written. The result's Join is
// Merge(s.Join(), cc): the set remembers that those dots were superseded.
func (s Set[T]) Discard(cc Vector) Set[T] {
	ids := make([]string, 0, len(s.entries)+len(cc))
	for _, e := range s.entries {
		ids = append(ids, e.id)
	}
	for id, c := range cc {
		if c != 0 {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	ids = slices.Compact(ids)
	out := Set[T]{entries: make([]entry[T], 0, len(ids))}
	i := 0
	for _, id := range ids {
		var e entry[T]
		if i < len(s.entries) && s.entries[i].id == id {
			e = s.entries[i]
			i++
		} else {
			e.id = id
		}
		c := cc[id]
		var vals []T
		if e.n > c {
			vals = e.last(min(uint64(len(e.vals)), e.n-c))
		}
		out.entries = append(out.entries, entry[T]{id: id, n: max(e.n, c), vals: vals})
	}
	return out
}

// Update returns the set after a write of v at replica by a client that had
// read the context cc (nil if it read nothing): the values cc covers are
// discarded and v becomes a sibling of what is left, with the dot
// (replica, c+1), where c is the larger of the set's and cc's counters for
// replica. The result's Join descends from cc and from s.Join().
//
// It panics if that counter overflows (possible only with a forged counter of
// 2⁶⁴−1; [Register.Put] checks and fails with ErrCounterOverflow instead).
func (s Set[T]) Update(cc Vector, replica string, v T) Set[T] {
	out := s.Discard(cc)
	i, ok := slices.BinarySearchFunc(out.entries, replica, func(e entry[T], id string) int { return strings.Compare(e.id, id) })
	if !ok {
		out.entries = slices.Insert(out.entries, i, entry[T]{id: replica})
	}
	e := &out.entries[i]
	if e.n == math.MaxUint64 {
		panic(fmt.Sprintf("versionvector: counter of replica %q overflows", replica))
	}
	e.n++
	e.vals = append(e.vals, v)
	return out
}

// nextCounter returns the counter Update(cc, replica, ...) would give the
// new dot, and false if it overflows.
func (s Set[T]) nextCounter(cc Vector, replica string) (uint64, bool) {
	c := cc[replica]
	for _, e := range s.entries {
		if e.id == replica {
			c = max(c, e.n)
		}
	}
	return c + 1, c != math.MaxUint64
}

// Sync returns the union of s and t, two versions of the same key's set as
// two stores hold them: every dot either has seen, with the values that
// neither knows to be superseded. Sync is commutative, associative and
// idempotent (for sets whose dots are unique, see [Set]), so stores that
// exchange sets in any order end up equal.
func (s Set[T]) Sync(t Set[T]) Set[T] {
	a, b := s, t
	out := Set[T]{entries: make([]entry[T], 0, max(len(a.entries), len(b.entries)))}
	i, j := 0, 0
	for i < len(a.entries) || j < len(b.entries) {
		switch {
		case j == len(b.entries) || (i < len(a.entries) && a.entries[i].id < b.entries[j].id):
			e := a.entries[i]
			out.entries = append(out.entries, entry[T]{id: e.id, n: e.n, vals: slices.Clone(e.vals)})
			i++
		case i == len(a.entries) || b.entries[j].id < a.entries[i].id:
			e := b.entries[j]
			out.entries = append(out.entries, entry[T]{id: e.id, n: e.n, vals: slices.Clone(e.vals)})
			j++
		default:
			ea, eb := a.entries[i], b.entries[j]
			// A dot is live if one side holds it and the other has not
			// seen it superseded: the dots above the larger low, up to
			// the larger counter, all held by the side with that counter.
			low := max(ea.low(), eb.low())
			src := ea
			if eb.n > ea.n {
				src = eb
			}
			out.entries = append(out.entries, entry[T]{id: src.id, n: src.n, vals: src.last(src.n - low)})
			i++
			j++
		}
	}
	return out
}

// Prune returns the set without the entries of retired replicas that hold no
// sibling. An entry that still holds a sibling is kept: dropping it would
// lose a write nobody has seen.
//
// Prune a replica only once it will never write again and anti-entropy has
// brought every store up to date with it: a store that still held one of
// its superseded values would otherwise bring it back to life on the next
// Sync. A client still holding an old context only re-adds the entry,
// without values.
func (s Set[T]) Prune(retired ...string) Set[T] {
	out := Set[T]{entries: make([]entry[T], 0, len(s.entries))}
	for _, e := range s.entries {
		if len(e.vals) == 0 && slices.Contains(retired, e.id) {
			continue
		}
		out.entries = append(out.entries, entry[T]{id: e.id, n: e.n, vals: slices.Clone(e.vals)})
	}
	return out
}

// sameDots reports whether a and b have the same entries, counters and
// number of siblings per entry: for sets with unique dots, whether they are
// equal.
func sameDots[T any](a, b Set[T]) bool {
	return slices.EqualFunc(a.entries, b.entries, func(x, y entry[T]) bool {
		return x.id == y.id && x.n == y.n && len(x.vals) == len(y.vals)
	})
}

// String describes the set for debugging: each replica with its counter and
// the counters of its siblings, as in {eu:3[2 3] us:1[]}.
func (s Set[T]) String() string {
	var b strings.Builder
	b.WriteByte('{')
	for i, e := range s.entries {
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%s:%d[", e.id, e.n)
		for k := range e.vals {
			if k > 0 {
				b.WriteByte(' ')
			}
			fmt.Fprint(&b, e.low()+uint64(k)+1)
		}
		b.WriteByte(']')
	}
	b.WriteByte('}')
	return b.String()
}
