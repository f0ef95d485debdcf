package lab

import (
	"fmt"
	"slices"
	"sort"
	"strings"
)

// Summary is what a run says in a few lines: where occkit's strategies
// beat the best lock that works across processes, by how much, where a
// lock still wins, what failed, and how the goals fared. It opens
// report.html and closes the printed report.
type Summary struct {
	// Points is how many points (backend, workload, grid point, setup)
	// had both an occkit strategy and a cross-process lock; Wins how
	// many of them the best occkit strategy won.
	Points int `json:"points"`
	Wins   int `json:"wins"`
	// MedianRatio, MinRatio and MaxRatio are the best occkit strategy's
	// throughput over the best cross-process lock's, across Points.
	MedianRatio float64 `json:"median_ratio"`
	MinRatio    float64 `json:"min_ratio"`
	MaxRatio    float64 `json:"max_ratio"`
	// LockWins are the points a lock won, worst first.
	LockWins []string `json:"lock_wins,omitempty"`
	// FailedOcc and FailedLocks count the operations that failed in
	// occkit's cells and in the locks' (warm-up included); FailedCells
	// names occkit's cells that failed some.
	FailedOcc   int64    `json:"failed_occ"`
	FailedLocks int64    `json:"failed_locks"`
	FailedCells []string `json:"failed_cells,omitempty"`
	// Violations counts broken invariants; GoalsMet and GoalsNotMet the
	// goal checks.
	Violations  int `json:"violations"`
	GoalsMet    int `json:"goals_met"`
	GoalsNotMet int `json:"goals_not_met"`
}

// summarize computes the run's Summary. The HTTP strategies are compared
// among themselves (their own goal), not here; lock-local is a reference
// for one process, not a rival.
func summarize(cells []Result, goals []goalCheck) Summary {
	type pt struct {
		occ, lock  Result
		hasO, hasL bool
	}
	pts := map[string]*pt{}
	var order []string
	var s Summary
	for _, c := range cells {
		spec, ok := lookupStrategy(c.Strategy)
		if !ok {
			continue
		}
		if !c.InvariantOK {
			s.Violations++
			continue
		}
		switch spec.Kind {
		case kindReference:
		case kindLock:
			s.FailedLocks += c.TotalFailedOps
		default:
			s.FailedOcc += c.TotalFailedOps
			if c.TotalFailedOps > 0 {
				s.FailedCells = append(s.FailedCells, fmt.Sprintf("%s %s %s %s%s: %d", c.Backend, c.Workload, c.Point(), c.Strategy, setupSuffix(c), c.TotalFailedOps))
			}
		}
		if spec.HTTP || spec.Kind == kindReference || c.Strategy == "lock-local" || strings.HasSuffix(c.Strategy, "-control") {
			continue
		}
		k := fmt.Sprintf("%s %s %s%s", c.Backend, c.Workload, c.Point(), setupSuffix(c))
		p := pts[k]
		if p == nil {
			p = &pt{}
			pts[k] = p
			order = append(order, k)
		}
		if spec.Kind == kindLock {
			if !p.hasL || c.Throughput > p.lock.Throughput {
				p.lock, p.hasL = c, true
			}
		} else if !p.hasO || c.Throughput > p.occ.Throughput {
			p.occ, p.hasO = c, true
		}
	}
	type lost struct {
		name  string
		ratio float64
	}
	var ratios []float64
	var losses []lost
	for _, k := range order {
		p := pts[k]
		if !p.hasO || !p.hasL || p.lock.Throughput <= 0 {
			continue
		}
		r := p.occ.Throughput / p.lock.Throughput
		ratios = append(ratios, r)
		s.Points++
		if r >= 1 {
			s.Wins++
		} else {
			losses = append(losses, lost{fmt.Sprintf("%s: %s %s/s vs %s %s/s (%.2f×)", k, p.occ.Strategy, rate(p.occ.Throughput), p.lock.Strategy, rate(p.lock.Throughput), r), r})
		}
	}
	if len(ratios) > 0 {
		slices.Sort(ratios)
		s.MinRatio, s.MaxRatio = ratios[0], ratios[len(ratios)-1]
		s.MedianRatio = ratios[len(ratios)/2]
		if len(ratios)%2 == 0 {
			s.MedianRatio = (ratios[len(ratios)/2-1] + ratios[len(ratios)/2]) / 2
		}
	}
	sort.SliceStable(losses, func(i, j int) bool { return losses[i].ratio < losses[j].ratio })
	for _, l := range losses {
		s.LockWins = append(s.LockWins, l.name)
	}
	for _, g := range goals {
		switch g.Status {
		case goalMet:
			s.GoalsMet++
		case goalNotMet:
			s.GoalsNotMet++
		}
	}
	return s
}

// setupSuffix names a cell's setup (processes, proxy) after its point.
func setupSuffix(c Result) string {
	if st := setup(c.Procs, c.Proxy, c.DelayMs); st != "" {
		return " (" + st + ")"
	}
	return ""
}

// Lines returns the summary as a few sentences, the first the answer.
func (s Summary) Lines() []string {
	var out []string
	if s.Points > 0 {
		out = append(out, fmt.Sprintf("occkit's best strategy beat the best cross-process lock at %d of %d points: median %.2f×, from %.2f× to %.2f× (lock-local, a mutex in one process, is a reference, not a rival).",
			s.Wins, s.Points, s.MedianRatio, s.MinRatio, s.MaxRatio))
	} else {
		out = append(out, "No point had both an occkit strategy and a cross-process lock: no comparison.")
	}
	if n := len(s.LockWins); n > 0 {
		shown := s.LockWins[:min(n, 5)]
		more := ""
		if n > len(shown) {
			more = fmt.Sprintf(" (and %d more)", n-len(shown))
		}
		out = append(out, fmt.Sprintf("A lock still won at %d point(s)%s: %s.", n, more, strings.Join(shown, "; ")))
	}
	switch {
	case s.FailedOcc == 0:
		out = append(out, fmt.Sprintf("Failed operations: none in occkit's cells (%d in the locks').", s.FailedLocks))
	default:
		shown := s.FailedCells[:min(len(s.FailedCells), 5)]
		out = append(out, fmt.Sprintf("Failed operations: %d in occkit's cells (%s), %d in the locks'.", s.FailedOcc, strings.Join(shown, "; "), s.FailedLocks))
	}
	inv := "every invariant held"
	if s.Violations > 0 {
		inv = fmt.Sprintf("%d INVARIANT VIOLATION(S)", s.Violations)
	}
	out = append(out, fmt.Sprintf("Checks: %s; goals met %d, not met %d (see Goal checks).", inv, s.GoalsMet, s.GoalsNotMet))
	return out
}
