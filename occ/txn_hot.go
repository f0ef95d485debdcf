package occ

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/occkit/occkit/cas"
)

// txnExclusive is the attempt of a transaction that keeps losing: the
// store holds keys (the last attempt's) from the read to the commit, so
// that no writer elsewhere can make it lose again. fn reads the held
// keys from what the store read under its hold (other keys as usual) and
// its writes become the commit's ops.
//
// With whole (keys are a guess: those a hot read met, see
// txn_hotcommit.go), an attempt whose fn touched a key it does not hold
// writes nothing and fails with errUnheld, so that the next holds them
// all; otherwise fn's other keys are read and checked without a hold.
//
// It returns the keys the attempt's fn touched (nil when fn did not run).
func txnExclusive(ctx context.Context, ec cas.ExclusiveCommitter, s cas.Store, cache *Cache, keys []string, fn func(tx *Tx) error, turns *txTurns, whole bool) ([]string, error) {
	var tx *Tx
	var ops []cas.Op
	vs, err := ec.CommitExclusive(ctx, keys, func(cur []cas.Item) ([]cas.Op, error) {
		hints := make(map[string]cas.Item, len(cur))
		for _, it := range cur {
			hints[it.Key] = it
		}
		tx = &Tx{ctx: ctx, store: s, reads: map[string]cas.Item{}, writes: map[string]txWrite{}, hints: hints}
		if err := fn(tx); err != nil {
			return nil, err
		}
		if whole {
			for _, k := range tx.keys() {
				if !slices.Contains(keys, k) {
					// Committing now would lock k after the held
					// keys, out of key order: two holders could
					// deadlock. Hold it too, next time.
					return nil, &cas.ConflictError{Key: k, Err: errUnheld}
				}
			}
		}
		var err error
		ops, err = tx.ops()
		return ops, err
	})
	var touched []string
	if tx != nil {
		touched = tx.keys()
	}
	if err != nil {
		var ce *cas.ConflictError
		if errors.As(err, &ce) && cache != nil {
			cache.forget(ce.Key)
		}
		return touched, err
	}
	tx.noteWritten(ops, vs, cache)
	turns.attempted(lineMinUnit, tx.written)
	return touched, nil
}

// errUnheld is the conflict of an exclusive attempt on a guessed set of
// keys whose function touched a key it does not hold: nothing was
// written, and the next attempt holds every key this one touched.
var errUnheld = errors.New("occ: the transaction touched a key its exclusive attempt does not hold")

// keys returns the keys the attempt read or wrote, sorted.
func (tx *Tx) keys() []string {
	keys := make([]string, 0, len(tx.reads)+len(tx.writes))
	for k := range tx.reads {
		keys = append(keys, k)
	}
	for k := range tx.writes {
		if _, read := tx.reads[k]; !read {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	return keys
}

// txTurns are the turns a transaction holds: the lines (see turn.go) of
// its keys, taken in key order, so that two transactions waiting for each
// other's keys cannot deadlock (a single-key Update holds one line and
// never waits for another). While a transaction holds them, this
// process's other calls on those keys queue behind it; each turn is
// handed on, with what the transaction wrote to its key, when the call
// ends.
type txTurns struct {
	store cas.Store
	held  []*config // one per key whose turn is held, in key order
}

// anyLine reports whether one of keys has a line in this process.
func (t *txTurns) anyLine(keys []string) bool {
	for _, k := range keys {
		if lineFor(t.store, k) != nil {
			return true
		}
	}
	return false
}

// join takes the turns of keys (sorted, distinct), in order; with open,
// it opens the lines that do not exist. A key whose line it cannot get
// (another key's slot, a stuck line) is left out. It returns the states
// the previous holders handed over with the turns (a nil map when no
// turn was taken) and whether it waited; the error is ctx's.
func (t *txTurns) join(ctx context.Context, keys []string, open bool) (handed map[string]cas.Item, queued bool, err error) {
	for _, k := range keys {
		sub := &config{store: t.store, key: k}
		q, err := sub.joinLine(ctx, open)
		queued = queued || q
		if err != nil {
			return handed, queued, err
		}
		if sub.line == nil {
			continue
		}
		t.held = append(t.held, sub)
		if handed == nil {
			handed = map[string]cas.Item{}
		}
		if sub.handed != nil && sub.handed.known {
			handed[k] = sub.handed.state
		}
		sub.handed = nil
	}
	return handed, queued, nil
}

// attempted notes an attempt of the holder: how long it took (a line
// whose attempts are faster than lineMinUnit takes no one) and, when it
// committed, what it wrote, to hand over with each turn.
func (t *txTurns) attempted(d time.Duration, written map[string]cas.Item) {
	for _, sub := range t.held {
		sub.line.fast.Store(d < lineMinUnit)
		sub.line.wrote, sub.line.wroteOK = cas.Item{}, false
		if it, ok := written[sub.key]; ok {
			sub.line.wrote, sub.line.wroteOK = it, true
		}
	}
}

// leave ends every turn held, in reverse key order.
func (t *txTurns) leave() {
	for i := len(t.held) - 1; i >= 0; i-- {
		t.held[i].leaveLine()
	}
	t.held = nil
}
