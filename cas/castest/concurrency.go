package castest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"sync/atomic"
	"testing"

	"github.com/anishathalye/porcupine"
	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/occ"
)

var concurrencyTests = []test{
	{"UpdateCountsEveryIncrement", testIncrements},
	{"TxnConservesTotal", testTransfers},
	{"Linearizable", testLinearizable},
	{"CombinedIncrements", testCombinedIncrements},
	{"StaleReadsAreSafe", testStaleReadsAreSafe},
}

// testIncrements runs workers doing occ.Update increments on a few keys and
// checks that the counters sum to the number of increments that reported
// success: no update was lost and none applied twice.
func testIncrements(t *testing.T, h *Harness, s cas.Store) {
	ctx := context.Background()
	counters := cas.NewTyped(s, cas.JSON[int]())
	keys := []string{"c0", "c1", "c2"}
	var ok, gaveUp atomic.Int64
	h.runWorkers(func(w int) {
		increments(t, ctx, counters, keys, w, h.opsPerWorker(), 50, &ok, &gaveUp)
	})
	wantSum(t, h, counters, keys, ok.Load(), gaveUp.Load())
}

// wantSum checks that the counters keys sum to the number of increments
// that succeeded (ok; gaveUp gave up). A stale read shows less than the
// sum, never more.
func wantSum(t *testing.T, h *Harness, counters *cas.Typed[int], keys []string, ok, gaveUp int64) {
	t.Helper()
	h.settle(t, func() error {
		total := 0
		for _, k := range keys {
			n, _, err := counters.Get(context.Background(), k)
			if err != nil && !errors.Is(err, cas.ErrNotFound) {
				return wrong("get %s: %w", k, err)
			}
			total += n
		}
		switch {
		case int64(total) > ok:
			return wrong("counters sum to %d, but %d increments succeeded (%d gave up): updates doubled", total, ok, gaveUp)
		case int64(total) < ok:
			return fmt.Errorf("counters sum to %d, but %d increments succeeded (%d gave up): updates lost", total, ok, gaveUp)
		}
		return nil
	})
	if ok == 0 {
		t.Fatalf("no increment succeeded")
	}
}

// testTransfers moves money between accounts with occ.Txn from many
// goroutines and checks that the total is conserved and no account went
// negative.
func testTransfers(t *testing.T, h *Harness, s cas.Store) {
	capability[cas.Committer](t, s)
	ctx := context.Background()
	const accounts, initial = 4, 100
	codec := cas.JSON[int]()
	for i := range accounts {
		b, _ := codec.Marshal(initial)
		if _, err := s.CompareAndSwap(ctx, fmt.Sprintf("acct%d", i), 0, b); err != nil {
			t.Fatal(err)
		}
	}
	errOverdraft := errors.New("overdraft")
	h.runWorkers(func(w int) {
		rng := rand.New(rand.NewPCG(uint64(w), 1))
		for range h.opsPerWorker() {
			from, to := rng.IntN(accounts), rng.IntN(accounts-1)
			if to >= from {
				to++
			}
			amount := 1 + rng.IntN(30)
			err := occ.Txn(ctx, s, func(tx *occ.Tx) error {
				var a, b int
				for _, p := range []struct {
					k string
					v *int
				}{{fmt.Sprintf("acct%d", from), &a}, {fmt.Sprintf("acct%d", to), &b}} {
					raw, ok, err := tx.Get(p.k)
					switch {
					case err != nil:
						return err
					case !ok && h.StaleReads:
						// A read from before the account was made: it
						// counts as 0, and the commit, which checks
						// the version read, conflicts.
						continue
					case !ok:
						return fmt.Errorf("account %s vanished", p.k)
					}
					if err := codec.Unmarshal(raw, p.v); err != nil {
						return err
					}
				}
				if a < amount {
					return errOverdraft
				}
				ra, _ := codec.Marshal(a - amount)
				rb, _ := codec.Marshal(b + amount)
				tx.Put(fmt.Sprintf("acct%d", from), ra)
				tx.Put(fmt.Sprintf("acct%d", to), rb)
				return nil
			}, occ.WithMaxAttempts(50))
			if err != nil && !errors.Is(err, errOverdraft) && !errors.Is(err, occ.ErrAttemptsExhausted) {
				t.Errorf("transfer: %v", err)
				return
			}
		}
	})
	h.settle(t, func() error {
		total := 0
		for i := range accounts {
			it, err := s.Get(ctx, fmt.Sprintf("acct%d", i))
			switch {
			case errors.Is(err, cas.ErrNotFound):
				// A replica that has not replayed the account's creation.
				return fmt.Errorf("get acct%d: %w", i, err)
			case err != nil:
				return wrong("get acct%d: %w", i, err)
			}
			var n int
			if err := codec.Unmarshal(it.Value, &n); err != nil {
				return wrong("acct%d: %w", i, err)
			}
			if n < 0 {
				return wrong("account %d went negative: %d", i, n)
			}
			total += n
		}
		if total != accounts*initial {
			// Stale reads of two accounts may come from different moments.
			return fmt.Errorf("total balance %d, want %d: a transfer was torn", total, accounts*initial)
		}
		return nil
	})
}

// testLinearizable records a concurrent history of Get, CompareAndSwap and
// CompareAndDelete on a few keys and checks it with porcupine against the
// sequential specification in Model. With StaleReads the reads are
// checked apart: each returned a state its key had.
func testLinearizable(t *testing.T, h *Harness, s cas.Store) {
	ctx := context.Background()
	keys := []string{"lin0", "lin1", "lin2"}
	hist := NewHistory()
	h.runWorkers(func(w int) {
		rng := rand.New(rand.NewPCG(uint64(w), 2))
		seen := map[string]cas.Version{}
		for i := range h.opsPerWorker() {
			k := keys[rng.IntN(len(keys))]
			in := Input{Key: k, Expected: seen[k]}
			switch r := rng.IntN(10); {
			case r < 4:
				in.Kind = OpGet
			case r < 9 || in.Expected == 0:
				in.Kind = OpSwap
				in.Value = fmt.Sprintf("w%d-%d", w, i)
			default:
				in.Kind = OpDelete
			}
			out := hist.Apply(ctx, s, w, in)
			if out.Err != nil {
				t.Errorf("%s: unexpected error: %v", in, out.Err)
				return
			}
			switch {
			case out.Conflict && out.HasCurrent:
				seen[k] = out.Current
			case in.Kind == OpGet:
				seen[k] = out.Version
			case in.Kind == OpSwap && !out.Conflict:
				seen[k] = out.Version
			case in.Kind == OpDelete && !out.Conflict:
				seen[k] = 0
			}
		}
	})
	if t.Failed() {
		return
	}
	CheckHistory(t, hist.Operations(), CheckOptions{StaleReads: h.StaleReads})
}

// testStaleReadsAreSafe runs occ.Update increments of two keys from the
// harness's workers through the store and, with Reopen, three more stores
// of the same keys (other processes, reading from other replicas), every
// call recorded. The counters must end at the number of increments that
// succeeded (a stale read costs a conflict, never an update), every read
// must have returned a state its key had, from a write called before the
// read returned, and the writes, with the current states their conflicts
// carried, must be linearizable.
func testStaleReadsAreSafe(t *testing.T, h *Harness, s cas.Store) {
	if !h.StaleReads {
		t.Skip("skipped: Harness.StaleReads is false (Linearizable checks reads that are current)")
	}
	ctx := context.Background()
	hist := NewHistory()
	stores := []cas.Store{hist.Store(s)}
	if h.Reopen != nil {
		for range 3 {
			stores = append(stores, hist.Store(h.Reopen(t, s)))
		}
	}
	keys := []string{"s0", "s1"}
	var ok, gaveUp atomic.Int64
	h.runWorkers(func(w int) {
		counters := cas.NewTyped(stores[w%len(stores)], cas.JSON[int]())
		increments(t, ctx, counters, keys, w, h.opsPerWorker(), 100, &ok, &gaveUp)
	})
	if t.Failed() {
		return
	}
	rep := CheckHistory(t, hist.Operations(), CheckOptions{StaleReads: true})
	if t.Failed() {
		return
	}
	wantSum(t, h, cas.NewTyped(s, cas.JSON[int]()), keys, ok.Load(), gaveUp.Load())
	t.Logf("%d increments through %d stores (%d gave up): %d writes, %d reads, %d of them seen stale", ok.Load(), len(stores), gaveUp.Load(), rep.Writes, rep.Reads, rep.Stale)
}

// writeVisualization saves porcupine's view of a failed check where it
// outlives the test.
func writeVisualization(info porcupine.LinearizationInfo) (string, error) {
	f, err := os.CreateTemp("", "castest-linearizability-*.html")
	if err != nil {
		return "", err
	}
	defer f.Close()
	return f.Name(), porcupine.Visualize(Model, info, f)
}

// increments is one worker of the increment tests: n occ.Update
// increments of keys, worker w starting at its own key, each with at most
// attempts attempts, counted in ok or (given up) gaveUp; any other error
// fails t and ends the worker.
func increments(t *testing.T, ctx context.Context, counters *cas.Typed[int], keys []string, w, n, attempts int, ok, gaveUp *atomic.Int64) {
	for i := range n {
		k := keys[(w+i)%len(keys)]
		_, _, err := occ.Update(ctx, counters, k, func(n int, _ bool) (int, error) { return n + 1, nil },
			occ.WithMaxAttempts(attempts))
		switch {
		case err == nil:
			ok.Add(1)
		case errors.Is(err, occ.ErrAttemptsExhausted):
			gaveUp.Add(1)
		default:
			t.Errorf("update %s: %v", k, err)
			return
		}
	}
}
