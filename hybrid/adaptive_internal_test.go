package hybrid

import (
	"testing"
	"time"
)

// TestAdaptiveModel checks the decision on hand-made estimates: a key
// locks only when the optimistic path's expected waste, p/(1-p)·d/b, exceeds
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
		batch      float64 // st.b; 0: unknown (one update per attempt)
		wantLocked bool
		wantSwitch bool
	}{
		{"nobody else writes", false, 0, ms(1), ms(0.5), 100, 0, false, false},
		{"too few samples", false, 0.9, ms(1), ms(0.5), minSamples - 1, 0, false, false},
		{"rare conflicts, cheap lock", false, 0.1, ms(1), ms(0.5), 100, 0, false, false},
		// 0.5/(1-0.5)·1ms = 1ms waste vs 0.5ms overhead: ratio 2 > 1.25.
		{"frequent conflicts", false, 0.5, ms(1), ms(0.5), 100, 0, true, true},
		// Same waste against a 2ms lock: ratio 0.5, stays optimistic.
		{"frequent conflicts, dear lock", false, 0.5, ms(1), ms(2), 100, 0, false, false},
		// Ratio 1 sits inside the hysteresis band: no change either way.
		{"band keeps optimistic", false, 0.5, ms(1), ms(1), 100, 0, false, false},
		{"band keeps locked", true, 0.5, ms(1), ms(1), 100, 0, true, false},
		// A probe that saw the conflicts stop brings the key back.
		{"conflicts stopped", true, 0.05, ms(1), ms(1), 100, 0, false, true},
		// Unknown overhead: taken as one attempt's time.
		{"unknown overhead", false, 0.75, ms(1), 0, 100, 0, true, true},
		// The frequent conflicts above, but each attempt carries a
		// batch of 4 combined updates: 0.25ms waste per update against
		// 0.5ms overhead, ratio 0.5: stays optimistic.
		{"frequent conflicts, batches of 4", false, 0.5, ms(1), ms(0.5), 100, 4, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := &keyStat{p: tt.p, d: tt.d, h: tt.h, attempts: tt.attempts, b: tt.batch}
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

// TestAdaptiveBatchEstimate: the updates begun on the optimistic path
// between two successful writes of a key are the batch the model divides
// an attempt's waste by; conflicts and a locked key's probes leave it.
func TestAdaptiveBatchEstimate(t *testing.T) {
	a := NewAdaptive(NewLocalLocker(time.Second), AdaptiveConfig{})
	for range 8 {
		a.begin("k")
	}
	a.observeAttempt("k", true, time.Millisecond) // a conflict: no batch sample
	a.observeAttempt("k", false, time.Millisecond)
	st := a.shard("k").keys["k"]
	if st.b != 8 {
		t.Fatalf("batch %v after 8 updates and one write, want 8", st.b)
	}
	for range 4 {
		a.begin("k")
	}
	a.observeAttempt("k", false, time.Millisecond)
	if want := 0.1*4 + 0.9*8; st.b < want-1e-9 || st.b > want+1e-9 {
		t.Fatalf("batch %v, want %v", st.b, want)
	}
	st.locked.Store(true)
	a.observeAttempt("k", false, time.Millisecond) // a probe's success
	if want := 0.1*4 + 0.9*8; st.b < want-1e-9 || st.b > want+1e-9 {
		t.Fatalf("a probe moved the batch to %v", st.b)
	}
}
