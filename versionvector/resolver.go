package versionvector

import "cmp"

// Resolver collapses siblings into one value. It is called with two or more
// siblings, in the order [Set.Values] gives (by the ID of the replica that
// stored them, then oldest first; on a write, the new value comes last), in a
// slice it may keep or modify.
//
// A Resolver must be a pure function of its argument, so that every store
// that resolves the same siblings gets the same value, and must be safe for
// concurrent use. A resolved value replaces the siblings it was made from:
// whatever the resolver leaves out is gone, so choose it for what the data
// means (a union of carts, a sum of per-replica counters, the latest
// profile).
type Resolver[T any] func(siblings []T) T

// LastWriterWins returns a Resolver that keeps the sibling whose field (a
// timestamp, a sequence number the user picks) is largest; on a tie, the
// one that comes last. The others are dropped: use it only where losing a
// concurrent write is acceptable, and with clocks close enough for the
// field to mean "later".
func LastWriterWins[T any, K cmp.Ordered](field func(v T) K) Resolver[T] {
	return func(siblings []T) T {
		best := siblings[0]
		bestKey := field(best)
		for _, v := range siblings[1:] {
			if k := field(v); cmp.Compare(k, bestKey) >= 0 {
				best, bestKey = v, k
			}
		}
		return best
	}
}

// MergeWith returns a Resolver that folds the siblings with merge, left to
// right: merge(merge(s0, s1), s2)... For the result not to depend on the
// order, merge should be commutative, associative and idempotent, as a set
// union or an element-wise maximum is.
func MergeWith[T any](merge func(a, b T) T) Resolver[T] {
	return func(siblings []T) T {
		acc := siblings[0]
		for _, v := range siblings[1:] {
			acc = merge(acc, v)
		}
		return acc
	}
}
