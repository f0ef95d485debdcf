package lab

import (
	"fmt"
	"maps"
	"slices"
	"strings"
)

// Goal statuses.
const (
	goalMet    = "met"
	goalNotMet = "NOT MET"
	goalNA     = "n/a"
)

// goalCheck is one of the goals checked at one grid point of one
// backend and workload, as a ratio of throughputs measured in the same
// run.
type goalCheck struct {
	Goal     string `json:"goal"`
	Backend  string `json:"backend"`
	Workload string `json:"workload"`
	Point    point  `json:"point"`
	// Setup is how the cells ran when not as goroutines of one process
	// on direct connections: "4 processes", "+1ms each way".
	Setup  string  `json:"setup,omitempty"`
	Status string  `json:"status"`
	Ratio  float64 `json:"ratio"`
	Detail string  `json:"detail"`
	// Rounds are the ratios within each round when the point ran in
	// rounds (--repeat), in round order; Ratio is their median.
	Rounds []float64 `json:"rounds,omitempty"`
	// Count says the goal is a count (of failed operations), not a
	// ratio: Ratio is unused, Detail gives the count.
	Count bool `json:"count,omitempty"`
	// Strategy names the strategy judged, for a goal checked once per
	// strategy at a point.
	Strategy string `json:"strategy,omitempty"`
}

// checkGoals checks the goals on results. Each backend, workload
// and grid point is judged on its own cells only: ratios between cells
// that ran side by side. A cell whose invariant failed does not count (it
// is a failure, not a number). On a multi-key workload, where occ.Update
// does not apply, occ-txn stands for occ. Besides the best lock-*, the
// detail gives the ratio to the best lock that works across processes (all
// but lock-local), since an in-process mutex is only a choice for a single
// process.
func checkGoals(results []Result) []goalCheck {
	type group struct {
		backend, workload string
		point             point
		procs             int
		proxy             bool
		delayMs           float64
		byName            map[string]Result
		broken            []string
	}
	groups := map[string]*group{}
	var order []string
	for _, r := range results {
		k := fmt.Sprintf("%s|%s|%v|%d|%v|%v", r.Backend, r.Workload, r.Point(), r.Procs, r.Proxy, r.DelayMs)
		g := groups[k]
		if g == nil {
			g = &group{backend: r.Backend, workload: r.Workload, point: r.Point(), procs: r.Procs, proxy: r.Proxy, delayMs: r.DelayMs, byName: map[string]Result{}}
			groups[k] = g
			order = append(order, k)
		}
		if !r.InvariantOK {
			g.broken = append(g.broken, r.Strategy)
			continue
		}
		g.byName[r.Strategy] = r
	}
	var out []goalCheck
	for _, k := range order {
		g := groups[k]
		check := func(goal string) *goalCheck {
			out = append(out, goalCheck{Goal: goal, Backend: g.backend, Workload: g.workload, Point: g.point, Setup: setup(g.procs, g.proxy, g.delayMs)})
			return &out[len(out)-1]
		}
		occName := "occ"
		occR, hasOCC := g.byName["occ"]
		if !hasOCC {
			occName = "occ-txn"
			occR, hasOCC = g.byName["occ-txn"]
		}
		// The lock every strategy is judged against: the best that works
		// across processes, taken by the workers themselves (not behind
		// an HTTP service: those meet the HTTP strategies in goalHTTP).
		// lock-local, a mutex in one process, is never the yardstick: a
		// replicated service cannot use it. The details give its ratio
		// as a single-process reference.
		bestCross, hasCross := best(g.byName, func(s strategySpec) bool { return s.Kind == kindLock && !s.HTTP && s.Name != "lock-local" })
		local, hasLocal := g.byName["lock-local"]
		reference := func(r Result) string {
			if !hasLocal || local.Throughput <= 0 {
				return ""
			}
			return fmt.Sprintf("; lock-local, the single-process reference, %s/s: %.2f×", rate(local.Throughput), r.Throughput/local.Throughput)
		}
		missing := func(c *goalCheck, what string) {
			c.Status, c.Detail = goalNA, "no "+what+" result at this point"
			if len(g.broken) > 0 {
				c.Detail += fmt.Sprintf(" (invariant broken: %v)", g.broken)
			}
		}
		judge := func(c *goalCheck, ratio, need float64, detail string) {
			c.Ratio, c.Detail = ratio, detail
			c.Status = goalNotMet
			if ratio >= need {
				c.Status = goalMet
			}
		}
		// judgeThroughput judges a's throughput over b's (pairedRatio),
		// keeping the rounds and saying how the ratio was read.
		judgeThroughput := func(c *goalCheck, a, b Result, need float64, detail string) {
			ratio, how, rounds := pairedRatio(a, b)
			c.Rounds = rounds
			judge(c, ratio, need, detail+how)
		}
		// vsCross judges r (named what, when there is one) against the
		// best cross-process lock, the detail written by detail; it
		// reports whether it judged.
		vsCross := func(c *goalCheck, r Result, ok bool, what string, need float64, detail func() string) bool {
			switch {
			case !ok:
				missing(c, what)
			case !hasCross || bestCross.Throughput <= 0:
				missing(c, "cross-process lock-*")
			default:
				judgeThroughput(c, r, bestCross, need, detail())
				return true
			}
			return false
		}
		versus := func(r Result, name string) string {
			return fmt.Sprintf("%s %s/s vs %s %s/s", name, rate(r.Throughput), bestCross.Strategy, rate(bestCross.Throughput))
		}
		// queueTail returns the best queueing lock of the point and r's
		// p99.9 against its, for a detail ("" without one).
		queueTail := func(r Result) (string, Result, bool) {
			q, ok := best(g.byName, func(s strategySpec) bool { return queueing[s.Name] })
			if !ok {
				return "", q, false
			}
			return fmt.Sprintf("; p99.9 %.2f× %s's %.3g ms", r.P999Ms/max(q.P999Ms, 1e-9), q.Strategy, q.P999Ms), q, true
		}
		p := g.point
		if p.Low() {
			vsCross(check(goalLowOCC), occR, hasOCC, "occ", 2, func() string { return versus(occR, occName) + reference(occR) })
		}
		if p.High() {
			hy, okH := g.byName["hybrid"]
			ad, okA := g.byName["adaptive"]
			pick := hy
			if !okH || (okA && ad.Throughput > hy.Throughput) {
				pick = ad
			}
			vsCross(check(goalHighHybrid), pick, okH || okA, "hybrid or adaptive", 0.9, func() string { return versus(pick, pick.Strategy) + reference(pick) })
			c := check(goalHighOCC)
			if vsCross(c, occR, hasOCC, "occ", 0.5, func() string {
				return versus(occR, occName) + fmt.Sprintf(", %d of %d workers committed, %.2f attempts/op, %d failed, %d stalled through the window%s",
					occR.WorkersCommitted, occR.Workers, occR.AttemptsPerOp, occR.FailedOps, occR.StalledOps, reference(occR))
			}) && occR.WorkersCommitted < occR.Workers {
				c.Status = goalNotMet
				c.Detail += " (a worker committed nothing)"
			}
		}
		// The hot-key goals of occ-combine and occ-cached.
		against := func(goal, name string, need float64, extra func(r Result, c *goalCheck)) {
			r, ok := g.byName[name]
			if !ok {
				return // not run at this point: no check
			}
			c := check(goal)
			if !hasCross || bestCross.Throughput <= 0 {
				missing(c, "cross-process lock-*")
				return
			}
			judgeThroughput(c, r, bestCross, need,
				fmt.Sprintf("%s %s/s (p99.9 %.3g ms, %d/%d committed) vs %s %s/s (p99.9 %.3g ms)", name, rate(r.Throughput), r.P999Ms, r.WorkersCommitted, r.Workers,
					bestCross.Strategy, rate(bestCross.Throughput), bestCross.P999Ms))
			if extra != nil {
				extra(r, c)
			}
		}
		one := g.procs <= 1 && !g.proxy
		if p.Keys == 1 && p.WorkMs == 0 && p.Workers == 8 && one {
			against(goalCombineHot, "occ-combine", 3, func(r Result, c *goalCheck) {
				if r.P999Ms > bestCross.P999Ms || r.WorkersCommitted < r.Workers {
					c.Status = goalNotMet
				}
			})
		}
		if p.Keys >= 1 && p.Keys <= 16 && p.WorkMs == 1 && one {
			against(goalCombineWork, "occ-combine", 1, nil)
		}
		if p.Keys >= 1000 && one {
			if cb, ok := g.byName["occ-combine"]; ok {
				c := check(goalCombineCool)
				if !hasOCC || occR.Throughput <= 0 {
					missing(c, "occ")
				} else {
					judgeThroughput(c, cb, occR, 0.95, fmt.Sprintf("occ-combine %s/s vs %s %s/s", rate(cb.Throughput), occName, rate(occR.Throughput)))
				}
			}
		}
		if g.procs == 4 && p.Keys == 1 {
			against(goalCombineProcs, "occ-combine", 1.5, nil)
		}
		if g.procs == 8 && p.Keys == 1 && p.WorkMs == 0 && !g.proxy {
			for _, name := range []string{"occ", "occ-combine", "adaptive", "occ-table"} {
				against(goalReplicasHot, name, 1.5, func(r Result, c *goalCheck) {
					c.Strategy = name
					tail, q, ok := queueTail(r)
					if !ok {
						tail = "; no queueing lock ran at this point: the tail is not judged"
					}
					c.Detail += fmt.Sprintf(", %d failed%s", r.TotalFailedOps, tail)
					if r.TotalFailedOps > 0 || (ok && r.P999Ms > 3*q.P999Ms) {
						c.Status = goalNotMet
					}
				})
			}
		}
		if g.proxy && g.delayMs == 1 && p.Keys >= 1000 {
			against(goalCachedRTT, "occ-cached", 2.5, nil)
		}

		// Multi-row transactions: transfers.
		if g.workload == "transfer" && p.Keys >= 1000 && p.Workers == 8 && p.WorkMs == 0 && !g.proxy {
			against(goalTxnCool, "occ-txn", 1.5, nil)
			against(goalTxnCached, "occ-cached", 2, nil)
		}
		if g.workload == "transfer" && p.Keys == 2 && p.Workers == 8 && p.WorkMs == 0 && !g.proxy {
			if r, ok := g.byName["occ-txn"]; ok {
				fu, okF := best(g.byName, func(s strategySpec) bool { return s.Name == "lock-pg-for-update" || s.Name == "lock-mysql-for-update" })
				c := check(goalTxnHot)
				if !okF || fu.Throughput <= 0 {
					missing(c, "FOR UPDATE")
				} else {
					detail := fmt.Sprintf("occ-txn %s/s (p99.9 %.3g ms, %d/%d committed, %d failed, %.2f attempts/op) vs %s %s/s", rate(r.Throughput), r.P999Ms,
						r.WorkersCommitted, r.Workers, r.TotalFailedOps, r.AttemptsPerOp, fu.Strategy, rate(fu.Throughput))
					tail, q, okQ := queueTail(r)
					judgeThroughput(c, r, fu, 1, detail+tail)
					if r.WorkersCommitted < r.Workers || r.TotalFailedOps > 0 || (okQ && r.P999Ms > 3*q.P999Ms) {
						c.Status = goalNotMet
					}
				}
			}
		}

		// The clusters.
		if p.Low() && p.WorkMs == 0 && !g.proxy {
			// pair judges a against b when a ran at this point.
			pair := func(goal, a, b string, need float64) {
				ra, ok := g.byName[a]
				if !ok {
					return // not run at this point: no check
				}
				c := check(goal)
				rb, ok := g.byName[b]
				if !ok || rb.Throughput <= 0 {
					missing(c, b)
					return
				}
				judgeThroughput(c, ra, rb, need, fmt.Sprintf("%s %s/s (%.2f attempts/op, %d failed, p99 %.3g ms) vs %s %s/s (%.2f attempts/op, p99 %.3g ms)",
					a, rate(ra.Throughput), ra.AttemptsPerOp, ra.TotalFailedOps, ra.P99Ms, b, rate(rb.Throughput), rb.AttemptsPerOp, rb.P99Ms))
			}
			switch {
			case g.backend == "etcd3" && p.Workers == 8:
				pair(goalFollowerEtcd, "occ-follower-reads", occName, 1.3)
				pair(goalCachedEtcd3, "occ-cached", "lock-etcd-mutex", 3)
			case g.backend == "redis-cluster":
				pair(goalCachedRedisCluster, "occ-cached", "lock-redis", 3)
			case g.backend == "postgres-replica" && g.procs == 4:
				pair(goalReplicaPG, "occ-follower-reads", occName, 1.2)
			}
		}

		// Bounded deltas.
		if r, ok := g.byName["delta"]; ok && p.WorkMs == 0 {
			if g.workload == "inventory" && p.Keys == 1 {
				c := check(goalDeltaHot)
				if !hasCross || bestCross.Throughput <= 0 {
					missing(c, "cross-process lock-*")
				} else {
					detail := fmt.Sprintf("delta %s/s (p99.9 %.3g ms, %d failed) vs %s %s/s", rate(r.Throughput), r.P999Ms, r.TotalFailedOps, bestCross.Strategy, rate(bestCross.Throughput))
					tail, q, okQ := queueTail(r)
					judgeThroughput(c, r, bestCross, 5, detail+tail)
					if r.TotalFailedOps > 0 || (okQ && r.P999Ms > q.P999Ms) {
						c.Status = goalNotMet
					}
				}
			}
			if bw, ok := g.byName["blind-write"]; ok && (p.Keys == 1 || p.Keys >= 1000) {
				c := check(goalDeltaBlind)
				judgeThroughput(c, r, bw, 0.8, fmt.Sprintf("delta %s/s (p99.9 %.3g ms) vs blind-write %s/s (p99.9 %.3g ms)", rate(r.Throughput), r.P999Ms, rate(bw.Throughput), bw.P999Ms))
			}
		}

		if p.Keys == 1 && p.WorkMs == 0 && p.Workers == 8 && hasOCC && occName == "occ" {
			if q, ok := best(g.byName, func(s strategySpec) bool { return queueing[s.Name] }); ok {
				c := check(goalOCCTail)
				ratio := 0.0
				if occR.P999Ms > 0 {
					ratio = q.P999Ms / occR.P999Ms
				}
				// The ratio is the lock's p99.9 over occ's: 1/3 or more
				// meets the goal.
				judge(c, ratio, 1.0/3, fmt.Sprintf("occ p99.9 %.3g ms (%s/s, %d/%d committed, %.2f attempts/op) vs %s p99.9 %.3g ms (%s/s): %.2f× the lock's",
					occR.P999Ms, rate(occR.Throughput), occR.WorkersCommitted, occR.Workers, occR.AttemptsPerOp, q.Strategy, q.P999Ms, rate(q.Throughput), occR.P999Ms/max(q.P999Ms, 1e-9)))
				if occR.WorkersCommitted < occR.Workers {
					c.Status = goalNotMet
					c.Detail += " (a worker committed nothing)"
				}
			}
		}

		// Every other occkit strategy: no failed operation at the point.
		{
			var names, failed []string
			for _, name := range slices.Sorted(maps.Keys(g.byName)) {
				spec, ok := lookupStrategy(name)
				if !ok || spec.Kind == kindLock || spec.Kind == kindReference || slices.Contains(repositoryPaths, name) || name == "occ-no-exclusive" || name == "occ-no-turns" {
					continue
				}
				names = append(names, name)
				if r := g.byName[name]; r.TotalFailedOps > 0 {
					failed = append(failed, fmt.Sprintf("%s %d (%s)", name, r.TotalFailedOps, r.Error))
				}
			}
			if len(names) > 0 {
				c := check(goalNoFail)
				c.Count, c.Status = true, goalMet
				c.Detail = fmt.Sprintf("%s: none failed", strings.Join(names, ", "))
				if len(failed) > 0 {
					c.Status, c.Detail = goalNotMet, "failed: "+strings.Join(failed, "; ")
				}
			}
		}

		// The repository paths.
		for _, name := range repositoryPaths {
			r, ok := g.byName[name]
			switch {
			case ok:
				c := check(goalRepoNoFail)
				c.Count = true
				c.Status = goalMet
				if r.TotalFailedOps > 0 {
					c.Status = goalNotMet
				}
				c.Detail = fmt.Sprintf("%s: %d failed (%d of them started in the measured window, where %s committed), %d/%d workers committed, %.2f attempts/op",
					name, r.TotalFailedOps, r.FailedOps, thousands(r.Ops), r.WorkersCommitted, r.Workers, r.AttemptsPerOp)
				if r.Error != "" {
					c.Detail += "; first error: " + r.Error
				}
			case slices.Contains(g.broken, name):
				c := check(goalRepoNoFail)
				c.Count, c.Status, c.Detail = true, goalNotMet, name+": the invariant broke (see the cell)"
			}
		}
		vsOCC := func(goal, name string, need float64) {
			r, ok := g.byName[name]
			if !ok {
				return // not run at this point: no check
			}
			c := check(goal)
			if !hasOCC || occName != "occ" || occR.Throughput <= 0 {
				missing(c, "occ")
				return
			}
			judgeThroughput(c, r, occR, need, fmt.Sprintf("%s %s/s (%d failed, %d/%d committed) vs occ %s/s", name, rate(r.Throughput), r.TotalFailedOps,
				r.WorkersCommitted, r.Workers, rate(occR.Throughput)))
		}
		if p.Keys == 1 && p.Workers == 16 && p.WorkMs == 0 && one {
			vsOCC(goalTableHot, "occ-table", 0.9)
			against(goalTableCombineHot, "occ-table-combine", 3, nil)
		}
		if p.Keys >= 1000 {
			vsOCC(goalTableCool, "occ-table", 0.95)
		}
		if r, ok := g.byName["occ-http-modify"]; ok {
			c := check(goalHTTP)
			if l, ok := g.byName["lock-http"]; !ok || l.Throughput <= 0 {
				missing(c, "lock-http")
			} else {
				detail := fmt.Sprintf("occ-http-modify %s/s (p99.9 %.3g ms, %d failed) vs lock-http %s/s (p99.9 %.3g ms)",
					rate(r.Throughput), r.P999Ms, r.TotalFailedOps, rate(l.Throughput), l.P999Ms)
				if rest, ok := g.byName["occ-http"]; ok {
					detail += fmt.Sprintf("; occ-http (GET, If-Match PUT) %s/s, %.2f× lock-http, %.2f attempts/op, %d failed",
						rate(rest.Throughput), rest.Throughput/l.Throughput, rest.AttemptsPerOp, rest.TotalFailedOps)
				}
				judgeThroughput(c, r, l, 1, detail)
			}
		}

		c := check(goalAdaptiveAll)
		ad, okA := g.byName["adaptive"]
		switch {
		case !okA:
			missing(c, "adaptive")
			if g.workload != "" {
				if wl, ok := lookupWorkload(g.workload); ok && wl.KeysPerOp > 1 {
					c.Detail = "adaptive is single-key (hybrid.UpdateAdaptive): it does not run multi-key workloads"
				}
			}
		case !hasOCC && !hasCross:
			missing(c, "occ or cross-process lock-*")
		default:
			var ref Result
			if hasCross {
				ref = bestCross
			}
			for _, n := range []string{occName, "occ-combine"} {
				if r, ok := g.byName[n]; ok && r.Throughput > ref.Throughput {
					ref = r
				}
			}
			if ref.Throughput <= 0 {
				missing(c, "non-zero reference")
				break
			}
			detail := fmt.Sprintf("adaptive %s/s vs %s %s/s", rate(ad.Throughput), ref.Strategy, rate(ref.Throughput))
			if ctl, ok := g.byName[controlName]; ok && ref.Strategy == "occ-combine" {
				r, _, _ := pairedRatio(ctl, ref)
				detail += fmt.Sprintf(" (the A/A control, %s, read %.2f× occ-combine at this point)", controlName, r)
			}
			judgeThroughput(c, ad, ref, 0.95, detail)
		}

		if ctl, ok := g.byName[controlName]; ok {
			c := check(goalControl)
			oc, ok := g.byName["occ-combine"]
			if !ok || oc.Throughput <= 0 {
				missing(c, "occ-combine")
				continue
			}
			ratio, how, rounds := pairedRatio(ctl, oc)
			c.Rounds = rounds
			// Within 5% either way.
			judge(c, min(ratio, 1/max(ratio, 1e-9)), 0.95,
				fmt.Sprintf("%s %s/s vs occ-combine %s/s", controlName, rate(ctl.Throughput), rate(oc.Throughput))+how)
			c.Ratio = ratio
		}
	}
	return out
}
