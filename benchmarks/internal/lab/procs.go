package lab

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// envCellChild marks a process started by runProcs: ChildMain runs the
// workers of the cell it reads on stdin.
const envCellChild = "OCCKIT_LAB_CELL_CHILD"

// childSpec is what a --procs child runs: its share of a cell's workers
// on the store of namespace NS, which the parent made and seeded.
type childSpec struct {
	Cell Cell
	NS   string
	// W0 and N are the global index of the child's first worker and how
	// many it runs (N may be 0: more processes than workers).
	W0, N int
	// Ops is the child's share of Cell.Ops, the cell's count in all (0
	// when the cell runs for a duration, or when the share is empty).
	Ops int64
	// Proc is the child's index among the cell's processes.
	Proc int
	// Services are the parent's open services, opened again by the
	// child (on its own connections, through its own proxies).
	Services []string
	Proxy    bool
	Delay    time.Duration
}

// workerReport is a worker's counters, as a child sends them back.
type workerReport struct {
	Buckets map[int]uint64
	N       uint64
	Max     time.Duration
	workerCounts
	FirstErr string
}

func (w *worker) report() workerReport {
	r := workerReport{Buckets: map[int]uint64{}, N: w.hist.n, Max: w.hist.max, workerCounts: w.workerCounts}
	for i, n := range w.hist.counts {
		if n > 0 {
			r.Buckets[i] = n
		}
	}
	if w.firstErr != nil {
		r.FirstErr = w.firstErr.Error()
	}
	return r
}

func (w *worker) load(r workerReport) {
	w.hist = latencyHistogram{n: r.N, max: r.Max}
	if r.N > 0 {
		w.hist.counts = make([]uint64, histBuckets)
		for i, n := range r.Buckets {
			w.hist.counts[i] = n
		}
	}
	w.workerCounts = r.workerCounts
	if r.FirstErr != "" {
		w.firstErr = errors.New(r.FirstErr)
	}
}

// runProcs runs the workers of cell c in c.Procs child processes (this
// binary, run again: its main must call ChildMain first), each on its own
// connections to the lab's servers and with its own strategy, on the
// store of namespace ns. The children start together once all are set
// up; their counters are loaded into workers.
func (l *Lab) runProcs(ctx context.Context, c Cell, ns string, workers []*worker) (time.Duration, error) {
	exe, err := os.Executable()
	if err != nil {
		return 0, err
	}
	env := append(os.Environ(), envCellChild+"=1")
	var services []string
	for _, name := range l.Open() {
		b, _ := l.backend(name)
		if ce := b.Env(); ce != nil {
			env = append(env, ce...)
			// Backends opened on demand (Redlock's servers) are opened
			// on demand in the child too, from the same environment.
			if !b.Spec().OnDemand {
				services = append(services, name)
			}
		}
	}
	if !strings.Contains(strings.Join(services, ","), c.Backend) {
		return 0, fmt.Errorf("backend %s cannot be shared with other processes: %w", c.Backend, errNotApplicable)
	}
	type child struct {
		cmd    *exec.Cmd
		in     io.WriteCloser
		out    *bufio.Reader
		w0, n  int
		stderr strings.Builder
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	children := make([]*child, c.Procs)
	w0 := 0
	for i := range children {
		n := c.Workers / c.Procs
		if i < c.Workers%c.Procs {
			n++
		}
		ch := &child{w0: w0, n: n}
		w0 += n
		ch.cmd = exec.CommandContext(ctx, exe)
		ch.cmd.Env = env
		ch.cmd.Stderr = &ch.stderr
		if ch.in, err = ch.cmd.StdinPipe(); err != nil {
			return 0, err
		}
		out, err := ch.cmd.StdoutPipe()
		if err != nil {
			return 0, err
		}
		ch.out = bufio.NewReaderSize(out, 1<<20)
		if err := ch.cmd.Start(); err != nil {
			return 0, err
		}
		children[i] = ch
		defer func() { _ = ch.cmd.Wait() }()
		defer ch.in.Close()
	}
	fail := func(ch *child, err error) error {
		cancel()
		_ = ch.cmd.Wait()
		return fmt.Errorf("child process: %w: %s", err, strings.TrimSpace(ch.stderr.String()))
	}
	for i, ch := range children {
		spec := childSpec{Cell: c, NS: ns, W0: ch.w0, N: ch.n, Proc: i, Services: services, Proxy: l.env.Proxy, Delay: l.env.Delay}
		if c.Ops > 0 {
			// A count of operations is the cell's, in all: each child
			// runs its workers' share.
			w := int64(c.Workers)
			spec.Ops = c.Ops*int64(ch.w0+ch.n)/w - c.Ops*int64(ch.w0)/w
		}
		if err := json.NewEncoder(ch.in).Encode(spec); err != nil {
			return 0, fail(ch, err)
		}
	}
	for _, ch := range children {
		line, err := ch.out.ReadString('\n')
		if err != nil || strings.TrimSpace(line) != "ready" {
			return 0, fail(ch, fmt.Errorf("not ready (%q, %v)", line, err))
		}
	}
	start := time.Now().Add(20 * time.Millisecond)
	for _, ch := range children {
		if _, err := fmt.Fprintf(ch.in, "go %d\n", start.UnixNano()); err != nil {
			return 0, fail(ch, err)
		}
	}
	for _, ch := range children {
		var reps []workerReport
		if err := json.NewDecoder(ch.out).Decode(&reps); err != nil {
			return 0, fail(ch, err)
		}
		if len(reps) != ch.n {
			return 0, fail(ch, fmt.Errorf("%d worker reports, want %d", len(reps), ch.n))
		}
		for i, r := range reps {
			workers[ch.w0+i].load(r)
		}
	}
	return time.Since(start), nil
}

// ChildMain runs a --procs child's share of a cell when this process was
// started as one by the lab, and then exits; otherwise it returns at once.
// A program that runs cells with Procs > 1 calls it first thing in main.
func ChildMain() {
	if os.Getenv(envCellChild) == "" {
		return
	}
	if err := runChild(os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "occbench child:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

func runChild(stdin io.Reader, stdout io.Writer) error {
	in := bufio.NewReader(stdin)
	var spec childSpec
	line, err := in.ReadString('\n')
	if err != nil {
		return err
	}
	if err := json.Unmarshal([]byte(line), &spec); err != nil {
		return err
	}
	ctx := context.Background()
	c := spec.Cell
	l, err := OpenLab(ctx, spec.Services, Env{MaxWorkers: spec.N, Log: io.Discard, Proxy: spec.Proxy, Delay: spec.Delay, proc: spec.Proc + 1})
	if err != nil {
		return err
	}
	defer func() { _ = l.Close(context.Background()) }()
	if sk := l.Skipped(); len(sk) > 0 {
		return fmt.Errorf("cannot open %s: %s", sk[0].Name, sk[0].Reason)
	}
	// The cell is checked as the parent checked it (its workers and
	// operations in all); the child then runs its share, which may be
	// empty.
	c, wl, spec2, be, err := l.check(c)
	if err != nil {
		return err
	}
	c.Workers = spec.N
	if c.Ops > 0 {
		c.Ops = spec.Ops
	}
	store, err := be.Store(spec.NS)
	if err != nil {
		return err
	}
	zipf, err := newZipf(c.Keys, c.Theta)
	if err != nil {
		return err
	}
	h, ks := newHarness(l, c, wl, be, store, spec.NS)
	h.Attached = true
	workers := h.newWorkers()
	defer func() { _ = h.close(context.Background()) }()
	strat, err := spec2.New(ctx, h)
	if err != nil {
		return err
	}
	if _, err := fmt.Fprintln(stdout, "ready"); err != nil {
		return err
	}
	line, err = in.ReadString('\n')
	if err != nil {
		return err
	}
	ns, ok := strings.CutPrefix(strings.TrimSpace(line), "go ")
	startNs, perr := strconv.ParseInt(ns, 10, 64)
	if !ok || perr != nil {
		return fmt.Errorf("bad start line %q", line)
	}
	runWorkers(ctx, c, wl, zipf, ks, strat, workers, spec.W0, time.Unix(0, startNs))
	_ = strat.Close(ctx)
	reps := make([]workerReport, len(workers))
	for i, w := range workers {
		reps[i] = w.report()
	}
	return json.NewEncoder(stdout).Encode(reps)
}
