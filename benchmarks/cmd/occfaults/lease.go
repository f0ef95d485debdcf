package main

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/occkit/occkit/benchmarks/internal/leasefaults"
)

// The lease faults, run by benchmarks/internal/leasefaults on the clients
// the command already has (no proxy: they need no network fault).
const (
	faultPausedHolder = leasefaults.PausedHolder // the holder stops past the end of its grant
	faultClockJump    = leasefaults.ClockJump    // the holder's clock says its ended grant still runs
	// leaseWorkload is the workload of the lease faults' rows: hybrid.Update
	// increments of numCounters counters, with disturbed holders; its
	// history is every call that reached the store (leasefaults records
	// and checks it).
	leaseWorkload = "lease"
	// leaseTTL is the grants' TTL on the backends whose TTL can be chosen
	// (the in-process locker, Redis; etcd's least is 1 s, PostgreSQL's
	// session locks have none).
	leaseTTL = 300 * time.Millisecond
)

// leaseFaults are the lease faults, in the order they run.
var leaseFaults = leasefaults.AllFaults()

func isLeaseFault(fault string) bool { return slices.Contains(leaseFaults, fault) }

// runLease runs one lease fault on b and makes its row: leasefaults.Run's
// result, with porcupine's verdict on its history, whose failed Check is a
// problem of the row.
func runLease(ctx context.Context, p params, b subject, fault string) ([]Run, error) {
	if !slices.Contains(b.faults, fault) {
		return nil, fmt.Errorf("%w: %s has no lease lock", errNoFault, b.name)
	}
	lb, cleanup, err := b.lease(ctx, namespace(fault), p.workers)
	if err != nil {
		return nil, err
	}
	defer cleanup()
	return leaseRow(ctx, p, lb, fault)
}

// leaseRow runs one lease fault on lb and makes its row.
func leaseRow(ctx context.Context, p params, lb leasefaults.Target, fault string) ([]Run, error) {
	t0 := time.Now()
	results, err := leasefaults.Run(ctx, leasefaults.Config{
		Targets:  []leasefaults.Target{lb},
		Faults:   []string{fault},
		Duration: p.duration,
		Workers:  p.workers,
		Keys:     numCounters,
		// The calls checked per key are leasefaults' default.
		CheckTimeout: p.checkTimeout,
	})
	if err != nil {
		return nil, err
	}
	if len(results) != 1 {
		return nil, fmt.Errorf("leasefaults: %d results, want 1", len(results))
	}
	res := results[0]
	r := Run{
		Backend: lb.Name, Fault: fault, Workload: leaseWorkload, Seconds: time.Since(t0).Seconds(),
		Ops: res.Ops, Succeeded: res.Succeeded, Ambiguous: res.Ambiguous, Failed: res.Failed, Final: res.Final,
		AmbiguousApplied: min(max(0, res.Final-res.Succeeded), res.Ambiguous),
		Lost:             res.Lost, Duplicated: res.Duplicated,
		Linearizable: res.Linearizable, LinearizabilityNote: res.LinearizabilityNote,
		CheckedCalls: res.CheckedCalls, CheckedKeys: res.CheckedKeys, CheckSeconds: res.CheckSeconds,
		FaultEvents:         int(res.Disturbed),
		StaleWritesAccepted: &res.StaleWritesAccepted,
		StaleWritesRejected: &res.StaleWritesRejected,
		StaleWritesOther:    &res.StaleWritesOther,
		LeaseExpiry:         res.Expiry,
		Errors:              res.Errors,
	}
	r.LinearizabilityNote += visualize(p, lb.Name, fault, leaseWorkload, res.VisualizeHistory)
	if err := res.Check(); err != nil {
		r.Problems = append(r.Problems, err.Error())
	}
	return []Run{r}, nil
}
