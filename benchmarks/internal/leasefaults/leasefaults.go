package leasefaults

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/occkit/occkit/benchmarks/internal/linearcheck"
)

// The faults Run knows.
const (
	// PausedHolder: the holder stops inside its critical section past the
	// end of its grant and then writes with its old token.
	PausedHolder = "paused-holder"
	// ClockJump: the holder's lease says it is valid (its clock is
	// behind) while the server has ended it and granted the key again.
	ClockJump = "clock-jump"
)

// AllFaults returns the faults Run knows, in the order it runs them.
func AllFaults() []string { return []string{PausedHolder, ClockJump} }

// Defaults for Config's zero fields.
const (
	DefaultDuration     = 2 * time.Second
	DefaultWorkers      = 6
	DefaultKeys         = 4
	DefaultCheckTimeout = time.Minute
	// DefaultHistoryPerKey bounds the calls porcupine checks at once: its
	// memory grows with the square of the history it checks
	// (docs/benchmarks.md, "The lease faults' history bound", has what
	// 10 000 calls took).
	DefaultHistoryPerKey = 10_000
)

// Config says what Run does. The zero value of each field but Targets
// means its default. Run does not modify it.
type Config struct {
	// Targets are the backends to run on, each with every fault.
	Targets []Target
	// Faults are the faults to run (default AllFaults()).
	Faults []string
	// Duration is how long each (backend, fault) run starts new
	// increments (default DefaultDuration); increments in flight then
	// finish.
	Duration time.Duration
	// Workers is the number of concurrent workers (default
	// DefaultWorkers, at least 3): two thirds of them are disturbed
	// holders (see the package documentation).
	Workers int
	// Keys is the number of counters they share (default DefaultKeys).
	Keys int
	// CheckTimeout is porcupine's time for a run's history (default
	// DefaultCheckTimeout).
	CheckTimeout time.Duration
	// HistoryPerKey bounds the calls porcupine checks at once (default
	// DefaultHistoryPerKey): a key's longer history is checked in
	// overlapping segments (linearcheck.Options.MaxPerKey).
	HistoryPerKey int

	// unfenced makes rogue holders write with a plain CompareAndSwap
	// (the mutant of the package's tests).
	unfenced bool
}

func (c Config) withDefaults() Config {
	if c.Duration <= 0 {
		c.Duration = DefaultDuration
	}
	if c.Workers <= 0 {
		c.Workers = DefaultWorkers
	}
	c.Workers = max(c.Workers, 3)
	if c.Keys <= 0 {
		c.Keys = DefaultKeys
	}
	if c.CheckTimeout <= 0 {
		c.CheckTimeout = DefaultCheckTimeout
	}
	if c.HistoryPerKey <= 0 {
		c.HistoryPerKey = DefaultHistoryPerKey
	}
	if len(c.Faults) == 0 {
		c.Faults = AllFaults()
	}
	return c
}

// Result is the outcome of one (backend, fault) run, a plain value. JSON
// names follow faults.json.
type Result struct {
	Backend string `json:"backend"`
	Fault   string `json:"fault"`
	// Expiry says how the disturbed holders' grants ended on the server.
	Expiry string `json:"expiry"`
	// Ops is the number of increments attempted: Succeeded + Ambiguous +
	// Failed.
	Ops       int64 `json:"ops"`
	Succeeded int64 `json:"succeeded"`
	// Ambiguous increments ended with cas.ErrAmbiguous: they may or may
	// not have applied.
	Ambiguous int64 `json:"ambiguous"`
	Failed    int64 `json:"failed"`
	// Final is the sum of the counters, read through Target.Direct.
	Final int64 `json:"final"`
	// Lost is max(0, Succeeded - Final); Duplicated is
	// max(0, Final - Succeeded - Ambiguous).
	Lost       int64 `json:"lost"`
	Duplicated int64 `json:"duplicated"`
	// Disturbed is the number of holders whose grant ended on the server
	// while they were in their critical section.
	Disturbed int64 `json:"disturbed"`
	// StaleWritesAccepted, StaleWritesRejected and StaleWritesOther count
	// the writes sent with a token smaller than one that had already
	// written the key: applied, refused with cas.ErrFenced, or failed
	// otherwise (a conflict, an ambiguous outcome, a timeout).
	StaleWritesAccepted int64 `json:"stale_writes_accepted"`
	StaleWritesRejected int64 `json:"stale_writes_rejected"`
	StaleWritesOther    int64 `json:"stale_writes_other"`
	// Linearizable is porcupine's verdict on the run's history (every
	// call that reached the store, and the final reads; see the package
	// documentation): true, false, or nil when it could not decide
	// (LinearizabilityNote says why).
	Linearizable        *bool  `json:"linearizable"`
	LinearizabilityNote string `json:"linearizability_note,omitempty"`
	// CheckedCalls is the number of calls checked, on CheckedKeys keys,
	// in CheckSeconds.
	CheckedCalls int     `json:"checked_calls"`
	CheckedKeys  int     `json:"checked_keys"`
	CheckSeconds float64 `json:"check_seconds"`
	// Errors are the most frequent errors of failed increments, with
	// their counts.
	Errors []string `json:"sample_errors,omitempty"`

	lin linearcheck.Result // for VisualizeHistory
}

// VisualizeHistory writes porcupine's visualization of the key whose
// history is not linearizable (an HTML file) to path; it fails when the
// history was linearizable or not checked.
func (r Result) VisualizeHistory(path string) error { return r.lin.Visualize(path) }

var (
	// ErrUnsafe reports a run in which a stale write was accepted, an
	// increment was lost or applied twice, or the history is not
	// linearizable.
	ErrUnsafe = errors.New("leasefaults: unsafe outcome")
	// ErrVacuous reports a run that did not test what it should: no
	// stale write was sent (the fence was not tested), or the history
	// could not be checked.
	ErrVacuous = errors.New("leasefaults: the run tested nothing")
)

// CheckError is the error of Result.Check. It matches ErrUnsafe or
// ErrVacuous with errors.Is.
type CheckError struct {
	Backend, Fault string
	// Problems lists what is wrong, e.g. "2 stale writes accepted".
	Problems []string
	// Err is ErrUnsafe or ErrVacuous.
	Err error
}

// Error implements error.
func (e *CheckError) Error() string {
	return fmt.Sprintf("%s/%s: %v: %s", e.Backend, e.Fault, e.Err, strings.Join(e.Problems, ", "))
}

// Unwrap returns ErrUnsafe or ErrVacuous.
func (e *CheckError) Unwrap() error { return e.Err }

// Check returns nil for a run that tested the fence and found it holding:
// at least one stale write was sent, none was accepted, nothing was lost
// or duplicated, and the history is linearizable. Otherwise it returns a
// *CheckError, matching ErrUnsafe (which takes precedence) or ErrVacuous
// (also for a history not checked: Linearizable nil).
func (r Result) Check() error {
	var p []string
	if r.Linearizable != nil && !*r.Linearizable {
		p = append(p, "history not linearizable: "+r.LinearizabilityNote)
	}
	if r.StaleWritesAccepted > 0 {
		p = append(p, fmt.Sprintf("%d stale writes accepted", r.StaleWritesAccepted))
	}
	if r.Lost > 0 {
		p = append(p, fmt.Sprintf("%d increments lost", r.Lost))
	}
	if r.Duplicated > 0 {
		p = append(p, fmt.Sprintf("%d increments applied twice", r.Duplicated))
	}
	if len(p) > 0 {
		return &CheckError{Backend: r.Backend, Fault: r.Fault, Problems: p, Err: ErrUnsafe}
	}
	if r.StaleWritesAccepted+r.StaleWritesRejected+r.StaleWritesOther == 0 {
		p = append(p, fmt.Sprintf("no stale write was sent (%d holders disturbed, %d increments)", r.Disturbed, r.Ops))
	}
	if r.Linearizable == nil {
		p = append(p, "history not checked: "+r.LinearizabilityNote)
	}
	if len(p) > 0 {
		return &CheckError{Backend: r.Backend, Fault: r.Fault, Problems: p, Err: ErrVacuous}
	}
	return nil
}

// RunError is the error of a (backend, fault) run that could not be done
// (a locker or the final read failed, the backend cannot do the fault).
type RunError struct {
	Backend, Fault string
	Err            error
}

// Error implements error.
func (e *RunError) Error() string { return fmt.Sprintf("%s/%s: %v", e.Backend, e.Fault, e.Err) }

// Unwrap returns the cause.
func (e *RunError) Unwrap() error { return e.Err }

// Run runs each fault of cfg on each backend, one run after the other,
// each on fresh keys, and returns the results of the runs it could do.
// Keys are named "leasefaults-<fault>-<random>-<i>" in the backend's
// store; removing them afterwards is the caller's business.
// A run that could not be done adds a *RunError to the returned error
// (errors.Join) and the others go on; when ctx ends, Run stops and the
// error matches ctx.Err(). Run does not judge the results: see
// Result.Check.
func Run(ctx context.Context, cfg Config) ([]Result, error) {
	cfg = cfg.withDefaults()
	if len(cfg.Targets) == 0 {
		return nil, errors.New("leasefaults: no backends")
	}
	var (
		results []Result
		errs    []error
	)
	for _, b := range cfg.Targets {
		for _, f := range cfg.Faults {
			if err := ctx.Err(); err != nil {
				return results, errors.Join(append(errs, err)...)
			}
			r, err := runOne(ctx, cfg, b, f)
			if err != nil {
				errs = append(errs, &RunError{Backend: b.Name, Fault: f, Err: err})
				continue
			}
			results = append(results, r)
		}
	}
	return results, errors.Join(errs...)
}

// check says why b cannot run fault, if it cannot.
func (b Target) check(fault string) error {
	switch {
	case b.Name == "":
		return errors.New("leasefaults: backend without a name")
	case b.Store == nil || b.NewLocker == nil:
		return errors.New("leasefaults: backend without a Store or NewLocker")
	case !slices.Contains(AllFaults(), fault):
		return fmt.Errorf("leasefaults: unknown fault %q", fault)
	case !b.RunsOut && b.Expire == nil:
		return fmt.Errorf("leasefaults: %w: grants neither run out by themselves nor can be ended (Expire)", errors.ErrUnsupported)
	case b.RunsOut && b.TTL <= 0:
		return errors.New("leasefaults: RunsOut without a TTL")
	}
	return nil
}
