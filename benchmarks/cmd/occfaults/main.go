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
// Backends: memory (memcas, in process: no network, the concurrency
// baseline without a fault), postgres (OCCKIT_PG_URL, or a throwaway
// server started with scripts/servers/postgres.sh), mysql (sqlcas on
// the MariaDB of OCCKIT_MYSQL_DSN, or scripts/servers/mariadb.sh; drop,
// cut and restart only), redis
// (OCCKIT_REDIS_URL, or scripts/servers/redis.sh), etcd (one member in
// process; three for leader loss) and dynamodb (minidyn's server in
// process). A backend that cannot be started is skipped, and said so.
//
// # Faults
//
// Each for --duration, on a fresh proxy, fresh clients and fresh keys:
//
//   - drop: every live connection is reset every 200 ms (requests and
//     answers in flight are lost).
//   - latency: every forwarded chunk waits 2 ms more, both ways.
//   - cut: every 200 ms, for 50 ms, every connection is closed once it has
//     received 1 to 256 more bytes from the server (an answer lost
//     mid-response, after the server acted).
//   - restart (postgres, mysql, redis): a server of the run's own (started with
//     the script, never the shared one) is stopped at a quarter of the
//     run, stays down 1 s, and starts again on the same port with its
//     data.
//   - leader-loss (etcd): in a 3-member cluster of the run's own, the
//     leader is stopped abruptly at a quarter of the run.
//
// After a restart or a leader loss the run goes on for at least
// max(duration/2, 1 s) after the service is back.
//
// # Lease faults
//
// paused-holder and clock-jump, on every backend, are
// benchmarks/internal/leasefaults' runs (see its documentation), on the
// same servers without a proxy: for --duration, 8 workers make
// hybrid.Update increments of 4 counters with the backend's lease lock
// (the in-process locker for memory and DynamoDB, TTL 300 ms; rediscas's,
// TTL 300 ms; etcdcas's, TTL 1 s; pgcas's session advisory locks) and
// fenced store, while the grants of disturbed holders end on the server
// inside their critical section — a paused holder's renewals stop and its
// grant runs out (in-process locker, Redis) or the server ends it (etcd:
// its session lease revoked; PostgreSQL: its backend terminated); under a
// clock jump the holder's clock says its grant still runs while the server
// has ended it (Redis: the lock key deleted) or it ran out — and the
// holders write with their old tokens once a newer holder has written.
// Their rows
// (workload "lease") count the stale writes accepted (must be 0), refused
// with cas.ErrFenced and failed otherwise; lost and duplicated as for the
// counters; linearizable is porcupine's verdict on the history leasefaults
// records: every store call of the run (reads, and fenced writes with
// their tokens), checked against a compare-and-set register with a fence
// (see its documentation; checked_calls counts store calls, not
// increments). A run with a stale write accepted, an increment lost or
// doubled, a history that is not linearizable (or could not be checked),
// or no stale write sent at all (leasefaults.Result.Check) fails the
// command.
//
// # Workloads
//
// They run at once in each run, 8 goroutines each; one call in four is a
// plain Get of a key.
//
//   - counter: occ.Update increments of 4 counters.
//   - delta (stores that implement cas.Adder): occ.Add of 1 to 4 other
//     counters, the server doing the arithmetic; lost and duplicated as
//     for counter. A run with an ambiguous delta is not checked for
//     linearizability (its value is unknown), only by the sums.
//   - transfer (stores that implement cas.Committer): occ.Txn moves 1 to
//     10 between two of 5 accounts, reading and writing both.
//
// Each call is succeeded, ambiguous (errors.Is cas.ErrAmbiguous: it may or
// may not have applied) or failed (it applied nothing). At the end the
// keys are read directly from the server. Counters: lost = max(0,
// succeeded - final) and duplicated = max(0, final - succeeded -
// ambiguous). Transfers: each account value names the transfer that wrote
// it, so the transfers that applied are exactly those whose value was seen
// (by a later write, a read, or at the end); lost counts succeeded
// transfers that are not among them, duplicated failed ones that are (or
// one applied twice), and the final balances must be the initial ones plus
// exactly those transfers (and the total conserved).
//
// # Linearizability
//
// Every call on a key is recorded: when it began (for a write, when its
// final attempt began), when it returned, the state it read and the state
// it wrote. Each key's history is checked with porcupine against a
// compare-and-set register (benchmarks/internal/linearcheck, shared with
// the lease faults): an ambiguous write returns at the end of time and
// may or may not take effect; failed writes are left out (they applied
// nothing). Keys are renewed every ~5000 calls each (a generation), which
// keeps each history small enough to check; the first --window calls of
// each workload are recorded (the memory backend makes more; later calls
// are counted, not recorded). Before the runs, the checkers are run on
// hand-made bad histories (a lost write, a stale read, a doubled write, a
// stale token accepted, a half transfer...) and must reject them.
//
// Results go to DIR/faults.json, and a markdown table to stdout. A lost or
// duplicated write, a history that is not linearizable, unexplained
// balances, a stale write accepted (or none tried) under a lease fault, or
// a run that could not be done make the command say so loudly and exit
// with status 1.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/occkit/occkit/benchmarks/internal/linearcheck"
	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/occ"
)

const (
	workers     = 8 // per workload
	callTimeout = 2 * time.Second
	maxAttempts = 20
)

// Run is one (backend, fault, workload) row of faults.json.
type Run struct {
	Backend  string  `json:"backend"`
	Fault    string  `json:"fault"`
	Workload string  `json:"workload"`
	Seconds  float64 `json:"seconds"`
	// Ops counts the write calls (increments or transfers); Reads the
	// plain Gets that succeeded.
	Ops              int64 `json:"ops"`
	Succeeded        int64 `json:"succeeded"`
	Ambiguous        int64 `json:"ambiguous"`
	AmbiguousApplied int64 `json:"ambiguous_applied"`
	Failed           int64 `json:"failed"`
	Reads            int64 `json:"reads"`
	// Final is the counters' sum, or the accounts' total balance.
	Final      int64 `json:"final"`
	Lost       int64 `json:"lost"`
	Duplicated int64 `json:"duplicated"`
	// Conserved and Explained are the transfer workload's checks.
	Conserved *bool `json:"conserved,omitempty"`
	Explained *bool `json:"explained,omitempty"`
	// Linearizable is null when the check did not finish (see the note).
	Linearizable        *bool   `json:"linearizable"`
	LinearizabilityNote string  `json:"linearizability_note,omitempty"`
	CheckedCalls        int     `json:"checked_calls"`
	CheckedKeys         int     `json:"checked_keys"`
	CheckSeconds        float64 `json:"check_seconds"`
	FaultEvents         int     `json:"fault_events"`
	SucceededAfterFault *int64  `json:"succeeded_after_fault,omitempty"`
	// The lease faults' writes sent with a token smaller than one that had
	// already written the key: applied (must be 0), refused with
	// cas.ErrFenced, or failed otherwise. Nil for the other faults.
	StaleWritesAccepted *int64 `json:"stale_writes_accepted,omitempty"`
	StaleWritesRejected *int64 `json:"stale_writes_rejected,omitempty"`
	StaleWritesOther    *int64 `json:"stale_writes_other,omitempty"`
	// LeaseExpiry says how a lease fault ended the disturbed holders'
	// grants on the server.
	LeaseExpiry string   `json:"lease_expiry,omitempty"`
	Problems    []string `json:"problems,omitempty"`
	Errors      []string `json:"sample_errors,omitempty"`
}

// Bad reports whether the run broke a promise (a lease fault's failed
// leasefaults check is one of its Problems).
func (r Run) Bad() bool {
	return r.Lost != 0 || r.Duplicated != 0 || (r.Linearizable != nil && !*r.Linearizable) ||
		(r.StaleWritesAccepted != nil && *r.StaleWritesAccepted != 0) ||
		(r.Conserved != nil && !*r.Conserved) || (r.Explained != nil && !*r.Explained) || len(r.Problems) > 0
}

// Skipped is a backend, or a (backend, fault) run, the command could not do.
type Skipped struct {
	Backend string `json:"backend"`
	Reason  string `json:"reason"`
}

// Report is faults.json.
type Report struct {
	Started     time.Time `json:"started"`
	Seconds     float64   `json:"seconds"`
	DurationRun string    `json:"duration_per_run"`
	Workers     int       `json:"workers_per_workload"`
	Counters    int       `json:"counters"`
	Accounts    int       `json:"accounts"`
	CallTimeout string    `json:"call_timeout"`
	MaxAttempts int       `json:"max_attempts"`
	Window      int64     `json:"history_window_calls"`
	Runs        []Run     `json:"runs"`
	Skipped     []Skipped `json:"skipped,omitempty"`
}

// params are the knobs of the runs.
type params struct {
	duration     time.Duration
	recovery     time.Duration // least time after a one-shot fault is over
	workers      int           // per workload
	window       int64         // calls recorded per workload and run
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
	backends, skipped := openBackends(ctx, e, func(name string) bool { return selectedBackend(*only, name) })
	rep.Skipped = skipped
	for _, s := range skipped {
		logf("%s: skipped: %s", s.Backend, s.Reason)
	}

	bad := false
	for _, b := range backends {
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

	buf, _ := json.MarshalIndent(rep, "", "  ")
	path := filepath.Join(*out, "faults.json")
	if err := os.WriteFile(path, append(buf, '\n'), 0o644); err != nil {
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

// selected reports whether --only selects the run.
func selected(only, backend, fault string) bool {
	if only == "" {
		return true
	}
	for _, s := range strings.Split(only, ",") {
		if s = strings.TrimSpace(s); s == backend || s == backend+"/"+fault {
			return true
		}
	}
	return false
}

// selectedBackend reports whether --only selects a run of the backend.
func selectedBackend(only, backend string) bool {
	if only == "" {
		return true
	}
	for _, s := range strings.Split(only, ",") {
		if b, _, _ := strings.Cut(strings.TrimSpace(s), "/"); b == backend {
			return true
		}
	}
	return false
}

func leaseProblems(r Run) string {
	if len(r.Problems) == 0 {
		return ""
	}
	return "; " + strings.Join(r.Problems, "; ")
}

// staleSuffix names the stale writes a lease fault's run let in.
func staleSuffix(r Run) string {
	if r.StaleWritesAccepted == nil {
		return ""
	}
	return fmt.Sprintf(", %d STALE WRITES ACCEPTED", *r.StaleWritesAccepted)
}

func problemsSuffix(r Run) string {
	if len(r.Problems) == 0 && r.LinearizabilityNote == "" {
		return ""
	}
	return ": " + strings.Join(append(slices.Clone(r.Problems), r.LinearizabilityNote), "; ")
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "occfaults: "+format+"\n", args...)
}

func logRun(r Run) {
	if r.Workload == leaseWorkload {
		logf("%s/%s/%s: %d increments in %.1f s: %d succeeded, %d ambiguous (%d applied), %d failed; lost %d, duplicated %d; linearizable %s (%d calls on %d keys, %.1f s); %d holders disturbed; stale writes: %d refused, %d accepted, %d failed otherwise%s",
			r.Backend, r.Fault, r.Workload, r.Ops, r.Seconds, r.Succeeded, r.Ambiguous, r.AmbiguousApplied, r.Failed,
			r.Lost, r.Duplicated, fmtVerdict(r.Linearizable), r.CheckedCalls, r.CheckedKeys, r.CheckSeconds,
			r.FaultEvents, *r.StaleWritesRejected, *r.StaleWritesAccepted, *r.StaleWritesOther, leaseProblems(r))
		return
	}
	logf("%s/%s/%s: %d calls in %.1f s: %d succeeded, %d ambiguous (%d applied), %d failed, %d reads; lost %d, duplicated %d; linearizable %s (%d calls on %d keys, %.1f s); %d fault events",
		r.Backend, r.Fault, r.Workload, r.Ops, r.Seconds, r.Succeeded, r.Ambiguous, r.AmbiguousApplied, r.Failed, r.Reads,
		r.Lost, r.Duplicated, fmtVerdict(r.Linearizable), r.CheckedCalls, r.CheckedKeys, r.CheckSeconds, r.FaultEvents)
}

func printTable(rep Report) {
	fmt.Println("| backend | fault | workload | ops | succeeded | ambiguous (applied) | failed | reads | lost | duplicated | linearizable | fault events | stale writes refused / accepted |")
	fmt.Println("| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: |")
	for _, r := range rep.Runs {
		lin := fmtVerdict(r.Linearizable)
		if r.Linearizable == nil {
			lin = "not decided"
		}
		if r.Explained != nil && !*r.Explained {
			lin += ", balances UNEXPLAINED"
		}
		stale := "–"
		if r.StaleWritesRejected != nil && r.StaleWritesAccepted != nil {
			stale = fmt.Sprintf("%d / %d", *r.StaleWritesRejected, *r.StaleWritesAccepted)
		}
		fmt.Printf("| %s | %s | %s | %d | %d | %d (%d) | %d | %d | %d | %d | %s | %d | %s |\n",
			r.Backend, r.Fault, r.Workload, r.Ops, r.Succeeded, r.Ambiguous, r.AmbiguousApplied, r.Failed, r.Reads,
			r.Lost, r.Duplicated, lin, r.FaultEvents, stale)
	}
	for _, s := range rep.Skipped {
		fmt.Printf("\n%s: skipped: %s\n", s.Backend, s.Reason)
	}
	fmt.Printf("\n%d workers per workload, %d counters, %d accounts, %s per run, %s and at most %d attempts per call; up to %d calls per workload and run checked for linearizability.\n",
		rep.Workers, rep.Counters, rep.Accounts, rep.DurationRun, rep.CallTimeout, rep.MaxAttempts, rep.Window)
}

// runOne runs one fault against one backend, both workloads at once, and
// checks them; a lease fault is runLease's.
func runOne(ctx context.Context, p params, b backend, fault string) ([]Run, error) {
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
	counter := newWorkload("counter", t0, numCounters, p.window)
	wls := []*workload{counter}
	waits := []func(){counter.start(ctx, stop, p.workers, 0, counterCall(counter, cas.NewTyped(tg.ops, cas.JSON[int64]()), opts))}
	if _, ok := tg.ops.(cas.Adder); ok {
		delta := newWorkload("delta", t0, numCounters, p.window)
		wls = append(wls, delta)
		waits = append(waits, delta.start(ctx, stop, p.workers, 2*p.workers, deltaCall(delta, tg.ops, opts)))
	}
	if _, err := cas.AsCommitter(tg.ops); err == nil {
		transfer := newWorkload("transfer", t0, numAccounts, p.window)
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
		tg.proxy.SetLatency(0)
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
			FaultEvents: inj.events, Errors: topErrors(wl.errs, 5),
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

// namespace returns a fresh name for a run's table or key prefix.
func namespace(fault string) string {
	return "occfaults_" + strings.ReplaceAll(fault, "-", "_") + "_" + randHex(4)
}

// succeededAfter counts the recorded writes that began after t (ns since
// the run began) and succeeded.
func succeededAfter(wl *workload, t int64) int64 {
	var n int64
	for _, e := range wl.events {
		if e.Kind == linearcheck.Write && e.Outcome == linearcheck.Succeeded && e.Call > t {
			n++
		}
	}
	return n
}

// readFinal reads key from the server directly, trying again for up to
// 30 s (a restarted server's old connections fail first). It returns the
// value, nil when the key does not exist.
func readFinal(ctx context.Context, s cas.Store, key string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		it, err := s.Get(ctx, key)
		switch {
		case err == nil:
			return it.Value, nil
		case errors.Is(err, cas.ErrNotFound):
			return nil, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("reading %s directly: %w", key, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// finishCounter reads the counters back and counts what was lost or
// doubled; the final reads join the histories.
func finishCounter(ctx context.Context, tg *target, wl *workload, keyOf func(int, int64) string, client int, r *Run) error {
	for g := range wl.generations() {
		for i := range numCounters {
			key := keyOf(i, g)
			call := wl.now()
			b, err := readFinal(ctx, tg.direct, key)
			if err != nil {
				return err
			}
			state := ""
			if b != nil {
				var n int64
				if err := json.Unmarshal(b, &n); err != nil {
					return fmt.Errorf("%s: %q: %w", key, b, err)
				}
				r.Final += n
				state = counterState(n, true)
			}
			if g < wl.windowGens {
				wl.events = append(wl.events, linearcheck.Op{Client: client, Key: key, Kind: linearcheck.Read, Call: call, Return: wl.now(), Read: state})
			}
		}
	}
	r.Lost = max(0, r.Succeeded-r.Final)
	r.Duplicated = max(0, r.Final-r.Succeeded-r.Ambiguous)
	r.AmbiguousApplied = min(max(0, r.Final-r.Succeeded), r.Ambiguous)
	return nil
}

// finishTransfer reads the accounts back and checks them against the
// transfers that applied; the final reads join the histories.
func finishTransfer(ctx context.Context, tg *target, wl *workload, client int, r *Run) error {
	final := map[string]string{}
	gens := wl.generations()
	for g := range gens {
		for i := range numAccounts {
			key := accountKey(i, g)
			call := wl.now()
			b, err := readFinal(ctx, tg.direct, key)
			if err != nil {
				return err
			}
			state, bal := "", int64(initialBalance)
			if b != nil {
				a, err := decodeAccount(b)
				if err != nil {
					return err
				}
				state, bal = accountState(a), a.Balance
			}
			r.Final += bal
			if g < wl.windowGens {
				final[key] = state
				wl.events = append(wl.events, linearcheck.Op{Client: client, Key: key, Kind: linearcheck.Read, Call: call, Return: wl.now(), Read: state})
			}
		}
	}
	seen := make([]keyState, 0, len(wl.events))
	for _, e := range wl.events {
		seen = append(seen, keyState{e.Key, e.Read})
	}
	v := checkTransfers(wl.transfers, seen, final)
	conserved := r.Final == gens*numAccounts*initialBalance
	r.Lost, r.Duplicated, r.AmbiguousApplied = v.lost, v.duplicated, v.ambiguousApplied
	r.Conserved, r.Explained = &conserved, &v.explained
	r.Problems = append(r.Problems, v.problems...)
	if !conserved {
		r.Problems = append(r.Problems, fmt.Sprintf("total balance %d, want %d", r.Final, gens*numAccounts*initialBalance))
	}
	return nil
}

func shorten(s string) string {
	if len(s) > 200 {
		return s[:200] + "..."
	}
	return s
}

func topErrors(m map[string]int, n int) []string {
	type kv struct {
		msg string
		n   int
	}
	var all []kv
	for k, v := range m {
		all = append(all, kv{k, v})
	}
	sort.Slice(all, func(i, j int) bool { return all[i].n > all[j].n || all[i].n == all[j].n && all[i].msg < all[j].msg })
	var out []string
	for i := 0; i < len(all) && i < n; i++ {
		out = append(out, fmt.Sprintf("%d× %s", all[i].n, all[i].msg))
	}
	return out
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
