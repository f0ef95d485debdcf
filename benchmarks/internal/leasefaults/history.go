package leasefaults

import (
	"context"
	"errors"
	"time"

	"github.com/occkit/occkit/benchmarks/internal/linearcheck"
	"github.com/occkit/occkit/cas"
)

// The history of a run: every call that reaches the store through the
// run's watchStore, recorded as a linearcheck.Op on its key, timed from
// the run's start in nanoseconds. A key's state is its value as stored
// (the counter in JSON, never empty), "" when it does not exist.
//
//   - Get: a read of the value it returned ("" for cas.ErrNotFound); a
//     Get that failed otherwise is not recorded.
//   - CompareAndSwapFenced (hybrid.Update's write, a rogue's stale or
//     late write), CompareAndSwap (the mutant's unfenced write) and
//     CompareAndDelete: a compare-and-set write, from the state of the
//     version it expected (known from the call that returned that
//     version: every write of a run follows a Get of its key) to the
//     value it sent ("" for a delete), fenced with its token or not,
//     begun just before the call was sent and returned when the store
//     answered. It succeeded (no error), is ambiguous (cas.ErrAmbiguous:
//     it returns at the end of time), was refused by the fence
//     (cas.ErrFenced, a fenced write: its token must have been smaller
//     than one that had written the key), or failed otherwise and is left
//     out (a conflict: it applied nothing).
//
// The final reads of the counters (through Target.Direct) join the
// history as reads.

// clientKey is the context key of the worker that makes a store call.
type clientKey struct{}

func withClient(ctx context.Context, id int) context.Context {
	return context.WithValue(ctx, clientKey{}, id)
}

// clientOf returns the worker of ctx, -1 for none.
func clientOf(ctx context.Context) int {
	if id, ok := ctx.Value(clientKey{}).(int); ok {
		return id
	}
	return -1
}

// now is the time since the run's start, in the history's unit.
func (w *watchStore) now() int64 { return int64(time.Since(w.t0)) }

// Get records a read.
func (w *watchStore) Get(ctx context.Context, key string) (cas.Item, error) {
	call := w.now()
	it, err := w.FencedStore.Get(ctx, key)
	ret := w.now()
	switch {
	case err == nil:
		w.addRead(clientOf(ctx), key, call, ret, it.Version, string(it.Value))
	case errors.Is(err, cas.ErrNotFound):
		w.addRead(clientOf(ctx), key, call, ret, 0, "")
	}
	return it, err
}

// CompareAndSwap is a plain write (no fence), recorded.
func (w *watchStore) CompareAndSwap(ctx context.Context, key string, expected cas.Version, value []byte) (cas.Version, error) {
	call := w.now()
	v, err := w.FencedStore.CompareAndSwap(ctx, key, expected, value)
	w.addWrite(ctx, key, expected, string(value), false, 0, call, v, err)
	return v, err
}

// CompareAndDelete is a plain write of "absent", recorded.
func (w *watchStore) CompareAndDelete(ctx context.Context, key string, expected cas.Version) error {
	call := w.now()
	err := w.FencedStore.CompareAndDelete(ctx, key, expected)
	w.addWrite(ctx, key, expected, "", false, 0, call, 0, err)
	return err
}

// addRead records a read of key that returned state at version v.
func (w *watchStore) addRead(client int, key string, call, ret int64, v cas.Version, state string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.setState(key, v, state)
	w.ops = append(w.ops, linearcheck.Op{Client: client, Key: key, Kind: linearcheck.Read, Call: call, Return: ret, Read: state})
}

// addWrite records a write of key that expected version expected and
// wrote state wrote, begun at call, that returned version v and err now.
func (w *watchStore) addWrite(ctx context.Context, key string, expected cas.Version, wrote string, fenced bool, token uint64, call int64, v cas.Version, err error) {
	op := linearcheck.Op{Client: clientOf(ctx), Key: key, Kind: linearcheck.Write, Call: call, Return: w.now(), Wrote: wrote, Fenced: fenced, Token: token}
	switch {
	case err == nil:
		op.Outcome = linearcheck.Succeeded
	case errors.Is(err, cas.ErrAmbiguous):
		op.Outcome, op.Return = linearcheck.Ambiguous, linearcheck.EndOfTime
	case fenced && isFenced(err):
		op.Outcome = linearcheck.Fenced
	default:
		return // applied nothing: left out
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if err == nil && v != 0 {
		w.setState(key, v, wrote)
	}
	read, known := w.states[key][expected]
	switch {
	case expected == 0:
		read = ""
	case !known && op.Outcome != linearcheck.Fenced: // a refusal's read does not matter
		w.unknown++
		return
	}
	op.Read = read
	w.ops = append(w.ops, op)
}

// setState remembers that version v of key is state (a version identifies
// one state for good: cas.Version).
func (w *watchStore) setState(key string, v cas.Version, state string) {
	if v == 0 {
		return
	}
	m := w.states[key]
	if m == nil {
		m = map[cas.Version]string{}
		w.states[key] = m
	}
	m[v] = state
}

// history returns the recorded calls, and the number of writes left out
// because no recorded call had returned the version they expected (which
// leaves the history incomplete).
func (w *watchStore) history() (ops []linearcheck.Op, unknown int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.ops, w.unknown
}
