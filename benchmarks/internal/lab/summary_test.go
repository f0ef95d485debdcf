package lab

import (
	"strings"
	"testing"
)

// TestSummary: the summary compares each point's best occkit strategy
// with its best cross-process lock (lock-local and the HTTP strategies
// are no rivals there), lists the points a lock won, worst first, and
// counts failed operations and broken invariants.
func TestSummary(t *testing.T) {
	cell := func(backend, strategy string, keys int, ops float64, failed int64) Result {
		return Result{Backend: backend, Workload: "counter", Strategy: strategy, Workers: 8, Keys: keys, Throughput: ops,
			TotalFailedOps: failed, WorkersCommitted: 8, InvariantOK: true, Procs: 1}
	}
	broken := cell("x", "occ-cached", 1, 1e9, 0)
	broken.InvariantOK = false
	cells := []Result{
		// x, 1000 keys: occ 3× FOR UPDATE; lock-local's 10,000 does not count.
		cell("x", "occ", 1000, 3000, 0), cell("x", "lock-pg-for-update", 1000, 1000, 0), cell("x", "lock-local", 1000, 10000, 0),
		// x, 1 key: occ-combine 2×; lock-http is no rival here.
		cell("x", "occ", 1, 500, 2), cell("x", "occ-combine", 1, 2000, 0), cell("x", "lock-pg-for-update", 1, 1000, 0), cell("x", "lock-http", 1, 5000, 0),
		broken,
		// y, 1 key: the lock wins, 0.5×; y, 1000 keys: 0.8×.
		cell("y", "occ", 1, 500, 0), cell("y", "lock-redis", 1, 1000, 3),
		cell("y", "occ", 1000, 800, 0), cell("y", "lock-redis", 1000, 1000, 0),
	}
	s := summarize(cells, []goalCheck{{Status: goalMet}, {Status: goalNotMet}, {Status: goalNA}})
	if s.Points != 4 || s.Wins != 2 || s.MinRatio != 0.5 || s.MaxRatio != 3 || s.MedianRatio != 1.4 {
		t.Errorf("points %d, wins %d, ratios %.2f–%.2f median %.2f; want 4, 2, 0.50–3.00 median 1.40", s.Points, s.Wins, s.MinRatio, s.MaxRatio, s.MedianRatio)
	}
	if len(s.LockWins) != 2 || !strings.HasPrefix(s.LockWins[0], "y counter 8w 1k:") || !strings.Contains(s.LockWins[0], "(0.50×)") {
		t.Errorf("lock wins %q, want y's 1-key point first", s.LockWins)
	}
	if s.FailedOcc != 2 || s.FailedLocks != 3 || len(s.FailedCells) != 1 || s.Violations != 1 || s.GoalsMet != 1 || s.GoalsNotMet != 1 {
		t.Errorf("summary %+v", s)
	}
	lines := strings.Join(s.Lines(), "\n")
	for _, want := range []string{"at 2 of 4 points: median 1.40×", "A lock still won at 2 point(s)", "2 in occkit's cells (x counter 8w 1k occ: 2)", "1 INVARIANT VIOLATION"} {
		if !strings.Contains(lines, want) {
			t.Errorf("summary lacks %q:\n%s", want, lines)
		}
	}
}

// TestMarkBlindWrite: a cell's fraction of blind-write is set only at
// the points where blind-write ran, and from that point's cell.
func TestMarkBlindWrite(t *testing.T) {
	cells := []Result{
		{Backend: "postgres", Workload: "inventory", Workers: 8, Keys: 1, Strategy: "blind-write", Throughput: 1000, InvariantOK: true},
		{Backend: "postgres", Workload: "inventory", Workers: 8, Keys: 1, Strategy: "delta", Throughput: 800, InvariantOK: true},
		{Backend: "postgres", Workload: "inventory", Workers: 8, Keys: 1000, Strategy: "delta", Throughput: 500, InvariantOK: true},
		{Backend: "postgres", Workload: "inventory", Workers: 8, Keys: 1, Procs: 8, Strategy: "delta", Throughput: 900, InvariantOK: true},
	}
	markBlindWrite(cells)
	for i, want := range []float64{1, 0.8, 0, 0} {
		if got := cells[i].OfBlindWrite; got != want {
			t.Errorf("cell %d (%s %d keys, %d procs): %v of blind-write, want %v", i, cells[i].Strategy, cells[i].Keys, cells[i].Procs, got, want)
		}
	}
}
