package castest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/occ"
)

var concurrencyTests = []test{
	{"UpdateCountsEveryIncrement", testIncrements},
	{"TxnConservesTotal", testTransfers},
	{"Linearizable", testLinearizable},
	{"CombinedIncrements", testCombinedIncrements},
}

// testIncrements runs workers doing occ.Update increments on a few keys and
// checks that the counters sum to the number of increments that reported
// success: no update was lost and none applied twice.
func testIncrements(t *testing.T, h *Harness, s cas.Store) {
	ctx := context.Background()
	counters := cas.NewTyped(s, cas.JSON[int]())
	keys := []string{"c0", "c1", "c2"}
	var ok, gaveUp atomic.Int64
	var wg sync.WaitGroup
	for w := range h.workers() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range h.opsPerWorker() {
				k := keys[(w+i)%len(keys)]
				_, _, err := occ.Update(ctx, counters, k, func(n int, _ bool) (int, error) { return n + 1, nil },
					occ.WithMaxAttempts(50))
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
		}()
	}
	wg.Wait()
	total := 0
	for _, k := range keys {
		n, _, err := counters.Get(ctx, k)
		if err != nil && !errors.Is(err, cas.ErrNotFound) {
			t.Fatalf("get %s: %v", k, err)
		}
		total += n
	}
	if int64(total) != ok.Load() {
		t.Fatalf("counters sum to %d, but %d increments succeeded (%d gave up): updates lost or doubled", total, ok.Load(), gaveUp.Load())
	}
	if ok.Load() == 0 {
		t.Fatalf("no increment succeeded")
	}
}

// testTransfers moves money between accounts with occ.Txn from many
// goroutines and checks that the total is conserved and no account went
// negative.
func testTransfers(t *testing.T, h *Harness, s cas.Store) {
	committer(t, s)
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
	var wg sync.WaitGroup
	for w := range h.workers() {
		wg.Add(1)
		go func() {
			defer wg.Done()
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
						if err != nil {
							return err
						}
						if !ok {
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
		}()
	}
	wg.Wait()
	total := 0
	for i := range accounts {
		it, err := s.Get(ctx, fmt.Sprintf("acct%d", i))
		if err != nil {
			t.Fatal(err)
		}
		var n int
		if err := codec.Unmarshal(it.Value, &n); err != nil {
			t.Fatal(err)
		}
		if n < 0 {
			t.Fatalf("account %d went negative: %d", i, n)
		}
		total += n
	}
	if total != accounts*initial {
		t.Fatalf("total balance %d, want %d: a transfer was torn", total, accounts*initial)
	}
}

// testLinearizable records a concurrent history of Get, CompareAndSwap and
// CompareAndDelete on a few keys and checks it with porcupine against the
// sequential specification in Model.
func testLinearizable(t *testing.T, h *Harness, s cas.Store) {
	ctx := context.Background()
	keys := []string{"lin0", "lin1", "lin2"}
	start := time.Now()
	now := func() int64 { return time.Since(start).Nanoseconds() }
	var (
		mu  sync.Mutex
		ops []porcupine.Operation
	)
	var wg sync.WaitGroup
	for w := range h.workers() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 2))
			seen := map[string]cas.Version{}
			var mine []porcupine.Operation
			defer func() {
				mu.Lock()
				ops = append(ops, mine...)
				mu.Unlock()
			}()
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
				call := now()
				out := Apply(ctx, s, in)
				ret := now()
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
				mine = append(mine, porcupine.Operation{ClientId: w, Input: in, Call: call, Output: out, Return: ret})
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	res, info := porcupine.CheckOperationsVerbose(Model, ops, 60*time.Second)
	switch res {
	case porcupine.Ok:
	case porcupine.Illegal:
		t.Errorf("history of %d operations is not linearizable", len(ops))
		if f, err := writeVisualization(t, info); err == nil {
			t.Logf("visualization: %s", f)
		}
	default:
		t.Errorf("linearizability check of %d operations timed out", len(ops))
	}
}

// writeVisualization saves porcupine's view of a failed check where it
// outlives the test.
func writeVisualization(t *testing.T, info porcupine.LinearizationInfo) (string, error) {
	f, err := os.CreateTemp("", "castest-linearizability-*.html")
	if err != nil {
		return "", err
	}
	defer f.Close()
	return f.Name(), porcupine.Visualize(Model, info, f)
}
