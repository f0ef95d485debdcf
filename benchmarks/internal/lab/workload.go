package lab

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"time"
)

// errDeclined is returned by an operation the workload refuses on the
// values it read: an item sold out, a balance too small. Nothing is
// written; the operation counts as declined, neither committed nor failed.
var errDeclined = errors.New("benchmarks: declined by the workload")

// errNegative is returned by an operation that read a negative value: the
// workload's invariant was already broken by an earlier write. The cell
// fails its invariant check.
var errNegative = errors.New("benchmarks: negative value read")

// Workload describes what an operation does to the values of its keys and
// which invariant must hold at the end. Every value is an int64 stored
// with the JSON codec.
type workloadSpec struct {
	// Name is the workload's name in flags, results and charts.
	Name string
	// About is a one-line description for the report.
	About string
	// KeysPerOp is the number of distinct keys an operation touches (1, or
	// 2 for transfer); a cell needs at least that many keys.
	KeysPerOp int
	// Initial is the starting value of every key (when the cell gives
	// none).
	Initial int64
	// Arg draws an operation's parameter (an amount), if the workload has
	// one.
	Arg func(r *rand.Rand) int64
	// Apply changes vals, the current values of the operation's keys in
	// order, in place, or returns errDeclined.
	Apply func(vals []int64, arg int64) error
	// Check tests the invariant on the final values of all keys, given
	// the initial value of each key and the tally of the whole run.
	Check func(final []int64, initial int64, t opTally) error
}

// Tally counts the outcomes of every operation of a cell, warm-up
// included, for the invariant check.
type opTally struct {
	// Committed operations returned success.
	Committed int64
	// Declined operations were refused by the workload (nothing written).
	Declined int64
	// Ambiguous operations failed with cas.ErrAmbiguous: they may or may
	// not have been applied.
	Ambiguous int64
	// Failed operations returned any other error (nothing written).
	Failed int64
	// Negative counts operations that read a negative value.
	Negative int64
}

// add adds o's counts to t's.
func (t *opTally) add(o opTally) {
	t.Committed += o.Committed
	t.Declined += o.Declined
	t.Ambiguous += o.Ambiguous
	t.Failed += o.Failed
	t.Negative += o.Negative
}

// negativeReads is the invariant check's error when operations read a
// negative value (of what, "counter", "stock"...), nil when none did.
func (t opTally) negativeReads(what string) error {
	if t.Negative > 0 {
		return fmt.Errorf("%d operations read a negative %s", t.Negative, what)
	}
	return nil
}

// explains reports whether n applied operations are what the tally
// allows: every committed one, and at most every ambiguous one besides.
func (t opTally) explains(n int64) bool {
	return n >= t.Committed && n <= t.Committed+t.Ambiguous
}

// Op is one operation of a workload: its keys (distinct, in the order the
// workload's Apply expects them) and its parameter. A strategy reads the
// keys' current values, calls Apply, and writes the result under its
// concurrency control.
type operation struct {
	Keys []string
	arg  int64
	w    *workloadSpec
	work time.Duration
}

// Apply computes the operation's new values from the current ones in
// vals, in place. It spends the cell's work time first: that is the
// critical section, between the read and the write. It returns
// errDeclined when the workload refuses, errNegative when a value read is
// negative (a broken invariant); a strategy returns these errors as they
// are, and must call Apply again, with fresh values, if it retries.
func (op operation) Apply(vals []int64) error {
	for _, v := range vals {
		if v < 0 {
			return errNegative
		}
	}
	if op.work > 0 {
		time.Sleep(op.work)
	}
	return op.w.Apply(vals, op.arg)
}

// lookupWorkload returns the workload with that name.
func lookupWorkload(name string) (*workloadSpec, bool) {
	for _, w := range builtinWorkloads {
		if w.Name == name {
			return w, true
		}
	}
	return nil, false
}

// Workloads returns the names of the workloads, in the lab's order
// (counter, inventory, transfer).
func Workloads() []string {
	names := make([]string, 0, len(builtinWorkloads))
	for _, w := range builtinWorkloads {
		names = append(names, w.Name)
	}
	return names
}

func sum(vals []int64) int64 {
	var s int64
	for _, v := range vals {
		s += v
	}
	return s
}

func checkNonNegative(final []int64) error {
	for i, v := range final {
		if v < 0 {
			return fmt.Errorf("key %d ends at %d, below zero", i, v)
		}
	}
	return nil
}

var builtinWorkloads = []*workloadSpec{
	{
		Name:      "counter",
		About:     "read-modify-write increment of one key",
		KeysPerOp: 1,
		Apply: func(vals []int64, _ int64) error {
			vals[0]++
			return nil
		},
		Check: func(final []int64, initial int64, t opTally) error {
			if err := t.negativeReads("counter"); err != nil {
				return err
			}
			got := sum(final) - initial*int64(len(final))
			if !t.explains(got) {
				return fmt.Errorf("counters sum to %d increments, but %d increments succeeded (%d ambiguous): updates were lost or applied twice", got, t.Committed, t.Ambiguous)
			}
			return nil
		},
	},
	{
		Name:      "inventory",
		About:     "decrement one item's stock if it is above zero (sold out otherwise)",
		KeysPerOp: 1,
		Initial:   1_000_000_000,
		Apply: func(vals []int64, _ int64) error {
			if vals[0] <= 0 {
				return errDeclined
			}
			vals[0]--
			return nil
		},
		Check: func(final []int64, initial int64, t opTally) error {
			if err := checkNonNegative(final); err != nil {
				return fmt.Errorf("stock went negative: %w", err)
			}
			if err := t.negativeReads("stock"); err != nil {
				return err
			}
			sold := initial*int64(len(final)) - sum(final)
			if !t.explains(sold) {
				return fmt.Errorf("sold + remaining ≠ initial: stock fell by %d, but %d sales succeeded (%d ambiguous)", sold, t.Committed, t.Ambiguous)
			}
			return nil
		},
	},
	{
		Name:      "transfer",
		About:     "move 1 to 10 units from one account to another if the balance allows (two keys, atomically)",
		KeysPerOp: 2,
		Initial:   1000,
		Arg:       func(r *rand.Rand) int64 { return 1 + r.Int64N(10) },
		Apply: func(vals []int64, amount int64) error {
			if vals[0] < amount {
				return errDeclined
			}
			vals[0] -= amount
			vals[1] += amount
			return nil
		},
		Check: func(final []int64, initial int64, t opTally) error {
			if err := checkNonNegative(final); err != nil {
				return fmt.Errorf("a balance went negative: %w", err)
			}
			if err := t.negativeReads("balance"); err != nil {
				return err
			}
			want := initial * int64(len(final))
			if got := sum(final); got != want {
				return fmt.Errorf("total balance not conserved: %d at the end, %d at the start", got, want)
			}
			return nil
		},
	},
}
