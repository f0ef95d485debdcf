package lab

import (
	"math/rand/v2"
	"slices"
	"strconv"
)

// keySpace is a cell's keys and how an operation picks them.
type keySpace struct {
	// names are the keys, by Zipf rank (the hottest first).
	names []string
	// group, when above 0, keeps the keys of an operation in one group
	// of consecutive ranks: group keys each, the last one taking the
	// remainder. A group's keys share a hash tag ("{g7}k73").
	group int
}

// newKeySpace returns the n keys of a cell of workload wl: "k0", "k1",
// ...; on a backend whose multi-key commits keep to groups of keyGroup
// keys (backends.Spec.KeyGroup: a Redis Cluster's hash slot), a multi-key
// workload's keys carry their group's hash tag and an operation picks its
// keys within one group.
func newKeySpace(keyGroup int, wl *workloadSpec, n int) keySpace {
	ks := keySpace{names: make([]string, n)}
	if wl.KeysPerOp > 1 {
		ks.group = keyGroup
	}
	for i := range ks.names {
		ks.names[i] = "k" + strconv.Itoa(i)
		if ks.group > 0 {
			lo, _ := ks.bounds(i)
			ks.names[i] = "{g" + strconv.Itoa(lo/ks.group) + "}" + ks.names[i]
		}
	}
	return ks
}

// bounds returns the ranks [lo, hi) of the group of rank r.
func (ks keySpace) bounds(r int) (lo, hi int) {
	n := len(ks.names)
	groups := max(1, n/ks.group)
	g := min(r/ks.group, groups-1)
	lo, hi = g*ks.group, (g+1)*ks.group
	if g == groups-1 {
		hi = n
	}
	return lo, hi
}

// pick fills buf with distinct keys for one operation: the first from the
// Zipf law, each next one drawn again until it differs (after 32 equal
// draws, the next key in rank order). In a grouped key space the keys
// after the first are drawn uniformly from the first one's group.
func (ks keySpace) pick(r *rand.Rand, z *zipfDist, buf []string) []string {
	if ks.group <= 0 || len(buf) < 2 {
		return pickKeys(r, z, ks.names, buf)
	}
	var ranks [4]int
	ranks[0] = z.Next(r)
	lo, hi := ks.bounds(ranks[0])
	buf[0] = ks.names[ranks[0]]
	for i := 1; i < len(buf); i++ {
		k := lo + r.IntN(hi-lo)
		for slices.Contains(ranks[:i], k) {
			k = lo + (k-lo+1)%(hi-lo)
		}
		ranks[i] = k
		buf[i] = ks.names[k]
	}
	return buf
}
