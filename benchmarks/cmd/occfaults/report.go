package main

import (
	"fmt"
	"slices"
	"strings"
	"time"
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
	// Undone counts, in a failover row, the transfers that calls saw
	// applied on the old master and the failover undid (their calls then
	// failed or applied again); not a duplicate.
	Undone int64 `json:"undone,omitempty"`
	// Allowed, when set, says what this row may show by design and why
	// (the redis-cluster failovers): a history that is not linearizable
	// and balances the transfers that were seen do not explain (a read
	// saw a write that the failover then undid), and with AllowsLost
	// acknowledged writes lost (asynchronous replication without WAIT).
	// They are reported as measured and do not fail the command; a lost
	// write (unless allowed), a duplicated write or money not conserved
	// still does.
	Allowed    string `json:"allowed,omitempty"`
	AllowsLost bool   `json:"allows_lost,omitempty"`
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
	if r.Allowed != "" {
		return (r.Lost != 0 && !r.AllowsLost) || r.Duplicated != 0 || (r.Conserved != nil && !*r.Conserved)
	}
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
		lost := fmt.Sprint(r.Lost)
		if r.AllowsLost {
			lost += " (allowed)"
		}
		if r.Allowed != "" {
			lin += " (allowed: " + r.Allowed + ")"
		}
		stale := "–"
		if r.StaleWritesRejected != nil && r.StaleWritesAccepted != nil {
			stale = fmt.Sprintf("%d / %d", *r.StaleWritesRejected, *r.StaleWritesAccepted)
		}
		fmt.Printf("| %s | %s | %s | %d | %d | %d (%d) | %d | %d | %s | %d | %s | %d | %s |\n",
			r.Backend, r.Fault, r.Workload, r.Ops, r.Succeeded, r.Ambiguous, r.AmbiguousApplied, r.Failed, r.Reads,
			lost, r.Duplicated, lin, r.FaultEvents, stale)
	}
	for _, s := range rep.Skipped {
		fmt.Printf("\n%s: skipped: %s\n", s.Backend, s.Reason)
	}
	fmt.Printf("\n%d workers per workload, %d counters, %d accounts, %s per run, %s and at most %d attempts per call; up to %d calls per workload and run checked for linearizability.\n",
		rep.Workers, rep.Counters, rep.Accounts, rep.DurationRun, rep.CallTimeout, rep.MaxAttempts, rep.Window)
}

func shorten(s string) string {
	if len(s) > 200 {
		return s[:200] + "..."
	}
	return s
}
