package castest

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/occkit/occkit/cas"
)

// OpKind is the kind of a recorded operation.
type OpKind uint8

// Recorded operation kinds.
const (
	OpGet OpKind = iota
	OpSwap
	OpDelete
)

// Input is a recorded call: Get(Key), CompareAndSwap(Key, Expected, Value)
// or CompareAndDelete(Key, Expected).
type Input struct {
	Kind     OpKind
	Key      string
	Expected cas.Version
	Value    string
}

// String describes the call.
func (in Input) String() string {
	switch in.Kind {
	case OpGet:
		return fmt.Sprintf("get(%s)", in.Key)
	case OpSwap:
		return fmt.Sprintf("cas(%s, v%d, %q)", in.Key, in.Expected, in.Value)
	}
	return fmt.Sprintf("delete(%s, v%d)", in.Key, in.Expected)
}

// Output is a recorded result. For a Get, Version 0 means not found. A
// conflict records the current version (and value) when the store
// returned it.
type Output struct {
	Version      cas.Version
	Value        string
	Conflict     bool
	HasCurrent   bool
	Current      cas.Version
	CurrentValue string
	Err          error
}

// String describes the result.
func (out Output) String() string {
	switch {
	case out.Err != nil:
		return "error: " + out.Err.Error()
	case out.Conflict && out.HasCurrent:
		return fmt.Sprintf("conflict (current v%d %q)", out.Current, out.CurrentValue)
	case out.Conflict:
		return "conflict"
	}
	return fmt.Sprintf("v%d %q", out.Version, out.Value)
}

// Apply performs in on s and records the result.
func Apply(ctx context.Context, s cas.Store, in Input) Output {
	var out Output
	var err error
	switch in.Kind {
	case OpGet:
		var it cas.Item
		it, err = s.Get(ctx, in.Key)
		if errors.Is(err, cas.ErrNotFound) {
			return out
		}
		out.Version, out.Value = it.Version, string(it.Value)
	case OpSwap:
		out.Version, err = s.CompareAndSwap(ctx, in.Key, in.Expected, []byte(in.Value))
		out.Value = in.Value
	case OpDelete:
		err = s.CompareAndDelete(ctx, in.Key, in.Expected)
	}
	var ce *cas.ConflictError
	switch {
	case err == nil:
	case errors.As(err, &ce):
		out = Output{Conflict: true, HasCurrent: ce.HasCurrent, Current: ce.Current.Version, CurrentValue: string(ce.Current.Value)}
	default:
		out.Err = err
	}
	return out
}

// state is one key's state in the sequential specification: its version
// and value, and the largest version it ever had (versions never repeat).
type state struct {
	version cas.Version
	value   string
	highest cas.Version
}

// Model is the sequential specification of a cas.Store, partitioned by key,
// for porcupine: a Get returns the last written value and version; a write
// succeeds exactly when the expected version is the current one and then
// gets a version above every version the key ever had; a conflict happens
// exactly when it is not, and the current state it carries is the real one.
var Model = porcupine.Model{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		byKey := map[string][]porcupine.Operation{}
		var order []string
		for _, op := range history {
			k := op.Input.(Input).Key
			if _, ok := byKey[k]; !ok {
				order = append(order, k)
			}
			byKey[k] = append(byKey[k], op)
		}
		parts := make([][]porcupine.Operation, 0, len(order))
		for _, k := range order {
			parts = append(parts, byKey[k])
		}
		return parts
	},
	Init: func() any { return state{} },
	Step: func(st, input, output any) (bool, any) {
		s, in, out := st.(state), input.(Input), output.(Output)
		if out.Err != nil {
			return false, s
		}
		if out.Conflict {
			if s.version == in.Expected {
				return false, s
			}
			if out.HasCurrent && (out.Current != s.version || (s.version != 0 && out.CurrentValue != s.value)) {
				return false, s
			}
			return true, s
		}
		switch in.Kind {
		case OpGet:
			return out.Version == s.version && (s.version == 0 || out.Value == s.value), s
		case OpSwap:
			if s.version != in.Expected || out.Version <= s.highest {
				return false, s
			}
			return true, state{version: out.Version, value: in.Value, highest: out.Version}
		default:
			if s.version != in.Expected || s.version == 0 {
				return false, s
			}
			return true, state{highest: s.highest}
		}
	},
	DescribeOperation: func(input, output any) string {
		return fmt.Sprintf("%s -> %s", input.(Input), output.(Output))
	},
	DescribeState: func(st any) string {
		s := st.(state)
		if s.version == 0 {
			return fmt.Sprintf("absent (highest v%d)", s.highest)
		}
		return fmt.Sprintf("v%d %q", s.version, s.value)
	},
}

// History records calls of Get, CompareAndSwap and CompareAndDelete with
// their results and the times they were made and returned, for
// CheckHistory. NewHistory makes one; it is safe for concurrent use.
type History struct {
	start   time.Time
	mu      sync.Mutex
	ops     []porcupine.Operation
	clients int
}

// NewHistory returns an empty history whose clock starts now.
func NewHistory() *History { return &History{start: time.Now()} }

func (h *History) now() int64 { return time.Since(h.start).Nanoseconds() }

// Apply performs in on s, as the package's Apply does, records the call
// as one of client (a number from 0, for porcupine's visualization) and
// returns its result.
func (h *History) Apply(ctx context.Context, s cas.Store, client int, in Input) Output {
	call := h.now()
	out := Apply(ctx, s, in)
	h.record(client, in, out, call)
	return out
}

func (h *History) record(client int, in Input, out Output, call int64) {
	op := porcupine.Operation{ClientId: client, Input: in, Call: call, Output: out, Return: h.now()}
	h.mu.Lock()
	h.ops = append(h.ops, op)
	h.mu.Unlock()
}

// Store returns a store that passes its calls to s and records them in
// h, each Store of h as another client. It implements cas.Store and no
// more: what s can do besides (commits, exclusive updates, batched reads)
// is hidden, so that every read and write occ.Update or occ.Txn makes
// through it is a recorded call.
func (h *History) Store(s cas.Store) cas.Store {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.clients++
	return &recorded{h: h, s: s, client: h.clients - 1}
}

// Operations returns the calls recorded so far.
func (h *History) Operations() []porcupine.Operation {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]porcupine.Operation(nil), h.ops...)
}

// recorded is a store whose calls a History records.
type recorded struct {
	h      *History
	s      cas.Store
	client int
}

func (r *recorded) Get(ctx context.Context, key string) (cas.Item, error) {
	call := r.h.now()
	it, err := r.s.Get(ctx, key)
	out := Output{Version: it.Version, Value: string(it.Value), Err: err}
	if errors.Is(err, cas.ErrNotFound) {
		out = Output{}
	}
	r.h.record(r.client, Input{Kind: OpGet, Key: key}, out, call)
	return it, err
}

func (r *recorded) CompareAndSwap(ctx context.Context, key string, expected cas.Version, value []byte) (cas.Version, error) {
	call := r.h.now()
	v, err := r.s.CompareAndSwap(ctx, key, expected, value)
	r.h.record(r.client, Input{Kind: OpSwap, Key: key, Expected: expected, Value: string(value)}, output(Output{Version: v, Value: string(value)}, err), call)
	return v, err
}

func (r *recorded) CompareAndDelete(ctx context.Context, key string, expected cas.Version) error {
	call := r.h.now()
	err := r.s.CompareAndDelete(ctx, key, expected)
	r.h.record(r.client, Input{Kind: OpDelete, Key: key, Expected: expected}, output(Output{}, err), call)
	return err
}

// output is the recorded result of a write that returned ok and err.
func output(ok Output, err error) Output {
	var ce *cas.ConflictError
	switch {
	case err == nil:
		return ok
	case errors.As(err, &ce):
		return Output{Conflict: true, HasCurrent: ce.HasCurrent, Current: ce.Current.Version, CurrentValue: string(ce.Current.Value)}
	}
	return Output{Err: err}
}

// CheckOptions say how CheckHistory treats reads and ambiguous writes.
type CheckOptions struct {
	// StaleReads checks reads as Harness.StaleReads allows them: not as
	// part of the linearizable history, but each on its own: it returned
	// absent, or a value with the version a successful write of that
	// value got, from a write called before the read returned.
	StaleReads bool
	// Resolve says what became of a write that failed with
	// cas.ErrAmbiguous (err; in is the call): whether it was applied and
	// at which version (for a delete, any). known false means it cannot
	// tell, and fails the check. Without Resolve, every ambiguous write
	// fails the check.
	Resolve func(in Input, err error) (v cas.Version, applied, known bool)
	// Timeout bounds porcupine's search (default 60 s).
	Timeout time.Duration
}

// HistoryReport counts what CheckHistory checked.
type HistoryReport struct {
	// Writes are the writes in the linearizable history: those that
	// succeeded or conflicted, and the ambiguous ones that applied.
	Writes int
	// Reads are the reads checked (failed ones left out).
	Reads int
	// Stale are the reads that returned a version older than that of a
	// write of the key that had returned before the read was called.
	Stale int
	// Ambiguous writes, and how many of them Resolve found applied.
	Ambiguous, AmbiguousApplied int
	// Failed are the calls left out because they failed with an error
	// that says nothing was applied (every error but cas.ErrAmbiguous).
	Failed int
}

// CheckHistory checks recorded operations (History, or Apply with
// porcupine.Operations of your own) against Model with porcupine, and
// fails t with what it finds wrong. A failed read, and a write that
// failed with an error other than cas.ErrAmbiguous, applied nothing and
// is left out (that is what those errors promise: a store that applied
// such a write leaves states no recorded write explains). An ambiguous
// write is passed to opts.Resolve: applied, it is kept as a success that
// may have taken effect at any time after its call (its return is moved
// past every other return); not applied, it is left out. With
// opts.StaleReads, reads are checked apart from the writes (see
// CheckOptions). On a failure, porcupine's visualization of the history
// is written to a temporary file, whose name is logged.
func CheckHistory(t testing.TB, ops []porcupine.Operation, opts CheckOptions) HistoryReport {
	t.Helper()
	var rep HistoryReport
	if opts.Timeout <= 0 {
		opts.Timeout = 60 * time.Second
	}
	var end int64
	for _, op := range ops {
		end = max(end, op.Return)
	}
	var lin, reads []porcupine.Operation
	for _, op := range ops {
		in, out := op.Input.(Input), op.Output.(Output)
		switch {
		case in.Kind == OpGet && out.Err != nil:
			rep.Failed++
			continue
		case in.Kind == OpGet:
			rep.Reads++
			if opts.StaleReads {
				reads = append(reads, op)
				continue
			}
		case out.Err != nil && errors.Is(out.Err, cas.ErrAmbiguous):
			rep.Ambiguous++
			if opts.Resolve == nil {
				t.Errorf("%s: ambiguous, and the check has no way to resolve it: %v", in, out.Err)
				continue
			}
			v, applied, known := opts.Resolve(in, out.Err)
			switch {
			case !known:
				t.Errorf("%s: ambiguous, and unresolved: %v", in, out.Err)
				continue
			case !applied:
				continue
			case in.Kind == OpSwap && v == 0:
				t.Errorf("%s: resolved as applied at version 0", in)
				continue
			}
			rep.AmbiguousApplied++
			op.Output = Output{Version: v, Value: in.Value}
			if in.Kind != OpSwap {
				op.Output = Output{}
			}
			op.Return = end + 1 // it may have taken effect after the call gave up
		case out.Err != nil:
			rep.Failed++
			continue
		}
		if in.Kind != OpGet {
			rep.Writes++
		}
		lin = append(lin, op)
	}
	if opts.StaleReads {
		rep.Stale = checkStaleReads(t, lin, reads)
	}
	lanes(lin)
	res, info := porcupine.CheckOperationsVerbose(Model, lin, opts.Timeout)
	switch res {
	case porcupine.Ok:
	case porcupine.Illegal:
		what := "history"
		if opts.StaleReads {
			what = "history of the writes"
		}
		t.Errorf("%s (%d operations) is not linearizable", what, len(lin))
		if f, err := writeVisualization(info); err == nil {
			t.Logf("visualization: %s", f)
		}
	default:
		t.Errorf("linearizability check of %d operations timed out", len(lin))
	}
	return rep
}

// checkStaleReads checks each read against the writes that succeeded
// (writes): it returned absent, or the value a write stored with the
// version it got, and that write was called before the read returned.
// It returns how many reads returned a version older than that of a
// write of the key that had returned before the read was called.
func checkStaleReads(t testing.TB, writes, reads []porcupine.Operation) int {
	t.Helper()
	type keyVersion struct {
		key string
		v   cas.Version
	}
	made := map[keyVersion]porcupine.Operation{}
	byKey := map[string][]porcupine.Operation{}
	for _, op := range writes {
		in, out := op.Input.(Input), op.Output.(Output)
		if in.Kind == OpSwap && !out.Conflict {
			made[keyVersion{in.Key, out.Version}] = op
			byKey[in.Key] = append(byKey[in.Key], op)
		}
	}
	stale, bad := 0, 0
	for _, r := range reads {
		in, out := r.Input.(Input), r.Output.(Output)
		if out.Version != 0 {
			w, ok := made[keyVersion{in.Key, out.Version}]
			var problem string
			switch {
			case !ok:
				problem = "no write made that version"
			case w.Input.(Input).Value != out.Value:
				problem = fmt.Sprintf("the write that made that version stored %q", w.Input.(Input).Value)
			case w.Call > r.Return:
				problem = "the write that made it was called after the read returned"
			}
			if problem != "" {
				if bad++; bad <= 5 {
					t.Errorf("%s returned v%d %q: %s", in, out.Version, out.Value, problem)
				}
				continue
			}
		}
		for _, w := range byKey[in.Key] {
			if w.Return < r.Call && w.Output.(Output).Version > out.Version {
				stale++
				break
			}
		}
	}
	if bad > 5 {
		t.Errorf("... and %d more reads of states no write made", bad-5)
	}
	return stale
}

// lanes numbers the clients of ops so that no two operations of one
// client overlap in time, for porcupine's visualization: the recording
// stores are shared by goroutines, whose calls overlap.
func lanes(ops []porcupine.Operation) {
	order := make([]int, len(ops))
	for i := range order {
		order[i] = i
	}
	sort.Slice(order, func(a, b int) bool { return ops[order[a]].Call < ops[order[b]].Call })
	var free []int64 // the last return of each lane
	for _, i := range order {
		lane := -1
		for l, ret := range free {
			if ret < ops[i].Call {
				lane = l
				break
			}
		}
		if lane < 0 {
			lane = len(free)
			free = append(free, 0)
		}
		free[lane] = ops[i].Return
		ops[i].ClientId = lane
	}
}
