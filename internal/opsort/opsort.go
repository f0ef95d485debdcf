// Package opsort orders the operations of a multi-key commit by key: the
// order in which the SQL adapters lock and write rows, so that two
// commits on overlapping keys cannot deadlock.
package opsort

import (
	"cmp"
	"slices"

	"github.com/occkit/occkit/cas"
)

// Order returns the indexes of ops in key order.
func Order(ops []cas.Op) []int {
	order := make([]int, len(ops))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return cmp.Compare(ops[a].Key, ops[b].Key) })
	return order
}
