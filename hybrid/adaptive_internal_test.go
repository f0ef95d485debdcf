package hybrid

import (
	"testing"
	"time"
)

// TestAdaptiveModel checks the decision on hand-made estimates: a key
// locks only when the optimistic path's expected waste, p/(1-p)·d, exceeds
// LockAbove times the lease overhead, goes back only under its inverse,
// and keeps its path in between.
func TestAdaptiveModel(t *testing.T) {
	a := NewAdaptive(NewLocalLocker(time.Second), AdaptiveConfig{})
	ms := func(x float64) float64 { return x / 1000 }
	tests := []struct {
		name       string
		locked     bool
		p, d, h    float64
		attempts   int
		wantLocked bool
		wantSwitch bool
	}{
		{"nobody else writes", false, 0, ms(1), ms(0.5), 100, false, false},
		{"too few samples", false, 0.9, ms(1), ms(0.5), minSamples - 1, false, false},
		{"rare conflicts, cheap lock", false, 0.1, ms(1), ms(0.5), 100, false, false},
		// 0.5/(1-0.5)·1ms = 1ms waste vs 0.5ms overhead: ratio 2 > 1.25.
		{"frequent conflicts", false, 0.5, ms(1), ms(0.5), 100, true, true},
		// Same waste against a 2ms lock: ratio 0.5, stays optimistic.
		{"frequent conflicts, dear lock", false, 0.5, ms(1), ms(2), 100, false, false},
		// Ratio 1 sits inside the hysteresis band: no change either way.
		{"band keeps optimistic", false, 0.5, ms(1), ms(1), 100, false, false},
		{"band keeps locked", true, 0.5, ms(1), ms(1), 100, true, false},
		// A probe that saw the conflicts stop brings the key back.
		{"conflicts stopped", true, 0.05, ms(1), ms(1), 100, false, true},
		// Unknown overhead: taken as one attempt's time.
		{"unknown overhead", false, 0.75, ms(1), 0, 100, true, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := &keyStat{p: tt.p, d: tt.d, h: tt.h, attempts: tt.attempts}
			st.locked.Store(tt.locked)
			switched, _ := a.judge(st)
			if st.locked.Load() != tt.wantLocked || switched != tt.wantSwitch {
				t.Fatalf("locked %v switched %v, want locked %v switched %v", st.locked.Load(), switched, tt.wantLocked, tt.wantSwitch)
			}
		})
	}
}

// TestAdaptiveLockOverheadFollowsFastGrants: waits in the lock's queue
// are not counted as its overhead.
func TestAdaptiveLockOverheadFollowsFastGrants(t *testing.T) {
	a := NewAdaptive(NewLocalLocker(time.Second), AdaptiveConfig{})
	_, _ = a.begin("k")
	a.observeLock("k", time.Millisecond)
	for range 50 {
		a.observeLock("k", 40*time.Millisecond) // queued behind others
	}
	a.observeLock("k", 900*time.Microsecond)
	st := a.shard("k").keys["k"]
	if st.h > 0.0012 {
		t.Fatalf("overhead estimate %.4fs after fast grants of ~1ms and queued ones of 40ms", st.h)
	}
}
