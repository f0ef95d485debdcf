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
