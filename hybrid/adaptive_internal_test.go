package hybrid

import (
	"testing"
	"time"
)

// TestAdaptiveModel checks the decision on hand-made estimates: a key
// locks only when the lease path would carry its updates faster, one per
// h/2+dℓ (the acquire and the time an update holds the lease),
// than the optimistic path carries them, a batch of b per attempt time d,
// by LockAbove, and only while half of its attempts conflict; it goes
// back under LockAbove⁻¹ or when conflicts fall under a quarter, and
// keeps its path in between.
func TestAdaptiveModel(t *testing.T) {
	a := NewAdaptive(NewLocalLocker(time.Second), AdaptiveConfig{})
	ms := func(x float64) float64 { return x / 1000 }
	tests := []struct {
		name       string
		locked     bool
		p, d, h    float64
		dl         float64 // seconds an update holds the lease; 0: not measured
		attempts   int
		batch      float64 // st.b; 0: unknown (one update per attempt)
		wantLocked bool
		wantSwitch bool
	}{
		{"nobody else writes", false, 0, ms(4), ms(0.5), ms(0.5), 100, 0, false, false},
		{"too few samples", false, 0.9, ms(4), ms(0.5), ms(0.5), minSamples - 1, 0, false, false},
		// Attempts slowed to 4ms by contention, against a lease path of
		// 0.25+0.5ms an update (h counts an acquire and a release; the
		// held time dℓ holds the release): ratio 5.3 > 1.25.
		{"slow contended attempts", false, 0.9, ms(4), ms(0.5), ms(0.5), 100, 0, true, true},
		// The same, but the lease path was never measured: no lock.
		{"lease path not measured", false, 0.9, ms(4), ms(0.5), 0, 100, 0, false, false},
		// Nine attempts in ten conflict, but each lets a batch through
		// in 1ms, against the lease's 0.25+1ms an update: ratio 0.8,
		// stays optimistic. (Against the lock's round trips alone, a
		// model of waste would have locked.)
		{"frequent conflicts, fast attempts", false, 0.9, ms(1), ms(0.5), ms(1), 100, 0, false, false},
		// Slow attempts, but few conflict: the server is slow for
		// everyone, not contended.
		{"slow server, few conflicts", false, 0.3, ms(4), ms(0.5), ms(0.5), 100, 0, false, false},
		// The slow attempts against a 6ms lock: 4ms against 3+0.5ms.
		{"slow attempts, dear lock", false, 0.9, ms(4), ms(6), ms(0.5), 100, 0, false, false},
		// Ratio 1 (2ms against 1.5+0.5ms) sits inside the hysteresis
		// band: no change either way.
		{"band keeps optimistic", false, 0.9, ms(2), ms(3), ms(0.5), 100, 0, false, false},
		{"band keeps locked", true, 0.9, ms(2), ms(3), ms(0.5), 100, 0, true, false},
		// Probes that saw the attempts speed up bring the key back.
		{"attempts fast again", true, 0.9, ms(0.5), ms(0.5), ms(0.5), 100, 0, false, true},
		// Probes that saw the conflicts stop bring it back too.
		{"conflicts stopped", true, 0.1, ms(4), ms(0.5), ms(0.5), 100, 0, false, true},
		// Unknown overhead: an acquire and a release taken as one
		// attempt's time (4ms against 2+0.5ms): ratio 1.6, locks.
		{"unknown overhead", false, 0.9, ms(4), 0, ms(0.5), 100, 0, true, true},
		// The slow attempts, each carrying a batch of 5 combined
		// updates: 0.8ms an update against 0.75ms, stays optimistic.
		{"slow attempts, batches of 5", false, 0.9, ms(4), ms(0.5), ms(0.5), 100, 5, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := &keyStat{p: tt.p, d: tt.d, h: tt.h, dl: tt.dl, attempts: tt.attempts, b: tt.batch}
			st.locked.Store(tt.locked)
			switched, ratio := a.judge(st)
			if st.locked.Load() != tt.wantLocked || switched != tt.wantSwitch {
				t.Fatalf("locked %v switched %v (ratio %.2f), want locked %v switched %v", st.locked.Load(), switched, ratio, tt.wantLocked, tt.wantSwitch)
			}
		})
	}
}

// TestAdaptiveLockOverheadFollowsFastGrants: waits in the lock's queue
// are not counted as its overhead.
func TestAdaptiveLockOverheadFollowsFastGrants(t *testing.T) {
	a := NewAdaptive(NewLocalLocker(time.Second), AdaptiveConfig{})
	a.track("k")
	a.observeLock("k", time.Millisecond)
	for range 50 {
		a.observeLock("k", 40*time.Millisecond) // queued behind others
	}
	a.observeLock("k", 900*time.Microsecond)
	st := a.stat("k")
	if st.h > 0.0012 {
		t.Fatalf("overhead estimate %.4fs after fast grants of ~1ms and queued ones of 40ms", st.h)
	}
}

// TestAdaptiveBatchEstimate: the updates begun on the optimistic path
// between two successful writes of a key are the batch the model divides
// an attempt's time by; conflicts and a locked key's probes leave it.
func TestAdaptiveBatchEstimate(t *testing.T) {
	a := NewAdaptive(NewLocalLocker(time.Second), AdaptiveConfig{})
	a.track("k")
	for range 8 {
		a.begin("k")
	}
	a.observeAttempt("k", true, time.Millisecond) // a conflict: no batch sample
	a.observeAttempt("k", false, time.Millisecond)
	st := a.stat("k")
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

// TestAdaptiveLocksOnceTheLeaseMeasuresFaster: slow attempts that
// conflict do not lock a key while the lease path is unmeasured; once an
// update on the lease path (an optimistic one that ran out of attempts)
// measures it at 0.1+0.5ms an update against 4ms an attempt, the key
// locks; probes that see fast attempts without conflicts bring it back.
func TestAdaptiveLocksOnceTheLeaseMeasuresFaster(t *testing.T) {
	a := NewAdaptive(NewLocalLocker(time.Second), AdaptiveConfig{})
	for range 20 {
		a.observeAttempt("k", true, 4*time.Millisecond)
	}
	st := a.stat("k")
	if st.locked.Load() {
		t.Fatal("locked before the lease path was measured")
	}
	a.observeLock("k", 200*time.Microsecond)
	a.observeLeased("k", 500*time.Microsecond)
	if !st.locked.Load() {
		t.Fatalf("not locked: attempts %.2fms, lease %.2f+%.2fms an update", st.d*1e3, st.h*1e3, st.dl*1e3)
	}
	for range 40 {
		a.observeAttempt("k", false, 300*time.Microsecond)
	}
	if st.locked.Load() {
		t.Fatalf("still locked after fast probes without conflicts (p %.2f, d %.2fms)", st.p, st.d*1e3)
	}
	if st.dl != 0 {
		t.Fatalf("the lease estimate %.2fms outlived the lock: the key must measure the lease again before locking again", st.dl*1e3)
	}
}
