// Command occfaults runs concurrent clients against each backend it can
// reach while a fault strikes — the network between client and server
// breaks, slows down or loses answers, the server restarts, the etcd
// leader crashes, a lease holder pauses or its clock is wrong — and checks
// that no acknowledged write was lost, none was applied twice, every
// recorded history is linearizable, and no stale lease holder's write got
// in.
//
//	go run ./benchmarks/cmd/occfaults --out DIR [--duration 10s] [--only postgres,etcd/leader-loss]
//
// The clusters (etcd3, redis-cluster, postgres-replica: a partition, a
// failover, a paused replay) run only when --only names them.
//
// Results go to DIR/faults.json, and a markdown table to stdout; a lost or
// duplicated write, a history that is not linearizable, unexplained
// balances (except what a row allows by design: Run.Allowed), a stale write accepted under a lease fault, or a run that
// could not be done make it exit with status 1. docs/reliability.md ("The
// command") says what each backend, fault and workload is and how the
// checks decide.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/occkit/occkit/benchmarks/internal/backends"
	"github.com/occkit/occkit/benchmarks/internal/jsonfile"
	"github.com/occkit/occkit/benchmarks/internal/leasefaults"

	"github.com/occkit/occkit/benchmarks/internal/linearcheck"
	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/occ"
)

const (
	workers     = 8 // per workload
	callTimeout = 2 * time.Second
	maxAttempts = 20
)

// params are the knobs of the runs.
type params struct {
	duration     time.Duration
	recovery     time.Duration // least time after a one-shot fault is over
	workers      int           // per workload
	window       int64         // calls recorded per workload and run
	perKey       int64         // calls per key before a workload moves on to fresh keys (perKeyGeneration)
	checkTimeout time.Duration // porcupine's time per workload and run
	settle       time.Duration // wait before the final reads
	// dropEvery is how often the drop fault resets every connection (the
	// package's dropEvery when 0).
	dropEvery time.Duration
	out       string // where visualizations of failures go
}

func defaultParams(d time.Duration) params {
	return params{
		duration:     d,
		recovery:     max(d/2, time.Second),
		workers:      workers,
		window:       400_000,
		perKey:       perKeyGeneration,
		checkTimeout: 60 * time.Second,
		settle:       500 * time.Millisecond,
	}
}

func main() {
	os.Exit(run())
}

func run() int {
	out := flag.String("out", "", "directory for faults.json (required)")
	duration := flag.Duration("duration", 10*time.Second, "length of each (backend, fault) run")
	only := flag.String("only", "", "comma-separated backends or backend/fault runs to do (default all)")
	window := flag.Int64("window", 400_000, "calls recorded and checked for linearizability per workload and run")
	checkTimeout := flag.Duration("check-timeout", 60*time.Second, "porcupine's time per workload and run")
	flag.Parse()
	if *out == "" || *duration <= 0 || *window <= 0 {
		fmt.Fprintln(os.Stderr, "usage: occfaults --out DIR [--duration 10s] [--only backend[/fault],...] [--window calls] [--check-timeout 60s]")
		return 2
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, "occfaults:", err)
		return 1
	}
	if err := selfTest(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	p := defaultParams(*duration)
	p.window, p.checkTimeout, p.out = *window, *checkTimeout, *out

	started := time.Now()
	rep := Report{
		Started: started.UTC(), DurationRun: duration.String(), Workers: p.workers, Counters: numCounters,
		Accounts: numAccounts, CallTimeout: callTimeout.String(), MaxAttempts: maxAttempts, Window: p.window,
	}
	e := newEnv(3*p.workers, logf)
	defer e.close()
	targets, skipped := openSubjects(ctx, e, func(name string) bool { return selectedBackend(*only, name) })
	rep.Skipped = skipped
	for _, s := range skipped {
		logf("%s: skipped: %s", s.Backend, s.Reason)
	}

	bad := false
	for _, b := range targets {
		for _, fault := range b.faults {
			if ctx.Err() != nil || !selected(*only, b.name, fault) {
				continue
			}
			runs, err := runOne(ctx, p, b, fault)
			if err != nil {
				logf("%s/%s: %v", b.name, fault, err)
				rep.Skipped = append(rep.Skipped, Skipped{Backend: b.name + "/" + fault, Reason: err.Error()})
				if !isSkip(err) {
					bad = true
				}
				continue
			}
			for _, r := range runs {
				logRun(r)
				if r.Allowed != "" && !r.Bad() && (r.Lost > 0 || r.Linearizable != nil && !*r.Linearizable || r.Explained != nil && !*r.Explained) {
					logf("%s/%s/%s: %d lost, linearizable %s, explained %s: reported, allowed (%s)", r.Backend, r.Fault, r.Workload, r.Lost, fmtVerdict(r.Linearizable), fmtVerdict(r.Explained), r.Allowed)
				}
				if r.Bad() {
					bad = true
					fmt.Fprintf(os.Stderr, "\n!!!!!!!! %s under %s, %s workload: %d LOST, %d DUPLICATED, linearizable %s%s%s !!!!!!!!\n\n",
						r.Backend, r.Fault, r.Workload, r.Lost, r.Duplicated, fmtVerdict(r.Linearizable), staleSuffix(r), problemsSuffix(r))
				}
			}
			rep.Runs = append(rep.Runs, runs...)
		}
	}
	rep.Seconds = time.Since(started).Seconds()

	path := filepath.Join(*out, "faults.json")
	if err := jsonfile.Write(path, rep); err != nil {
		fmt.Fprintln(os.Stderr, "occfaults:", err)
		return 1
	}
	printTable(rep)
	logf("wrote %s (%.0f s in all)", path, rep.Seconds)
	if ctx.Err() != nil {
		fmt.Fprintln(os.Stderr, "occfaults: interrupted")
		return 1
	}
	if bad {
		fmt.Fprintln(os.Stderr, "occfaults: FAILED: a write was lost or duplicated, a history is not linearizable, balances are unexplained, a stale write got past the fence or none was tried, or a run could not be done (see above)")
		return 1
	}
	return 0
}

// selected reports whether --only selects the run of the fault on the
// backend (fault "": any run of the backend); without --only, every run
// but the clusters'.
func selected(only, backend, fault string) bool {
	if only == "" {
		return !isCluster(backend)
	}
	for _, s := range strings.Split(only, ",") {
		b, f, _ := strings.Cut(strings.TrimSpace(s), "/")
		if b == backend && (f == "" || fault == "" || f == fault) {
			return true
		}
	}
	return false
}

// selectedBackend reports whether --only selects a run of the backend.
func selectedBackend(only, backend string) bool { return selected(only, backend, "") }

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "occfaults: "+format+"\n", args...)
}

// runOne runs one fault against one backend, both workloads at once, and
// checks them; a lease fault is runLease's.
func runOne(ctx context.Context, p params, b subject, fault string) ([]Run, error) {
	if isLeaseFault(fault) {
		return runLease(ctx, p, b, fault)
	}
	tg, err := b.open(ctx, fault, namespace(fault))
	if err != nil {
		return nil, err
	}
	defer tg.close()
	return runTarget(ctx, p, b.name, fault, tg)
}

// runTarget runs fault on tg, the target of backend, both workloads at
// once, and checks them.
func runTarget(ctx context.Context, p params, backend, fault string, tg *target) ([]Run, error) {
	opts := []occ.Option{occ.WithMaxAttempts(maxAttempts)}
	if tg.retryable != nil {
		opts = append(opts, occ.WithRetryable(tg.retryable))
	}

	t0 := time.Now()
	stop := make(chan struct{})
	newWorkload := func(name string, keys int) *workload {
		wl := newWorkload(name, t0, keys, p.window, p.perKey)
		wl.staleReads = tg.staleReads
		return wl
	}
	counter := newWorkload("counter", numCounters)
	wls := []*workload{counter}
	waits := []func(){counter.start(ctx, stop, p.workers, 0, counterCall(counter, cas.NewTyped(tg.ops, cas.JSON[int64]()), opts))}
	if _, ok := tg.ops.(cas.Adder); ok {
		delta := newWorkload("delta", numCounters)
		wls = append(wls, delta)
		waits = append(waits, delta.start(ctx, stop, p.workers, 2*p.workers, deltaCall(delta, tg.ops, opts)))
	}
	if _, err := cas.AsCommitter(tg.ops); err == nil {
		transfer := newWorkload("transfer", numAccounts)
		wls = append(wls, transfer)
		waits = append(waits, transfer.start(ctx, stop, p.workers, p.workers, transferCallFunc(transfer, tg.ops, opts)))
	}
	inj, ierr := inject(ctx, fault, tg, t0, p.duration, p.recovery, p.dropEvery)
	close(stop)
	for _, wait := range waits {
		wait()
	}
	elapsed := time.Since(t0)
	if tg.proxy != nil {
		tg.proxy.SetChunkDelay(0)
		tg.proxy.CutAfter(0)
	}
	if ierr != nil {
		return nil, ierr
	}
	// Writes whose answers were lost have reached the server by now; let
	// any still in flight there settle before reading.
	time.Sleep(p.settle)

	var runs []Run
	for _, wl := range wls {
		r := Run{
			Backend: backend, Fault: fault, Workload: wl.name, Seconds: elapsed.Seconds(),
			Succeeded: wl.succeeded, Ambiguous: wl.ambiguous, Failed: wl.failed, Reads: wl.reads,
			FaultEvents: inj.events, Errors: leasefaults.TopErrors(wl.errs, 5), Allowed: tg.allowed, AllowsLost: tg.allowsLost,
		}
		r.Ops = r.Succeeded + r.Ambiguous + r.Failed
		if wl.unrecordable > 0 {
			r.Problems = append(r.Problems, fmt.Sprintf("%d calls succeeded or were ambiguous without running their function", wl.unrecordable))
		}
		var err error
		switch wl.name {
		case "counter":
			err = finishCounter(ctx, tg, wl, counterKey, 3*p.workers, &r)
		case "delta":
			err = finishCounter(ctx, tg, wl, deltaKey, 3*p.workers, &r)
		default:
			err = finishTransfer(ctx, tg, wl, 3*p.workers, &r)
		}
		if err != nil {
			return nil, err
		}
		if wl.unknown > 0 {
			// An ambiguous delta's values are unknown: the history misses
			// a write that may have applied, and cannot be checked. The
			// sums above decide.
			r.LinearizabilityNote = fmt.Sprintf("not checked: %d recorded deltas were ambiguous (their values are unknown); lost and duplicated are counted from the sums", wl.unknown)
			runs = append(runs, r)
			continue
		}
		if !inj.over.IsZero() {
			n := succeededAfter(wl, int64(inj.over.Sub(t0)))
			r.SucceededAfterFault = &n
		}
		lin := linearcheck.Check(wl.events, linearcheck.Options{Timeout: p.checkTimeout})
		r.Linearizable, r.LinearizabilityNote = lin.OK, lin.Note
		r.CheckedCalls, r.CheckedKeys, r.CheckSeconds = lin.Checked, lin.Keys, lin.Elapsed.Seconds()
		if tg.staleReads {
			r.LinearizabilityNote = joinNote("writes and final reads checked; the plain reads come from a follower or the replica (stale by design) and are counted, not checked", r.LinearizabilityNote)
		}
		r.LinearizabilityNote += visualize(p, backend, fault, wl.name, lin.Visualize)
		runs = append(runs, r)
	}
	return runs, nil
}

// visualize writes porcupine's visualization of a history that is not
// linearizable to p.out with write (a linearcheck.Result's or a
// leasefaults.Result's Visualize) and returns "; see <path>" for the
// note, or "" (nothing to show, or no p.out).
func visualize(p params, backend, fault, workload string, write func(path string) error) string {
	if p.out == "" {
		return ""
	}
	path := filepath.Join(p.out, fmt.Sprintf("nonlinearizable-%s-%s-%s.html", backend, fault, workload))
	if err := write(path); err != nil {
		return ""
	}
	return "; see " + path
}

func joinNote(a, b string) string {
	if b == "" {
		return a
	}
	return a + "; " + b
}

// namespace returns a fresh name for a run's table or key prefix.
func namespace(fault string) string {
	return "occfaults_" + strings.ReplaceAll(fault, "-", "_") + "_" + backends.RandomHex(4)
}
