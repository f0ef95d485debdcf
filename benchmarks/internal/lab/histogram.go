package lab

import (
	"math/bits"
	"time"
)

// histSub is the number of linear sub-buckets per power of two: values are
// kept to within 1/histSub (under 0.8%) of their true size.
const histSub = 128

// histBuckets covers durations up to 2^63 ns.
const histBuckets = (64-7)*histSub + 2*histSub

// latencyHistogram records durations in log-linear buckets, as HDR histograms do:
// exact below 128 ns, then 128 buckets per power of two, so every recorded
// value is known to within 0.8% whatever its size, in fixed memory (about
// 60 KiB). The zero value is ready to use. A latencyHistogram is not safe for
// concurrent use: the lab keeps one per worker and merges them.
type latencyHistogram struct {
	counts []uint64
	n      uint64
	max    time.Duration
}

// histIndex returns the bucket of v ns: v itself below 256, otherwise
// (e << 7) + (v >> e) where e is how many low bits are dropped.
func histIndex(v uint64) int {
	e := max(bits.Len64(v)-8, 0)
	return e<<7 + int(v>>e)
}

// histBounds returns the smallest and largest value of bucket i.
func histBounds(i int) (lo, hi uint64) {
	if i < 2*histSub {
		return uint64(i), uint64(i)
	}
	e := uint(i>>7 - 1)
	m := uint64(i - int(e)<<7)
	return m << e, (m+1)<<e - 1
}

// Record adds one duration (negative ones count as 0).
func (h *latencyHistogram) Record(d time.Duration) {
	if h.counts == nil {
		h.counts = make([]uint64, histBuckets)
	}
	v := uint64(max(d, 0))
	h.counts[histIndex(v)]++
	h.n++
	h.max = max(h.max, d)
}

// Merge adds o's counts to h.
func (h *latencyHistogram) Merge(o *latencyHistogram) {
	if o.n == 0 {
		return
	}
	if h.counts == nil {
		h.counts = make([]uint64, histBuckets)
	}
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.n += o.n
	h.max = max(h.max, o.max)
}

// Max returns the largest recorded duration.
func (h *latencyHistogram) Max() time.Duration { return h.max }

// Quantile returns the q-quantile (0 < q ≤ 1) of the recorded durations:
// the middle of the bucket holding the ⌈q·n⌉-th smallest value, never more
// than the largest value recorded. It returns 0 when nothing was recorded.
func (h *latencyHistogram) Quantile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	rank := uint64(q*float64(h.n) + 0.9999999)
	rank = min(max(rank, 1), h.n)
	var seen uint64
	for i, c := range h.counts {
		if c == 0 {
			continue
		}
		seen += c
		if seen >= rank {
			lo, hi := histBounds(i)
			return min(time.Duration(lo+(hi-lo)/2), h.max)
		}
	}
	return h.max
}
