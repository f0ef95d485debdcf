package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/occkit/occkit/benchmarks/internal/linearcheck"
	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/occ"
)

const (
	// numCounters is the number of counters the counter workload
	// increments; numAccounts the number of accounts transfers move
	// amounts between.
	numCounters = 4
	numAccounts = 5
	// readEvery: one call in readEvery is a plain Get of a key.
	readEvery = 4
	// perKeyGeneration is about how many calls each key gets before the
	// workload moves on to fresh keys (a new generation), by default: it
	// bounds the history porcupine checks at once (its memory grows with
	// the square of a key's history, its time faster still with the
	// ambiguous calls in it).
	perKeyGeneration = 5000
	maxTransfer      = 10
)

// workload is one workload's state during a run: the calls it made, their
// outcomes, and the histories of the calls inside the history window.
type workload struct {
	name        string
	t0          time.Time
	callsPerGen int64
	windowGens  int64 // generations below this are recorded
	// staleReads: the plain reads come from a follower or a replica and
	// may be stale by design; they are counted, not recorded (the writes,
	// whose versions the leader or primary checks, and the final reads
	// are).
	staleReads bool
	invoked    atomic.Int64

	mu sync.Mutex
	tally
}

// tally is what calls left: the recorded calls and the counts.
type tally struct {
	events                           []linearcheck.Op
	transfers                        []transferCall
	succeeded, ambiguous, failed     int64
	reads, readsFailed, unrecordable int64
	unknown                          int64 // recorded calls whose effect is unknown (ambiguous deltas)
	errs                             map[string]int
}

// worker is one goroutine's share, merged into the workload at its end.
type worker struct {
	id  int
	rng *rand.Rand
	tally
}

func newWorkload(name string, t0 time.Time, keys int, window, perKey int64) *workload {
	perGen := perKey * int64(keys)
	if name == "transfer" {
		perGen /= 2 // a transfer touches two accounts
	}
	return &workload{name: name, t0: t0, callsPerGen: perGen, windowGens: max(1, window/perGen), tally: tally{errs: map[string]int{}}}
}

func (wl *workload) now() int64 { return int64(time.Since(wl.t0)) }

// next numbers a call: its generation, and whether it is recorded.
func (wl *workload) next() (gen int64, recorded bool) {
	n := wl.invoked.Add(1) - 1
	gen = n / wl.callsPerGen
	return gen, gen < wl.windowGens
}

// generations returns how many generations the calls used.
func (wl *workload) generations() int64 {
	n := wl.invoked.Load()
	if n == 0 {
		return 0
	}
	return (n-1)/wl.callsPerGen + 1
}

func (wl *workload) merge(wk *worker) {
	wl.mu.Lock()
	defer wl.mu.Unlock()
	wl.events = append(wl.events, wk.events...)
	wl.transfers = append(wl.transfers, wk.transfers...)
	wl.succeeded += wk.succeeded
	wl.ambiguous += wk.ambiguous
	wl.failed += wk.failed
	wl.reads += wk.reads
	wl.readsFailed += wk.readsFailed
	wl.unrecordable += wk.unrecordable
	wl.unknown += wk.unknown
	for k, n := range wk.errs {
		wl.errs[k] += n
	}
}

func (wk *worker) count(o linearcheck.Outcome, err error) {
	switch o {
	case linearcheck.Succeeded:
		wk.succeeded++
	case linearcheck.Ambiguous:
		wk.ambiguous++
	default:
		wk.failed++
		wk.errs[shorten(err.Error())]++
	}
}

func classify(err error) linearcheck.Outcome {
	switch {
	case err == nil:
		return linearcheck.Succeeded
	case errors.Is(err, cas.ErrAmbiguous):
		return linearcheck.Ambiguous
	}
	return linearcheck.Failed
}

// start runs workers goroutines calling call, each call under its own
// callTimeout, until stop is closed; the returned function waits for them
// and merges what they recorded.
func (wl *workload) start(ctx context.Context, stop <-chan struct{}, workers, firstID int, call func(ctx context.Context, wk *worker)) func() {
	var wg sync.WaitGroup
	for i := range workers {
		wk := &worker{id: firstID + i, rng: rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), uint64(firstID+i))), tally: tally{errs: map[string]int{}}}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer wl.merge(wk)
			for {
				select {
				case <-stop:
					return
				default:
				}
				// The end of the run stops new calls, not calls in flight:
				// each has its own timeout.
				callWithTimeout(ctx, wk, call)
			}
		}()
	}
	return wg.Wait
}

// callWithTimeout makes one call of wk's under callTimeout.
func callWithTimeout(ctx context.Context, wk *worker, call func(ctx context.Context, wk *worker)) {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	call(ctx, wk)
}

// genKey is key i of a generation: kind-i.gGEN.
func genKey(kind string, i int, gen int64) string {
	return kind + "-" + strconv.Itoa(i) + ".g" + strconv.FormatInt(gen, 10)
}

func counterKey(i int, gen int64) string { return genKey("counter", i, gen) }
func accountKey(i int, gen int64) string { return genKey("account", i, gen) }

// read is a worker's read of key: counted, and recorded (when rec, and
// reads are not stale) with the state decode makes of the item ("" when
// the key is absent). A value that cannot be decoded is a failed read,
// its error sampled.
func (wk *worker) read(ctx context.Context, wl *workload, rec bool, s cas.Store, key string, decode func(cas.Item) (string, error)) {
	call := wl.now()
	it, err := s.Get(ctx, key)
	ret := wl.now()
	state := ""
	if err == nil {
		if state, err = decode(it); err != nil {
			wk.errs[shorten(err.Error())]++
		}
	}
	if err != nil && !errors.Is(err, cas.ErrNotFound) {
		wk.readsFailed++
		return
	}
	wk.reads++
	if rec && !wl.staleReads {
		wk.events = append(wk.events, linearcheck.Op{Client: wk.id, Key: key, Kind: linearcheck.Read, Call: call, Return: ret, Read: state})
	}
}

// counterCall returns the function a worker of the counter workload calls
// in a loop: one call, a Get of a counter or an occ.Update that increments
// it, counted and (inside the window) recorded.
func counterCall(wl *workload, counters *cas.Typed[int64], opts []occ.Option) func(ctx context.Context, wk *worker) {
	return func(ctx context.Context, wk *worker) {
		gen, rec := wl.next()
		key := counterKey(wk.rng.IntN(numCounters), gen)
		if wk.rng.IntN(readEvery) == 0 {
			wk.read(ctx, wl, rec, counters.Store(), key, func(it cas.Item) (string, error) {
				var n int64
				err := counters.Decode(key, it.Value, &n)
				return counterState(n, true), err
			})
			return
		}
		call := int64(-1)
		var read, wrote string
		_, _, err := occ.Update(ctx, counters, key, func(n int64, exists bool) (int64, error) {
			call = wl.now()
			read, wrote = counterState(n, exists), counterState(n+1, true)
			return n + 1, nil
		}, opts...)
		ret := wl.now()
		o := classify(err)
		wk.count(o, err)
		if !rec {
			return
		}
		if call < 0 {
			if o != linearcheck.Failed {
				wk.unrecordable++ // an outcome without a write: cannot be
			}
			return
		}
		if o == linearcheck.Ambiguous {
			ret = linearcheck.EndOfTime
		}
		wk.events = append(wk.events, linearcheck.Op{Client: wk.id, Key: key, Kind: linearcheck.Write, Outcome: o, Call: call, Return: ret, Read: read, Wrote: wrote})
	}
}

func deltaKey(i int, gen int64) string { return genKey("delta", i, gen) }

// deltaCall returns the function a worker of the delta workload calls:
// occ.Add of 1 to a counter, on a store that applies deltas itself. A
// delta that succeeded read the value below the one it returned; an
// ambiguous one's values are unknown (the run's history is then left
// unchecked, and its sums decide).
func deltaCall(wl *workload, store cas.Store, opts []occ.Option) func(ctx context.Context, wk *worker) {
	return func(ctx context.Context, wk *worker) {
		gen, rec := wl.next()
		key := deltaKey(wk.rng.IntN(numCounters), gen)
		if wk.rng.IntN(readEvery) == 0 {
			wk.read(ctx, wl, rec, store, key, func(it cas.Item) (string, error) {
				n, err := cas.ParseInt(key, it.Value)
				return counterState(n, true), err
			})
			return
		}
		call := wl.now()
		v, _, err := occ.Add(ctx, store, key, 1, cas.Bounds{}, opts...)
		ret := wl.now()
		o := classify(err)
		wk.count(o, err)
		switch {
		case !rec || o == linearcheck.Failed:
		case o == linearcheck.Ambiguous:
			wk.unknown++
		default:
			wk.events = append(wk.events, linearcheck.Op{Client: wk.id, Key: key, Kind: linearcheck.Write, Outcome: o, Call: call, Return: ret,
				Read: counterState(v-1, v > 1), Wrote: counterState(v, true)})
		}
	}
}

// errBadAccount is the error of an account value that does not decode.
var errBadAccount = errors.New("occfaults: account value does not decode")

func decodeAccount(b []byte) (account, error) {
	var a account
	if err := json.Unmarshal(b, &a); err != nil {
		return account{}, fmt.Errorf("%w: %q: %v", errBadAccount, b, err)
	}
	return a, nil
}

// readAccount reads an account in a transaction: its value and state.
func readAccount(tx *occ.Tx, key string) (account, string, error) {
	b, ok, err := tx.Get(key)
	if err != nil || !ok {
		return account{Balance: initialBalance}, "", err
	}
	a, err := decodeAccount(b)
	if err != nil {
		return account{}, "", err
	}
	return a, accountState(a), nil
}

// transferCallFunc returns the function a worker of the transfer workload
// calls in a loop: one call, a Get of an account or an occ.Txn that moves
// 1 to maxTransfer from one account to another (both read, both written,
// one atomic commit), counted and (inside the window) recorded.
func transferCallFunc(wl *workload, store cas.Store, opts []occ.Option) func(ctx context.Context, wk *worker) {
	return func(ctx context.Context, wk *worker) {
		gen, rec := wl.next()
		if wk.rng.IntN(readEvery) == 0 {
			wk.read(ctx, wl, rec, store, accountKey(wk.rng.IntN(numAccounts), gen), func(it cas.Item) (string, error) {
				a, err := decodeAccount(it.Value)
				return accountState(a), err
			})
			return
		}
		i := wk.rng.IntN(numAccounts)
		j := (i + 1 + wk.rng.IntN(numAccounts-1)) % numAccounts
		from, to := accountKey(i, gen), accountKey(j, gen)
		amount := int64(1 + wk.rng.IntN(maxTransfer))
		id := fmt.Sprintf("%d.%d", wk.id, wk.succeeded+wk.ambiguous+wk.failed)
		t := transferCall{id: id, from: from, to: to, amount: amount}
		var call int64
		var readFrom, readTo string
		err := occ.Txn(ctx, store, func(tx *occ.Tx) error {
			call = wl.now()
			a, sa, err := readAccount(tx, from)
			if err != nil {
				return err
			}
			b, sb, err := readAccount(tx, to)
			if err != nil {
				return err
			}
			na, nb := account{a.Balance - amount, id}, account{b.Balance + amount, id}
			va, _ := json.Marshal(na)
			vb, _ := json.Marshal(nb)
			tx.Put(from, va)
			tx.Put(to, vb)
			readFrom, readTo = sa, sb
			t.wroteFrom, t.wroteTo, t.ran = accountState(na), accountState(nb), true
			return nil
		}, opts...)
		ret := wl.now()
		t.outcome = classify(err)
		wk.count(t.outcome, err)
		if !rec {
			return
		}
		if !t.ran {
			if t.outcome != linearcheck.Failed {
				wk.unrecordable++
			}
			return
		}
		if t.outcome == linearcheck.Ambiguous {
			ret = linearcheck.EndOfTime
		}
		wk.transfers = append(wk.transfers, t)
		wk.events = append(wk.events,
			linearcheck.Op{Client: wk.id, Key: from, Kind: linearcheck.Write, Outcome: t.outcome, Call: call, Return: ret, Read: readFrom, Wrote: t.wroteFrom},
			linearcheck.Op{Client: wk.id, Key: to, Kind: linearcheck.Write, Outcome: t.outcome, Call: call, Return: ret, Read: readTo, Wrote: t.wroteTo})
	}
}
