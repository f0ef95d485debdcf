package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/occkit/occkit/benchmarks/internal/linearcheck"
	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/internal/ctxwait"
)

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
		if ctxwait.Sleep(ctx, 100*time.Millisecond) != nil {
			return nil, fmt.Errorf("reading %s directly: %w", key, err)
		}
	}
}

// readFinals reads back keys of every generation the workload used, n
// per generation (keyOf names them), adds each one's value to r.Final and
// records the reads of the window's generations in the history. decode
// makes a key's state and value of what was read (nil: the key does not
// exist). It returns the recorded states by key.
func readFinals(ctx context.Context, tg *target, wl *workload, client, n int, keyOf func(int, int64) string, decode func(key string, b []byte) (string, int64, error), r *Run) (map[string]string, error) {
	final := map[string]string{}
	for g := range wl.generations() {
		for i := range n {
			key := keyOf(i, g)
			call := wl.now()
			b, err := readFinal(ctx, tg.direct, key)
			if err != nil {
				return nil, err
			}
			state, v, err := decode(key, b)
			if err != nil {
				return nil, err
			}
			r.Final += v
			if g < wl.windowGens {
				final[key] = state
				wl.events = append(wl.events, linearcheck.Op{Client: client, Key: key, Kind: linearcheck.Read, Call: call, Return: wl.now(), Read: state})
			}
		}
	}
	return final, nil
}

// finishCounter reads the counters back and counts what was lost or
// doubled; the final reads join the histories.
func finishCounter(ctx context.Context, tg *target, wl *workload, keyOf func(int, int64) string, client int, r *Run) error {
	_, err := readFinals(ctx, tg, wl, client, numCounters, keyOf, func(key string, b []byte) (string, int64, error) {
		if b == nil {
			return "", 0, nil
		}
		var n int64
		if err := json.Unmarshal(b, &n); err != nil {
			return "", 0, fmt.Errorf("%s: %q: %w", key, b, err)
		}
		return counterState(n, true), n, nil
	}, r)
	if err != nil {
		return err
	}
	r.Lost = max(0, r.Succeeded-r.Final)
	r.Duplicated = max(0, r.Final-r.Succeeded-r.Ambiguous)
	r.AmbiguousApplied = min(max(0, r.Final-r.Succeeded), r.Ambiguous)
	return nil
}

// finishTransfer reads the accounts back and checks them against the
// transfers that applied; the final reads join the histories.
func finishTransfer(ctx context.Context, tg *target, wl *workload, client int, r *Run) error {
	final, err := readFinals(ctx, tg, wl, client, numAccounts, accountKey, func(_ string, b []byte) (string, int64, error) {
		if b == nil {
			return "", initialBalance, nil
		}
		a, err := decodeAccount(b)
		if err != nil {
			return "", 0, err
		}
		return accountState(a), a.Balance, nil
	}, r)
	if err != nil {
		return err
	}
	gens := wl.generations()
	seen := make([]keyState, 0, len(wl.events))
	for _, e := range wl.events {
		// A write acknowledged on a replica read a state the failover
		// cannot undo, unless the row's failover loses acknowledged
		// writes too.
		durable := e.Kind == linearcheck.Write && e.Outcome == linearcheck.Succeeded && !tg.allowsLost
		seen = append(seen, keyState{e.Key, e.Read, durable})
	}
	v := checkTransfers(wl.transfers, seen, final, tg.allowed != "")
	conserved := r.Final == gens*numAccounts*initialBalance
	r.Lost, r.Duplicated, r.AmbiguousApplied, r.Undone = v.lost, v.duplicated, v.ambiguousApplied, v.undone
	r.Conserved, r.Explained = &conserved, &v.explained
	r.Problems = append(r.Problems, v.problems...)
	if !conserved {
		r.Problems = append(r.Problems, fmt.Sprintf("total balance %d, want %d", r.Final, gens*numAccounts*initialBalance))
	}
	return nil
}
