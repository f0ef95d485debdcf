// Command occbench is occkit's contention lab: it runs workloads
// (counter, inventory, transfer) with optimistic, hybrid, adaptive and
// pessimistic strategies on real backends at chosen levels of contention,
// checks each workload's invariant after every cell, and reports
// throughput, latency, attempts and the goal checks.
//
//	go run ./benchmarks/cmd/occbench                      # the default grid, at most 3 minutes
//	go run ./benchmarks/cmd/occbench --quick --out /tmp/lab
//	go run ./benchmarks/cmd/occbench --backends memory --workloads counter \
//	    --keys 1,10,1000 --theta 0,0.99,1.2 --workers 4,16 --work 0,1ms
//
// With no flags it runs the default grid (a low- and a high-contention
// point for every workload and the backend's default strategies) on every
// backend it can open, reaching servers from the OCCKIT_* variables or
// starting throwaway ones with scripts/servers/*.sh (and stopping them at
// exit); the clusters run only when named in --backends. The markdown
// table and the goal checks go to stdout; --out DIR also writes
// results.json, results.csv, charts/*.png and report.html. A broken
// invariant makes the exit status 1. `occbench story` runs the lock
// stories (package benchmarks/story) instead. See docs/benchmarks.md and
// docs/stories.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"

	"github.com/occkit/occkit/benchmarks/internal/lab"
	"github.com/occkit/occkit/benchmarks/story"
)

func main() {
	// gc-pause's client A is this binary, re-run as a child process, and
	// so are the workers of --procs.
	story.ChildMain()
	lab.ChildMain()
	os.Exit(run(os.Args[1:], os.Stdout))
}

// run is the command: results to stdout, progress and messages to
// os.Stderr. It returns the exit status: 0, 1 when an invariant broke or a
// cell or backend failed, 2 for a usage error.
func run(args []string, stdout io.Writer) int {
	if len(args) > 0 && args[0] == "story" {
		return runStory(args[1:], stdout)
	}
	fs := flag.NewFlagSet("occbench", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: occbench [flags]\n       occbench story [flags]   (the lock stories; occbench story --help)\n\nThe contention lab: strategies against locks, with invariant checks.\n\n")
		fs.PrintDefaults()
		var clusters []string
		for _, b := range lab.Backends() {
			if !slices.Contains(lab.DefaultBackends(), b) {
				clusters = append(clusters, b)
			}
		}
		fmt.Fprintf(fs.Output(), "\nbackends:   %s\n            %s (clusters: only when named in --backends)\nstrategies: %s\nworkloads:  %s\n",
			strings.Join(lab.DefaultBackends(), ", "), strings.Join(clusters, ", "), strings.Join(lab.Strategies(), ", "), strings.Join(lab.Workloads(), ", "))
	}
	var (
		backendsF   = fs.String("backends", "", "comma-separated backends (default: every one that can be opened, skipping the others, but the clusters redis-cluster, etcd3 and postgres-replica, which run only when named)")
		strategiesF = fs.String("strategies", "", "comma-separated strategies (default: each backend's default strategies)")
		workloadsF  = fs.String("workloads", "", "comma-separated workloads (default: all)")
		workersF    = fs.String("workers", "", "comma-separated worker counts (default 8)")
		keysF       = fs.String("keys", "", "comma-separated key counts (default: the pair 1000 uniform and 1)")
		thetaF      = fs.String("theta", "", "comma-separated Zipf exponents in [0, 2] for key choice (0 uniform; applies to more than 2 keys)")
		workF       = fs.String("work", "", "comma-separated times spent inside the critical section, e.g. 0,1ms (default 0)")
		durationF   = fs.Duration("duration", 0, "measured time per cell (default 1s)")
		warmupF     = fs.Duration("warmup", 0, "warm-up per cell before measuring (default 200ms)")
		opsF        = fs.Int64("ops", 0, "operations per cell instead of a duration (all measured)")
		seedF       = fs.Uint64("seed", 1, "seed for key choice and amounts")
		maxAttF     = fs.Int("max-attempts", 0, fmt.Sprintf("attempt limit per operation (default %d)", lab.DefaultMaxAttempts))
		outF        = fs.String("out", "", "directory for results.json, results.csv, charts/ and report.html")
		quickF      = fs.Bool("quick", false, "short cells (300ms after 100ms of warm-up): one round of them is a smoke run, not a measurement")
		noStartF    = fs.Bool("no-start", false, "never start servers: PostgreSQL, Redis, Redlock's, ZooKeeper, MariaDB, the Redis Cluster and the PostgreSQL replica only from OCCKIT_PG_URL, OCCKIT_REDIS_URL, OCCKIT_REDLOCK_URLS, OCCKIT_ZK_ADDR, OCCKIT_MYSQL_DSN, OCCKIT_REDIS_CLUSTER_URL, OCCKIT_PG_REPLICA_URL")
		procsF      = fs.Int("procs", 1, "run each cell's workers in this many OS processes (this binary, run again), each with its own connections, combiner and cache; lock-local and memory are left out above 1")
		rttF        = fs.String("rtt", "", "add this one-way delay (e.g. 0.25ms, 1ms, 5ms) in each direction to every connection to every server, through a TCP proxy per server (internal/faultproxy); 0 measures the proxy's own hop; not on the clusters")
		repeatF     = fs.Int("repeat", 1, "run the strategies of each point this many rounds in turn (order rotated each round) and report each cell's median round by throughput, to read ratios on a noisy machine (more rounds narrow a ratio more cheaply than longer cells: e.g. --duration 300ms --warmup 100ms --repeat 15)")
		budgetF     = fs.Duration("budget", 3*time.Minute, "without --duration or --ops: shorten the cells (not below 300ms) so that the whole run fits this time; 0: no limit")
		cpuProfF    = fs.String("cpuprofile", "", "write a CPU profile of this process (the workers' client side, servers and --procs children apart) to this file, for go tool pprof")
	)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	g := lab.Grid{
		Backends: list(*backendsF), Strategies: list(*strategiesF), Workloads: list(*workloadsF),
		Duration: *durationF, Warmup: *warmupF, Ops: *opsF, Seed: *seedF, MaxAttempts: *maxAttF,
		Procs: *procsF,
	}
	if *repeatF < 1 {
		return usage(fs, "--repeat", fmt.Errorf("%d is not a positive integer", *repeatF))
	}
	if *procsF < 1 {
		return usage(fs, "--procs", fmt.Errorf("%d is not a positive integer", *procsF))
	}
	var err error
	if g.Workers, err = ints(*workersF); err != nil {
		return usage(fs, "--workers", err)
	}
	if g.Keys, err = ints(*keysF); err != nil {
		return usage(fs, "--keys", err)
	}
	if g.Thetas, err = floats(*thetaF); err != nil {
		return usage(fs, "--theta", err)
	}
	if g.Works, err = durations(*workF); err != nil {
		return usage(fs, "--work", err)
	}
	if *quickF {
		if g.Duration == 0 && g.Ops == 0 {
			g.Duration = 300 * time.Millisecond
		}
		if g.Warmup == 0 {
			g.Warmup = 100 * time.Millisecond
		}
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	started, load := time.Now(), lab.LoadAverage()
	maxWorkers := lab.DefaultWorkers
	for _, w := range g.Workers {
		maxWorkers = max(maxWorkers, w)
	}
	env := lab.Env{StartServers: !*noStartF, MaxWorkers: maxWorkers, Log: os.Stderr}
	if *rttF != "" {
		d, err := durations(*rttF)
		if err != nil || len(d) != 1 {
			return usage(fs, "--rtt", fmt.Errorf("%q is not one duration", *rttF))
		}
		env.Proxy, env.Delay = true, d[0]
		fmt.Fprintf(os.Stderr, "occbench: every connection to a server goes through a proxy adding %v each way (memory has no connection)\n", d[0])
	}
	if *cpuProfF != "" {
		// After every flag was checked: a usage error leaves no file.
		stopProfile, err := startCPUProfile(*cpuProfF)
		if err != nil {
			return usage(fs, "--cpuprofile", err)
		}
		defer stopProfile()
	}
	l, err := lab.OpenLab(ctx, g.Backends, env)
	if err != nil {
		fmt.Fprintln(os.Stderr, "occbench:", err)
		return 2
	}
	defer func() {
		if err := l.Close(context.Background()); err != nil {
			fmt.Fprintln(os.Stderr, "occbench: closing backends:", err)
		}
	}()
	for _, s := range l.Skipped() {
		fmt.Fprintf(os.Stderr, "occbench: skipping backend %s: %s\n", s.Name, s.Reason)
	}
	if len(g.Backends) > 0 && len(l.Skipped()) > 0 {
		fmt.Fprintln(os.Stderr, "occbench: a backend named with --backends is unavailable")
		return 1
	}
	cells, planSkips, err := g.Plan(l)
	if err != nil {
		fmt.Fprintln(os.Stderr, "occbench:", err)
		return 2
	}
	if len(cells) == 0 {
		fmt.Fprintln(os.Stderr, "occbench: nothing to run")
		return 2
	}
	if *durationF == 0 && *opsF == 0 && *budgetF > 0 {
		fitBudget(cells, *repeatF, *budgetF-time.Since(started))
	}
	per := cells[0].Duration + cells[0].Warmup
	if per > 0 {
		fmt.Fprintf(os.Stderr, "occbench: %d cells on %s, about %v\n", len(cells), strings.Join(l.Open(), ", "),
			(time.Duration(len(cells)**repeatF) * (per + cellOverhead)).Round(time.Second))
	}

	outcomes := l.RunGrid(ctx, cells, *repeatF, progress(len(cells)**repeatF))
	report := lab.NewReport(l, g, outcomes, planSkips, started, "occbench "+strings.Join(args, " "))
	report.Meta.LoadAtStart = load
	if err := report.WriteMarkdown(stdout); err != nil {
		fmt.Fprintln(os.Stderr, "occbench:", err)
		return 1
	}
	status := 0
	if *outF != "" {
		if err := report.WriteFiles(*outF); err != nil {
			fmt.Fprintln(os.Stderr, "occbench: writing results:", err)
			status = 1
		} else {
			fmt.Fprintf(os.Stderr, "occbench: wrote %s/results.json, results.csv, charts/, report.html\n", strings.TrimRight(*outF, "/"))
		}
	}
	for _, c := range report.Cells {
		if !c.InvariantOK {
			fmt.Fprintf(os.Stderr, "\noccbench: !!! INVARIANT VIOLATED !!! %s %s %s %s: %s\n", c.Backend, c.Workload, c.Strategy, c.Point(), c.Invariant)
			status = 1
		}
	}
	if n := len(report.Meta.Failed); n > 0 {
		fmt.Fprintf(os.Stderr, "occbench: %d cell(s) could not run (see above)\n", n)
		status = 1
	}
	if ctx.Err() != nil {
		fmt.Fprintln(os.Stderr, "occbench: interrupted; the results above are partial")
		status = 1
	}
	fmt.Fprintf(os.Stderr, "occbench: %d cells in %v\n", len(report.Cells), time.Since(started).Round(time.Second))
	return status
}

// cellOverhead is what a cell costs beyond its warm-up and measured time:
// a fresh store, seeding its keys, the strategy's set-up, operations
// finishing after the window, reading every key back; with a margin for a
// loaded machine above what the default grid measured (docs/benchmarks.md,
// "The default run").
const cellOverhead = 250 * time.Millisecond

// fitBudget shortens every cell's warm-up and measured time, in
// proportion, when running them all as they are would overrun budget.
func fitBudget(cells []lab.Cell, repeat int, budget time.Duration) {
	const margin = 5 * time.Second
	per := cells[0].Duration + cells[0].Warmup
	avail := (budget-margin)/time.Duration(len(cells)*repeat) - cellOverhead
	if per <= 0 || avail >= per {
		return
	}
	scale := max(float64(avail)/float64(per), float64(300*time.Millisecond)/float64(cells[0].Duration))
	for i := range cells {
		cells[i].Duration = time.Duration(float64(cells[i].Duration) * scale).Round(time.Millisecond)
		cells[i].Warmup = max(time.Duration(float64(cells[i].Warmup)*scale).Round(time.Millisecond), 50*time.Millisecond)
	}
	fmt.Fprintf(os.Stderr, "occbench: %d cells would overrun the %v budget: each measures %v after %v of warm-up\n",
		len(cells), budget.Round(time.Second), cells[0].Duration, cells[0].Warmup)
}

// progress returns a grid callback drawing a progress bar on a terminal,
// or printing a line per cell otherwise.
func progress(total int) func(int, *lab.Cell) {
	if !term.IsTerminal(int(os.Stderr.Fd())) {
		return func(done int, next *lab.Cell) {
			if next != nil {
				fmt.Fprintf(os.Stderr, "[%d/%d] %s\n", done+1, total, lab.CellName(*next))
			}
		}
	}
	bar := progressbar.NewOptions(total,
		progressbar.OptionSetWriter(os.Stderr),
		progressbar.OptionShowCount(),
		progressbar.OptionSetElapsedTime(true),
		progressbar.OptionSetPredictTime(true),
		progressbar.OptionSetWidth(24),
		progressbar.OptionClearOnFinish(),
	)
	return func(done int, next *lab.Cell) {
		if next == nil {
			_ = bar.Set(done)
			_ = bar.Finish()
			return
		}
		bar.Describe(fmt.Sprintf("%-60s", lab.CellName(*next)))
		_ = bar.Set(done)
	}
}

func usage(fs *flag.FlagSet, flagName string, err error) int {
	fmt.Fprintf(fs.Output(), "occbench: %s: %v\n", flagName, err)
	return 2
}

func list(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" && !slices.Contains(out, f) {
			out = append(out, f)
		}
	}
	return out
}

// parseList parses the comma-separated list s with parse, which says what
// it expects when an item is not that.
func parseList[T any](s string, parse func(string) (T, bool), want string) ([]T, error) {
	var out []T
	for _, f := range list(s) {
		x, ok := parse(f)
		if !ok {
			return nil, fmt.Errorf("%q is not %s", f, want)
		}
		out = append(out, x)
	}
	return out, nil
}

func ints(s string) ([]int, error) {
	return parseList(s, func(f string) (int, bool) {
		n, err := strconv.Atoi(f)
		return n, err == nil && n >= 1
	}, "a positive integer")
}

func floats(s string) ([]float64, error) {
	return parseList(s, func(f string) (float64, bool) {
		x, err := strconv.ParseFloat(f, 64)
		return x, err == nil && x >= 0 && x <= lab.MaxTheta
	}, fmt.Sprintf("a number in [0, %v]", lab.MaxTheta))
}

func durations(s string) ([]time.Duration, error) {
	return parseList(s, func(f string) (time.Duration, bool) {
		d, err := time.ParseDuration(f)
		return d, err == nil && d >= 0
	}, "a duration")
}
