package hybrid

import (
	"testing"
	"time"
)

// TestNextEpochPolicy drives the epoch policy with measured rates: the
// second epoch explores the lease path, the faster path is kept, one epoch
// in exploreEvery explores the other, and a path is left only for one at least
// 10% faster.
func TestNextEpochPolicy(t *testing.T) {
	a := NewAdaptive(NewLocalLocker(time.Second), AdaptiveConfig{Epoch: 10})
	st := &keyStat{hot: true}
	// run simulates one epoch on the current path at the given rates.
	run := func(optRate, lockRate float64) {
		r := optRate
		if st.locked {
			r = lockRate
		}
		st.started = time.Now().Add(-time.Duration(float64(a.cfg.Epoch) / r * float64(time.Second)))
		a.nextEpoch(st)
	}
	var paths []bool
	for range 34 {
		run(1000, 3000) // the lease path is 3× faster
		paths = append(paths, st.locked)
	}
	if !paths[0] {
		t.Fatal("the second epoch did not explore the lease path")
	}
	explored := 0
	for i, p := range paths[1:] {
		if !p {
			explored++
			if (i+2)%exploreEvery != 0 {
				t.Fatalf("epoch %d left the faster lease path outside an exploring epoch: %v", i+2, paths)
			}
		}
	}
	if !st.best || explored == 0 {
		t.Fatalf("best %v, explored %d: want the lease path kept and the other explored: %v", st.best, explored, paths)
	}
	// Now the optimistic path becomes faster: the key moves back at the
	// next judgment after it is explored.
	for range 2 * exploreEvery {
		run(3000, 1000)
	}
	if st.best {
		t.Fatalf("the lease path is kept though optimistic updates run 3× faster")
	}
	// Within 10%: no change.
	before := st.best
	for range 2 * exploreEvery {
		run(1000, 1050)
	}
	if st.best != before {
		t.Fatalf("switched for a 5%% difference")
	}
}
