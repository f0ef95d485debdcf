package lab

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/occkit/occkit/benchmarks/internal/backends"
	"github.com/occkit/occkit/cas"
)

// blindWrite is the deliberately broken strategy: read, apply, then write
// whatever version is current by then (a blind write, as code without a
// version check does). Concurrent operations overwrite each other's
// results. TestMain adds it to the lab's strategies.
var blindWrite = strategySpec{
	Name:      "test-blind-write",
	Kind:      kindOptimistic,
	About:     "broken on purpose: read, apply, write over whatever is current",
	SingleKey: true, MultiKey: true,
	DefaultOn: func(string, bool) bool { return false },
	New: func(_ context.Context, h *harness) (cellStrategy, error) {
		return strategyFunc(func(ctx context.Context, _ int, op operation) error {
			vals := make([]int64, len(op.Keys))
			for i, k := range op.Keys {
				v, _, err := h.Values.Get(ctx, k)
				if err != nil {
					return err
				}
				vals[i] = v
				// Let other workers write between the reads of a
				// transfer's two keys: blind writes of both keys from
				// one consistent read would conserve the total.
				runtime.Gosched()
			}
			if err := op.Apply(vals); err != nil {
				return err
			}
			runtime.Gosched()
			for i, k := range op.Keys {
				for {
					_, ver, err := h.Values.Get(ctx, k)
					if err != nil {
						return err
					}
					if _, err = h.Values.CompareAndSwap(ctx, k, ver, vals[i]); !errors.Is(err, cas.ErrConflict) {
						if err != nil {
							return err
						}
						break
					}
				}
			}
			return nil
		}), nil
	},
}

func openLab(t *testing.T, backends ...string) *Lab {
	t.Helper()
	return openLabWith(t, Env{MaxWorkers: 8, Log: testLog{t}}, backends...)
}

// openIsolatedLab opens a lab that sees no environment variable and
// starts no server: services other than the named in-process backends are
// unavailable, whatever the machine runs.
func openIsolatedLab(t *testing.T, backends ...string) *Lab {
	t.Helper()
	return openLabWith(t, Env{MaxWorkers: 8, Log: testLog{t}, Getenv: func(string) string { return "" }}, backends...)
}

func openLabWith(t *testing.T, env Env, backends ...string) *Lab {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	l, err := OpenLab(ctx, backends, env)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := l.Close(context.Background()); err != nil {
			t.Errorf("closing the lab: %v", err)
		}
	})
	if s := l.Skipped(); len(s) > 0 {
		t.Fatalf("backends not opened: %+v", s)
	}
	return l
}

type testLog struct{ t *testing.T }

func (l testLog) Write(b []byte) (int, error) {
	l.t.Log(strings.TrimSpace(string(b)))
	return len(b), nil
}

func runCell(t *testing.T, l *Lab, c Cell) Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r, err := l.Run(ctx, c)
	if err != nil {
		t.Fatalf("%s: %v", CellName(c), err)
	}
	return r
}

// wantNotApplicable runs c and wants it refused as not applicable
// (errNotApplicable); it returns the refusal, whose text says why.
func wantNotApplicable(t *testing.T, l *Lab, c Cell) error {
	t.Helper()
	_, err := l.Run(t.Context(), c)
	if !errors.Is(err, errNotApplicable) {
		t.Errorf("%s, procs %d: %v, want not applicable", CellName(c), max(c.Procs, 1), err)
	}
	return err
}

// smokeCell is a cell of a backend's smoke test.
type smokeCell struct{ backend, strategy, workload string }

// runSmokeCells runs each cell as a subtest named backend/strategy/workload:
// 4 workers on keys keys, 120 operations drawn from seed, at most 1000
// attempts each. Every operation must commit or be declined, none fail,
// and the invariant must hold.
func runSmokeCells(t *testing.T, l *Lab, keys int, seed uint64, cells []smokeCell) {
	t.Helper()
	for _, c := range cells {
		t.Run(c.backend+"/"+c.strategy+"/"+c.workload, func(t *testing.T) {
			r := runCell(t, l, Cell{Backend: c.backend, Strategy: c.strategy, Workload: c.workload, Workers: 4, Keys: keys, Ops: 120, Seed: seed, MaxAttempts: 1000})
			if !r.InvariantOK || r.FailedOps != 0 || r.Ops+r.DeclinedOps != 120 {
				t.Errorf("invariant %v %s; %d committed, %d declined, %d failed (%s)", r.InvariantOK, r.Invariant, r.Ops, r.DeclinedOps, r.FailedOps, r.Error)
			}
		})
	}
}

// TestInvariantCatchesBrokenStrategy: each workload's invariant check
// fails a cell whose strategy loses updates, and passes the same cell run
// by a correct strategy.
func TestInvariantCatchesBrokenStrategy(t *testing.T) {
	l := openLab(t, "memory")
	for _, wl := range Workloads() {
		t.Run(wl, func(t *testing.T) {
			base := Cell{Backend: "memory", Workload: wl, Workers: 8, Keys: 2, Ops: 2000, Work: 20 * time.Microsecond, Seed: 1}
			bad := base
			bad.Strategy = "test-blind-write"
			r := runCell(t, l, bad)
			if r.InvariantOK {
				t.Errorf("blind writes by 8 workers on 2 keys: invariant held (%d committed); the check misses lost updates", r.Ops)
			} else {
				t.Logf("caught: %s", r.Invariant)
			}
			good := base
			good.Strategy = "occ-txn"
			good.MaxAttempts = 1000
			if r := runCell(t, l, good); !r.InvariantOK || r.FailedOps > 0 {
				t.Errorf("occ-txn: invariant %v (%s), %d failed (%s)", r.InvariantOK, r.Invariant, r.FailedOps, r.Error)
			}
		})
	}
}

// TestSoldOut runs inventory past its stock: sales stop at zero, the
// rest are declined, and the invariant holds.
func TestSoldOut(t *testing.T) {
	l := openLab(t, "memory")
	for _, s := range []string{"occ", "hybrid", "adaptive", "lock-local"} {
		r := runCell(t, l, Cell{Backend: "memory", Strategy: s, Workload: "inventory", Workers: 8, Keys: 3, Ops: 600, Initial: 50, Seed: 2})
		if !r.InvariantOK || r.Ops != 150 || r.DeclinedOps != 450 || r.FailedOps != 0 {
			t.Errorf("%s: %d sold, %d declined, %d failed, invariant %v %s; want 150 sold of 3×50 and 450 declined", s, r.Ops, r.DeclinedOps, r.FailedOps, r.InvariantOK, r.Invariant)
		}
	}
}

// TestGridOnMemory runs a tiny grid end to end and writes every output.
func TestGridOnMemory(t *testing.T) {
	l := openIsolatedLab(t, "memory")
	// A count of operations per cell, not a duration: on a loaded
	// machine a 60 ms window could close before any operation ended.
	g := Grid{Keys: []int{100, 1}, Thetas: []float64{0, 1.2}, Workers: []int{4}, Ops: 400, Seed: 3}
	cells, skips, err := g.Plan(l)
	if err != nil {
		t.Fatal(err)
	}
	// 3 points (100 keys θ 0 and 1.2, 1 key; transfer's 1 key becomes
	// 2) for each workload; 11 strategies for counter and inventory
	// (delta among them), 9 for transfer (occ-txn and occ-txn-combine in;
	// occ, occ-combine, adaptive and delta out: they are single-key).
	want := 2*3*11 + 3*9
	if len(cells) != want {
		t.Fatalf("planned %d cells, want %d", len(cells), want)
	}
	if len(skips) != 2 {
		t.Errorf("plan skips %+v, want occ and adaptive on transfer", skips)
	}
	out := l.RunGrid(context.Background(), cells, 1, nil)
	r := NewReport(l, g, out, skips, time.Now(), "test")
	if r.Meta.InvariantViolations != 0 || len(r.Meta.Failed) != 0 {
		t.Fatalf("violations %d, failed %+v", r.Meta.InvariantViolations, r.Meta.Failed)
	}
	ran := len(r.Cells)
	// lock-etcd-mutex, lock-zookeeper, lock-redis and lock-redlock are
	// skipped at run time (no etcd, no ZooKeeper, no Redis), with the
	// reason.
	if ran != want-4*3*3 {
		t.Errorf("%d cells ran", ran)
	}
	var why []string
	for _, s := range r.Meta.Skipped {
		if strings.Contains(s.Name, " lock-redis ") || strings.Contains(s.Name, " lock-redlock ") {
			why = append(why, s.Reason)
		}
	}
	if len(why) != 2*3*3 || !strings.Contains(why[0], "OCCKIT_REDIS_URL is not set") {
		t.Errorf("skipped Redis lock cells: %d, first reason %q", len(why), why)
	}
	for _, c := range r.Cells {
		if c.Ops == 0 || c.Throughput <= 0 || c.P50Ms <= 0 || c.P99Ms < c.P50Ms || c.P999Ms < c.P99Ms || c.AttemptsPerOp < 1 {
			t.Errorf("implausible cell %+v", c)
		}
	}
	var md strings.Builder
	if err := r.WriteMarkdown(&md); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"| memory | counter | 4w 100k θ=0 | occ |", "| 4/4 | ok |", "### Goal checks", "every point: adaptive", "### Summary", "No point had both an occkit strategy and a cross-process lock"} {
		if !strings.Contains(md.String(), s) {
			t.Errorf("markdown lacks %q:\n%s", s, md.String())
		}
	}

	dir := t.TempDir()
	if err := r.WriteFiles(dir); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Meta  map[string]any   `json:"meta"`
		Cells []map[string]any `json:"cells"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	if len(doc.Cells) != ran || doc.Meta["durability"] == nil || doc.Meta["backends"] == nil {
		t.Fatalf("results.json: %d cells, meta %v", len(doc.Cells), doc.Meta)
	}
	fields := []string{"backend", "strategy", "workload", "workers", "keys", "theta", "work_ms", "ops", "throughput",
		"p50_ms", "p99_ms", "p999_ms", "attempts_per_op", "fence_rejections", "invariant_ok"}
	for _, c := range doc.Cells {
		for _, f := range fields {
			if _, ok := c[f]; !ok {
				t.Fatalf("results.json cell lacks %q: %v", f, c)
			}
		}
	}
	csvB, err := os.ReadFile(filepath.Join(dir, "results.csv"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(csvB)), "\n")
	if len(lines) != ran+1 || !strings.HasPrefix(lines[0], strings.Join(fields, ",")) {
		t.Errorf("results.csv: %d lines, header %q", len(lines), lines[0])
	}
	for _, wl := range Workloads() {
		png, err := os.ReadFile(filepath.Join(dir, "charts", "memory-"+wl+".png"))
		if err != nil || len(png) < 1000 || string(png[1:4]) != "PNG" {
			t.Errorf("chart for %s: %d bytes, %v", wl, len(png), err)
		}
	}
	html, err := os.ReadFile(filepath.Join(dir, "report.html"))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"<table", `src="charts/memory-counter.png"`, "Goal checks", "process memory", "<h2>Summary</h2>"} {
		if !strings.Contains(string(html), s) {
			t.Errorf("report.html lacks %q", s)
		}
	}
}

func TestGoalChecks(t *testing.T) {
	p := func(keys int) (int, float64) { return keys, 0 }
	res := func(b, w, s string, keys int, thr float64) Result {
		k, th := p(keys)
		return Result{Backend: b, Workload: w, Strategy: s, Workers: 8, Keys: k, Theta: th, Throughput: thr, WorkersCommitted: 8, InvariantOK: true}
	}
	rs := []Result{
		res("x", "counter", "occ", 1000, 300), res("x", "counter", "adaptive", 1000, 290),
		res("x", "counter", "lock-local", 1000, 100), res("x", "counter", "lock-etcd-mutex", 1000, 50),
		res("x", "counter", "occ", 1, 40), res("x", "counter", "hybrid", 1, 95), res("x", "counter", "adaptive", 1, 80),
		res("x", "counter", "lock-local", 1, 100), res("x", "counter", "lock-pg-advisory", 1, 90),
		res("y", "counter", "occ", 1, 40), res("y", "counter", "lock-pg-for-update", 1, 30), res("y", "counter", "lock-redis", 1, 60),
		res("x", "transfer", "occ-txn", 1000, 150), res("x", "transfer", "lock-local", 1000, 100),
	}
	// Tails: x's occ p99.9 is 2.5× the advisory lock's, y's 5× FOR
	// UPDATE's (lock-redis, faster, does not queue: not the reference).
	for i, r := range rs {
		if r.Keys == 1 {
			switch r.Backend + " " + r.Strategy {
			case "x occ":
				rs[i].P999Ms = 25
			case "x lock-pg-advisory", "y lock-pg-for-update":
				rs[i].P999Ms = 10
			case "y occ":
				rs[i].P999Ms = 50
			case "y lock-redis":
				rs[i].P999Ms = 100
			}
		}
	}
	bad := res("x", "counter", "occ", 1, 1000)
	bad.InvariantOK = false
	rs = append(rs, bad)
	got := map[string]string{}
	for _, g := range checkGoals(rs) {
		got[g.Backend+" "+g.Workload+" "+g.Point.String()+" "+g.Goal] = g.Status
	}
	for k, want := range map[string]string{
		"x counter 8w 1000k θ=0 " + goalLowOCC:       goalMet,    // 6× lock-etcd-mutex (3× lock-local)
		"x counter 8w 1000k θ=0 " + goalAdaptiveAll:  goalMet,    // 290/300
		"x counter 8w 1k " + goalHighHybrid:          goalMet,    // 95/90 lock-pg-advisory (lock-local, 100, is no yardstick)
		"x counter 8w 1k " + goalHighOCC:             goalNotMet, // 40/90 (the broken 1000/s does not count)
		"x counter 8w 1k " + goalAdaptiveAll:         goalNotMet, // 80/90: the cross-process lock is the reference
		"x counter 8w 1k " + goalOCCTail:             goalMet,    // 2.5×
		"y counter 8w 1k " + goalOCCTail:             goalNotMet, // 5× FOR UPDATE's
		"x transfer 8w 1000k θ=0 " + goalLowOCC:      goalNA,     // occ-txn stands for occ; lock-local is no yardstick
		"x transfer 8w 1000k θ=0 " + goalAdaptiveAll: goalNA,
	} {
		if got[k] != want {
			t.Errorf("%s: %q, want %q", k, got[k], want)
		}
	}
	if !slices.ContainsFunc(checkGoals(rs), func(g goalCheck) bool {
		return g.Goal == goalLowOCC && g.Ratio == 6 && strings.Contains(g.Detail, "lock-local, the single-process reference, 100/s: 3.00×")
	}) {
		t.Error("the low-contention check is not judged against lock-etcd-mutex, with lock-local's ratio as a reference")
	}
}

// TestDefaultLocks: the default grid runs each lock where users pair it
// with the data.
func TestDefaultLocks(t *testing.T) {
	want := map[string][]string{
		"lock-redis":            {"memory", "postgres", "redis", "dynamodb"},
		"lock-redlock":          {"memory", "postgres", "redis", "dynamodb"},
		"lock-etcd-mutex":       {"memory", "etcd"},
		"lock-zookeeper":        {"memory"},
		"lock-pg-for-update":    {"postgres"},
		"lock-pg-advisory":      {"postgres"},
		"lock-mysql-for-update": {"mysql"},
		"lock-mysql-get-lock":   {"mysql"},
	}
	for name, on := range want {
		spec, ok := lookupStrategy(name)
		if !ok {
			t.Fatalf("%s is not registered", name)
		}
		for _, b := range []string{"memory", "etcd", "postgres", "redis", "dynamodb", "mysql", "sqlite"} {
			for _, multi := range []bool{false, true} {
				if got := spec.DefaultOn(b, multi); got != slices.Contains(on, b) {
					t.Errorf("%s on %s (multi-key %v): default %v", name, b, multi, got)
				}
			}
		}
	}
	if spec, _ := lookupStrategy("lock-local"); spec.DefaultOn != nil {
		t.Error("lock-local should run everywhere")
	}
}

// TestOpenOnDemand: a backend opened on demand is opened once and kept
// until the lab closes; one that failed is not tried again.
func TestOpenOnDemand(t *testing.T) {
	ctx := t.Context()
	l, err := OpenLab(ctx, []string{"memory"}, Env{Log: testLog{t}, Getenv: func(string) string { return "" }})
	if err != nil {
		t.Fatal(err)
	}
	first, err := l.openOnDemand(ctx, "sqlite")
	if err != nil {
		t.Fatal(err)
	}
	_, failed := l.openOnDemand(ctx, "redis") // not set, and starting servers is off
	for range 2 {
		if b, err := l.openOnDemand(ctx, "sqlite"); err != nil || b != first {
			t.Fatalf("openOnDemand again: %v, %v; want the open backend", b, err)
		}
		if _, err := l.openOnDemand(ctx, "redis"); err == nil || err != failed {
			t.Fatalf("openOnDemand of a failing backend: %v, want the first error %v again", err, failed)
		}
	}
	if got := l.Open(); !slices.Equal(got, []string{"memory", "sqlite"}) {
		t.Errorf("open backends %v", got)
	}
	if err := l.Close(ctx); err != nil {
		t.Errorf("Close: %v", err)
	}
}

// TestSpecs checks the lab's lists as registration used to at start-up:
// every entry complete, names unique, lock strategies (and only they)
// named lock-*.
func TestSpecs(t *testing.T) {
	seen := map[string]bool{}
	for _, s := range strategySpecs {
		if s.Name == "" || s.New == nil || s.Kind == 0 || !(s.SingleKey || s.MultiKey) {
			t.Errorf("incomplete strategy %+v", s)
		}
		if (s.Kind == kindLock) != strings.HasPrefix(s.Name, "lock-") {
			t.Errorf("strategy %s: kind %v; lock strategies, and only they, are named lock-*", s.Name, s.Kind)
		}
		if seen["s/"+s.Name] {
			t.Errorf("strategy %s listed twice", s.Name)
		}
		seen["s/"+s.Name] = true
	}
	for _, b := range backends.Systems() {
		if b.Name == "" || b.About == "" || b.Locker == "" || seen["b/"+b.Name] {
			t.Errorf("backend %q incomplete or listed twice", b.Name)
		}
		seen["b/"+b.Name] = true
	}
	for _, w := range builtinWorkloads {
		if w.Name == "" || w.Apply == nil || w.Check == nil || w.KeysPerOp < 1 || seen["w/"+w.Name] {
			t.Errorf("workload %q incomplete or listed twice", w.Name)
		}
		seen["w/"+w.Name] = true
	}
	if got := Backends(); !slices.Equal(got, []string{"memory", "etcd", "postgres", "redis", "dynamodb", "zookeeper", "mysql", "sqlite", "redis-cluster", "etcd3", "postgres-replica"}) {
		t.Errorf("Backends() = %v", got)
	}
	// The clusters run only when named.
	if got := DefaultBackends(); !slices.Equal(got, []string{"memory", "etcd", "postgres", "redis", "dynamodb", "zookeeper", "mysql", "sqlite"}) {
		t.Errorf("DefaultBackends() = %v", got)
	}
}

// TestCombineGoalChecks: issue 15's goal checks judge occ-combine and
// occ-cached against the best cross-process lock (lock-local is left
// out), each at its own kind of point, and the throughput ratio alone
// does not make the hot-key goal met when the tail or a starved worker
// misses it.
func TestCombineGoalChecks(t *testing.T) {
	cell := func(strategy string, keys int, workMs, ops, p999 float64, committed, procs int, delay float64, proxy bool) Result {
		return Result{Backend: "redis", Workload: "counter", Strategy: strategy, Workers: 8, Keys: keys, WorkMs: workMs,
			Throughput: ops, P999Ms: p999, WorkersCommitted: committed, InvariantOK: true, Procs: procs, Proxy: proxy, DelayMs: delay}
	}
	results := []Result{
		// 1 key, no work: 3.3× lock-redis (lock-local's 10,000 does not count).
		cell("occ-combine", 1, 0, 3000, 5, 8, 1, 0, false),
		cell("lock-redis", 1, 0, 900, 10, 8, 1, 0, false),
		cell("lock-local", 1, 0, 10000, 1, 8, 1, 0, false),
		// 4 keys, 1 ms of work: 0.9×, not met.
		cell("occ-combine", 4, 1, 900, 5, 8, 1, 0, false),
		cell("lock-redis", 4, 1, 1000, 10, 8, 1, 0, false),
		// 1000 keys: occ-combine 0.96× occ.
		cell("occ", 1000, 0, 1000, 5, 8, 1, 0, false),
		cell("occ-combine", 1000, 0, 960, 5, 8, 1, 0, false),
		// 4 processes, 1 key: fast but a worker starved does not matter
		// here (ratio only): 2×, met.
		cell("occ-combine", 1, 0, 2000, 50, 8, 4, 0, false),
		cell("lock-redis", 1, 0, 1000, 10, 8, 4, 0, false),
		// 8 processes, 1 key: occ 2× with a tail 2× the queueing
		// lock's, met; occ-combine 3× with a tail 4× its, not met.
		cell("occ", 1, 0, 2000, 20, 8, 8, 0, false),
		cell("occ-combine", 1, 0, 3000, 40, 8, 8, 0, false),
		cell("lock-pg-for-update", 1, 0, 1000, 10, 8, 8, 0, false),
		// +1ms each way, 1000 keys: occ-cached 2×, not met.
		cell("occ-cached", 1000, 0, 2000, 5, 8, 1, 1, true),
		cell("lock-redis", 1000, 0, 1000, 10, 8, 1, 1, true),
	}
	got := map[string]goalCheck{}
	for _, c := range checkGoals(results) {
		if c.Strategy != "" {
			c.Goal += "|" + c.Strategy
		}
		got[c.Goal+"|"+c.Setup] = c
	}
	for _, tc := range []struct {
		goal, setup, status string
		ratio               float64
	}{
		{goalCombineHot, "", goalMet, 3000.0 / 900},
		{goalCombineWork, "", goalNotMet, 0.9},
		{goalCombineCool, "", goalMet, 0.96},
		{goalCombineProcs, "4 processes", goalMet, 2},
		{goalReplicasHot + "|occ", "8 processes", goalMet, 2},
		{goalReplicasHot + "|occ-combine", "8 processes", goalNotMet, 3},
		{goalCachedRTT, "+1ms each way", goalNotMet, 2},
	} {
		c, ok := got[tc.goal+"|"+tc.setup]
		if !ok {
			t.Errorf("no check %q (%s)", tc.goal, tc.setup)
			continue
		}
		if c.Status != tc.status || c.Ratio < tc.ratio-1e-9 || c.Ratio > tc.ratio+1e-9 {
			t.Errorf("%s (%s): %s %.3f×, want %s %.3f× (%s)", tc.goal, tc.setup, c.Status, c.Ratio, tc.status, tc.ratio, c.Detail)
		}
	}
	// The hot-key goal is not met when occ-combine's tail is longer than
	// the lock's, whatever its throughput.
	results[0].P999Ms = 20
	for _, c := range checkGoals(results[:3]) {
		if c.Goal == goalCombineHot && c.Status != goalNotMet {
			t.Errorf("p99.9 20 ms against the lock's 10 ms: %s (%s)", c.Status, c.Detail)
		}
	}
}

// TestGoalChecksPairRounds: a point run in rounds is judged on the median
// of its rounds' ratios, not the ratio of its median rounds. Here a slow
// first round pulls adaptive's median round down (0.74× between the
// median rounds) while adaptive ran at 0.96–0.97× the reference in the
// two other rounds: the check reads 0.96× and is met, and its detail
// gives both. Without rounds, the ratio is that of the two results.
func TestGoalChecksPairRounds(t *testing.T) {
	cell := func(strategy string, ops float64, runs ...float64) Result {
		return Result{Backend: "redis", Workload: "counter", Strategy: strategy, Workers: 8, Keys: 4,
			Throughput: ops, InvariantOK: true, WorkersCommitted: 8, Runs: runs}
	}
	for _, tc := range []struct {
		name    string
		results []Result
		status  string
		ratio   float64
		detail  string
	}{
		{"paired", []Result{cell("adaptive", 100, 70, 100, 130), cell("occ-combine", 135, 72, 140, 135), cell("occ", 90, 80, 90, 95)},
			goalMet, 130.0 / 135, "0.96× in the median of 3 paired rounds (0.71–0.97), 0.74× between the median rounds"},
		{"single round", []Result{cell("adaptive", 100), cell("occ-combine", 135), cell("occ", 90)},
			goalNotMet, 100.0 / 135, "adaptive 100/s vs occ-combine 135/s"},
		{"rounds missing on one side", []Result{cell("adaptive", 100, 70, 100, 130), cell("occ-combine", 135), cell("occ", 90)},
			goalNotMet, 100.0 / 135, "adaptive 100/s vs occ-combine 135/s"},
		// A round without an operation has no ratio to pool (its
		// logarithm): the medians are read.
		{"a round without operations", []Result{cell("adaptive", 100, 0, 100, 130), cell("occ-combine", 135, 72, 140, 135), cell("occ", 90)},
			goalNotMet, 100.0 / 135, "adaptive 100/s vs occ-combine 135/s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var c *goalCheck
			for _, g := range checkGoals(tc.results) {
				if g.Goal == goalAdaptiveAll {
					c = &g
				}
			}
			if c == nil {
				t.Fatal("no adaptive check")
			}
			if c.Status != tc.status || c.Ratio < tc.ratio-1e-9 || c.Ratio > tc.ratio+1e-9 || !strings.Contains(c.Detail, tc.detail) {
				t.Errorf("%s %.4f× (%s), want %s %.4f× with %q", c.Status, c.Ratio, c.Detail, tc.status, tc.ratio, tc.detail)
			}
			if tc.name != "paired" && strings.Contains(c.Detail, "paired") {
				t.Errorf("detail %q speaks of paired rounds", c.Detail)
			}
		})
	}
}

// TestGoalControl: the A/A control's check reads occ-combine-control
// against occ-combine in paired rounds and is met within 5% either way;
// the adaptive check names what the control read; without the control
// there is no such check.
func TestGoalControl(t *testing.T) {
	cell := func(strategy string, ops float64, runs ...float64) Result {
		return Result{Backend: "postgres", Workload: "counter", Strategy: strategy, Workers: 8, Keys: 16,
			Throughput: ops, InvariantOK: true, WorkersCommitted: 8, Runs: runs}
	}
	find := func(checks []goalCheck, goal string) *goalCheck {
		for i := range checks {
			if checks[i].Goal == goal {
				return &checks[i]
			}
		}
		return nil
	}
	for _, tc := range []struct {
		name    string
		control []float64
		status  string
		ratio   float64
	}{
		{"alike", []float64{100, 98, 103}, goalMet, 1.0},
		{"faster by a tenth", []float64{110, 110, 110}, goalNotMet, 1.1},
		{"slower by a tenth", []float64{90, 90, 90}, goalNotMet, 0.9},
	} {
		t.Run(tc.name, func(t *testing.T) {
			checks := checkGoals([]Result{
				cell("occ-combine", 100, 100, 100, 100),
				cell(controlName, tc.control[1], tc.control...),
				cell("adaptive", 96, 96, 97, 95),
				cell("occ", 50, 50, 50, 50),
			})
			c := find(checks, goalControl)
			if c == nil {
				t.Fatal("no control check")
			}
			if c.Status != tc.status || c.Ratio < tc.ratio-1e-9 || c.Ratio > tc.ratio+1e-9 || len(c.Rounds) != 3 {
				t.Errorf("%s %.4f× rounds %v (%s), want %s %.4f×", c.Status, c.Ratio, c.Rounds, c.Detail, tc.status, tc.ratio)
			}
			ad := find(checks, goalAdaptiveAll)
			if ad == nil || !strings.Contains(ad.Detail, "the A/A control") || ad.Status != goalMet {
				t.Errorf("adaptive check %+v does not name the control", ad)
			}
		})
	}
	checks := checkGoals([]Result{cell("occ-combine", 100, 100), cell("adaptive", 96, 96)})
	if c := find(checks, goalControl); c != nil {
		t.Errorf("a control check without the control: %+v", *c)
	}
	if ad := find(checks, goalAdaptiveAll); ad == nil || strings.Contains(ad.Detail, "control") {
		t.Errorf("adaptive check %+v speaks of a control that did not run", ad)
	}
}

// TestPoolRounds: the paired rounds of the adaptive check are pooled per
// backend and over all backends: the geometric mean of 0.9, 1.0, 1.1 and
// 0.8, 1.0, 1.25 is 0.997 on redis (six rounds, two points); the two
// rounds of etcd's single point pool nothing for etcd alone, but count in
// "all".
// Points without rounds are left out.
func TestPoolRounds(t *testing.T) {
	checks := []goalCheck{
		{Goal: goalAdaptiveAll, Backend: "redis", Status: goalMet, Rounds: []float64{0.9, 1.0, 1.1}},
		{Goal: goalAdaptiveAll, Backend: "redis", Status: goalNotMet, Rounds: []float64{0.8, 1.0, 1.25}},
		{Goal: goalAdaptiveAll, Backend: "etcd", Status: goalMet, Rounds: []float64{2, 2}},
		{Goal: goalAdaptiveAll, Backend: "etcd", Status: goalMet},
	}
	got := poolRounds(checks)
	if len(got) != 2 || got[0].Backend != "redis" || got[1].Backend != "all" {
		t.Fatalf("pooled %+v, want redis then all", got)
	}
	want := math.Pow(0.9*1.0*1.1*0.8*1.0*1.25, 1.0/6)
	if r := got[0]; r.Rounds != 6 || r.Points != 2 || math.Abs(r.GeoMean-want) > 1e-9 || r.SD <= 0 {
		t.Errorf("redis %+v, want 6 rounds at 2 points, geometric mean %.4f", r, want)
	}
	if a := got[1]; a.Rounds != 8 || a.Points != 3 || math.Abs(a.GeoMean-math.Pow(want*want*want*want*want*want*4, 1.0/8)) > 1e-9 {
		t.Errorf("all %+v", a)
	}
}

// TestRunGridRepeat: with repeat 3, each point's strategies run three
// rounds in rotated order, and each cell reports its median round with
// every round's throughput.
func TestRunGridRepeat(t *testing.T) {
	l := openLab(t, "memory")
	g := Grid{Backends: []string{"memory"}, Workloads: []string{"counter"}, Strategies: []string{"occ", "lock-local"},
		Keys: []int{1, 10}, Workers: []int{2}, Duration: 30 * time.Millisecond, Warmup: 5 * time.Millisecond, Seed: 4}
	cells, _, err := g.Plan(l)
	if err != nil {
		t.Fatal(err)
	}
	if len(cells) != 4 {
		t.Fatalf("planned %d cells, want 2 points × 2 strategies", len(cells))
	}
	var order []string
	out := l.RunGrid(context.Background(), cells, 3, func(_ int, next *Cell) {
		if next != nil {
			order = append(order, fmt.Sprintf("%d:%s", next.Keys, next.Strategy))
		}
	})
	want := []string{"1:occ", "1:lock-local", "1:lock-local", "1:occ", "1:occ", "1:lock-local",
		"10:occ", "10:lock-local", "10:lock-local", "10:occ", "10:occ", "10:lock-local"}
	if !slices.Equal(order, want) {
		t.Errorf("run order %v, want %v", order, want)
	}
	if len(out) != 4 {
		t.Fatalf("%d outcomes, want 4", len(out))
	}
	for i, o := range out {
		if o.Err != nil || o.Cell != cells[i] {
			t.Fatalf("outcome %d: %v for %s, want %s", i, o.Err, CellName(o.Cell), CellName(cells[i]))
		}
		runs := slices.Sorted(slices.Values(o.Result.Runs))
		if len(runs) != 3 || o.Result.Throughput != runs[1] {
			t.Errorf("%s: throughput %v, rounds %v: want the median of 3", CellName(o.Cell), o.Result.Throughput, o.Result.Runs)
		}
	}
}

// TestPickRoundReportsABadRound: a round that broke the invariant is
// reported even when the median round held it.
func TestPickRoundReportsABadRound(t *testing.T) {
	good := func(tp float64) outcome { return outcome{Result: &Result{Throughput: tp, InvariantOK: true}} }
	bad := outcome{Result: &Result{Throughput: 5, InvariantOK: false, Invariant: "lost update"}}
	if o := pickRound([]outcome{good(1), bad, good(9)}); o.Result.Invariant != "lost update" {
		t.Errorf("picked %+v, want the round that broke the invariant", o.Result)
	}
	failed := outcome{Err: errors.New("boom")}
	if o := pickRound([]outcome{good(1), good(2), failed}); o.Err == nil {
		t.Errorf("picked %+v, want the failed round", o.Result)
	}
	if o := pickRound([]outcome{good(7), good(1), good(4)}); o.Result.Throughput != 4 {
		t.Errorf("picked throughput %v, want the median 4", o.Result.Throughput)
	}
}

// TestPlanWarmUp: timed cells warm up for 200 ms unless told otherwise,
// also when the duration is given (the first operations of a cell open
// connections; measured, they were the tail of every cell run with
// --duration); counted cells measure every operation.
func TestPlanWarmUp(t *testing.T) {
	l := openIsolatedLab(t, "memory")
	for _, tc := range []struct {
		g         Grid
		dur, warm time.Duration
	}{
		{Grid{}, time.Second, 200 * time.Millisecond},
		{Grid{Duration: 2 * time.Second}, 2 * time.Second, 200 * time.Millisecond},
		{Grid{Duration: 2 * time.Second, Warmup: 50 * time.Millisecond}, 2 * time.Second, 50 * time.Millisecond},
		{Grid{Ops: 100}, 0, 0},
	} {
		tc.g.Keys, tc.g.Workers, tc.g.Workloads, tc.g.Strategies = []int{1}, []int{2}, []string{"counter"}, []string{"occ"}
		cells, _, err := tc.g.Plan(l)
		if err != nil {
			t.Fatal(err)
		}
		if len(cells) == 0 || cells[0].Duration != tc.dur || cells[0].Warmup != tc.warm {
			t.Errorf("%+v: planned %d cells, first %v after %v of warm-up; want %v after %v", tc.g, len(cells), cells[0].Duration, cells[0].Warmup, tc.dur, tc.warm)
		}
	}
}

// TestReplicasGoalCheck: the --procs 8 hot-row goal is judged per
// strategy on throughput, failed operations and the tail, and leaves the
// tail unjudged (and says so) where no queueing lock ran.
func TestReplicasGoalCheck(t *testing.T) {
	cell := func(strategy string, ops, p999 float64, failed int64) Result {
		return Result{Backend: "redis", Workload: "counter", Strategy: strategy, Workers: 8, Keys: 1,
			Throughput: ops, P999Ms: p999, TotalFailedOps: failed, WorkersCommitted: 8, InvariantOK: true, Procs: 8}
	}
	judged := func(results []Result) map[string]goalCheck {
		got := map[string]goalCheck{}
		for _, c := range checkGoals(results) {
			if c.Goal == goalReplicasHot {
				got[c.Strategy] = c
			}
		}
		return got
	}
	got := judged([]Result{
		cell("occ", 1400, 10, 0),         // 1.4×: too slow
		cell("occ-combine", 3000, 10, 1), // one failed
		cell("adaptive", 3000, 29, 0),    // met: 2.9× the lock's tail
		cell("occ-table", 2000, 31, 0),   // 3.1× the lock's tail
		cell("lock-redis", 1000, 100, 0),
		cell("lock-mysql-get-lock", 500, 10, 0), // the queueing lock (slower than lock-redis)
	})
	for name, want := range map[string]string{"occ": goalNotMet, "occ-combine": goalNotMet, "adaptive": goalMet, "occ-table": goalNotMet} {
		c, ok := got[name]
		if !ok {
			t.Errorf("no check for %s", name)
			continue
		}
		if c.Status != want {
			t.Errorf("%s: %s, want %s (%s)", name, c.Status, want, c.Detail)
		}
	}
	// Without a queueing lock the tail is not judged, and the detail says so.
	got = judged([]Result{cell("occ", 2000, 500, 0), cell("lock-redis", 1000, 100, 0)})
	if c := got["occ"]; c.Status != goalMet || !strings.Contains(c.Detail, "no queueing lock") {
		t.Errorf("no queueing lock: %s (%s)", c.Status, c.Detail)
	}
	// One process: no such check.
	one := cell("occ", 2000, 10, 0)
	one.Procs = 1
	if got := judged([]Result{one, cell("lock-redis", 1000, 100, 0)}); len(got) != 0 {
		t.Errorf("one process: %d checks", len(got))
	}
}
