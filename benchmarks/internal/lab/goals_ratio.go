package lab

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
)

// pairedRatio is a's throughput over b's, both results of one grid point.
// When the point ran in rounds (--repeat), it is the median over rounds of
// the ratio within each round: the strategies of a round run back to back,
// so a slow stretch of the machine lowers both sides of a round's ratio
// instead of one side of a ratio of medians. how says so, with the ratio
// of the medians beside it ("" for a single round).
func pairedRatio(a, b Result) (ratio float64, how string, rounds []float64) {
	if b.Throughput <= 0 {
		return 0, "", nil
	}
	medians := a.Throughput / b.Throughput
	n := len(a.Runs)
	if n < 2 || len(b.Runs) != n {
		return medians, "", nil
	}
	rounds = make([]float64, 0, n)
	for i := range n {
		if a.Runs[i] <= 0 || b.Runs[i] <= 0 {
			// A round without operations has no ratio to take the
			// logarithm of when pooled: read the medians instead.
			return medians, "", nil
		}
		rounds = append(rounds, a.Runs[i]/b.Runs[i])
	}
	sorted := slices.Sorted(slices.Values(rounds))
	m := sorted[n/2]
	if n%2 == 0 {
		m = (sorted[n/2-1] + sorted[n/2]) / 2
	}
	return m, fmt.Sprintf("; %.2f× in the median of %d paired rounds (%.2f–%.2f), %.2f× between the median rounds", m, n, sorted[0], sorted[n-1], medians), rounds
}

// pooled summarises, for each goal checked at several points in rounds,
// every round's ratio of every such point: their geometric mean and their
// spread around it. A strategy that costs a few percent
// everywhere shows in the mean even where single points read above or
// below their threshold by the noise of a few rounds.
type pooled struct {
	Goal    string  `json:"goal"`
	Backend string  `json:"backend"`
	Points  int     `json:"points"`
	Rounds  int     `json:"rounds"`
	GeoMean float64 `json:"geomean"`
	// SD is the standard deviation of ln(ratio) over the rounds: about
	// their relative spread around the mean (the noise of one round, and
	// the points' differences).
	SD float64 `json:"sd"`
}

// poolRounds pools the paired rounds of the goal checks, per goal and
// backend and over all backends ("all"), for goals with rounds at two or
// more points.
func poolRounds(checks []goalCheck) []pooled {
	type acc struct {
		points   int
		logs     []float64
		backends map[string]bool
	}
	accs := map[[2]string]*acc{}
	var order [][2]string
	add := func(k [2]string, backend string, rounds []float64) {
		a := accs[k]
		if a == nil {
			a = &acc{backends: map[string]bool{}}
			accs[k] = a
			order = append(order, k)
		}
		a.points++
		a.backends[backend] = true
		for _, r := range rounds {
			a.logs = append(a.logs, math.Log(r))
		}
	}
	for _, c := range checks {
		if len(c.Rounds) == 0 || c.Status == goalNA {
			continue
		}
		goal := c.Goal
		if c.Strategy != "" {
			goal += " (" + c.Strategy + ")"
		}
		add([2]string{goal, c.Backend}, c.Backend, c.Rounds)
		add([2]string{goal, "all"}, c.Backend, c.Rounds)
	}
	var out []pooled
	for _, k := range order {
		a := accs[k]
		if a.points < 2 || (k[1] == "all" && len(a.backends) < 2) {
			continue // nothing pooled, or the one backend's line again
		}
		var sum, sq float64
		for _, l := range a.logs {
			sum += l
		}
		mean := sum / float64(len(a.logs))
		for _, l := range a.logs {
			sq += (l - mean) * (l - mean)
		}
		out = append(out, pooled{Goal: k[0], Backend: k[1], Points: a.points, Rounds: len(a.logs),
			GeoMean: math.Exp(mean), SD: math.Sqrt(sq / float64(len(a.logs)))})
	}
	// "all" last within each goal.
	slices.SortStableFunc(out, func(x, y pooled) int {
		if x.Goal != y.Goal {
			return strings.Compare(x.Goal, y.Goal)
		}
		return boolRank(x.Backend == "all") - boolRank(y.Backend == "all")
	})
	return out
}

func boolRank(b bool) int {
	if b {
		return 1
	}
	return 0
}

// setup describes how cells ran: processes and added delay ("" for
// goroutines of one process on direct connections).
func setup(procs int, proxy bool, delayMs float64) string {
	var parts []string
	if procs > 1 {
		parts = append(parts, fmt.Sprintf("%d processes", procs))
	}
	if proxy {
		parts = append(parts, fmt.Sprintf("+%gms each way", delayMs))
	}
	return strings.Join(parts, ", ")
}

// best returns the result with the highest throughput among strategies
// that match.
func best(byName map[string]Result, match func(strategySpec) bool) (Result, bool) {
	names := make([]string, 0, len(byName))
	for n := range byName {
		names = append(names, n)
	}
	sort.Strings(names)
	var (
		b     Result
		found bool
	)
	for _, n := range names {
		spec, ok := lookupStrategy(n)
		if !ok || !match(spec) {
			continue
		}
		if r := byName[n]; !found || r.Throughput > b.Throughput {
			b, found = r, true
		}
	}
	return b, found
}

// rate formats a throughput: 12,345 or 1.23.
func rate(x float64) string {
	if x < 100 {
		return fmt.Sprintf("%.3g", x)
	}
	return thousands(int64(x + 0.5))
}

func thousands(n int64) string {
	s := fmt.Sprint(n)
	if n < 0 {
		return "-" + thousands(-n)
	}
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}
