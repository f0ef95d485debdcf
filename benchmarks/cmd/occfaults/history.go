package main

import (
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
)

// opKind is the kind of a recorded call on one key.
type opKind uint8

const (
	opRead  opKind = iota // a plain Get
	opWrite               // a conditional write of what the call read
)

// outcome is how a call ended.
type outcome uint8

const (
	succeeded outcome = iota // no error
	ambiguous                // cas.ErrAmbiguous: it may or may not have applied
	failed                   // any other error: it applied nothing
)

func (o outcome) String() string {
	switch o {
	case succeeded:
		return "ok"
	case ambiguous:
		return "ambiguous"
	}
	return "failed"
}

// endOfTime is the return time of an ambiguous write: it may take effect
// at any moment after its call, also after every other call returned (or
// never, which looks the same to everyone).
const endOfTime = math.MaxInt64

// event is one recorded call's part on one key: a transfer makes two, one
// per account. States are the key's value in a comparable form, "" when
// the key does not exist.
type event struct {
	client  int
	key     string
	kind    opKind
	outcome outcome
	// call is when the call began — for a write, when its final attempt
	// began (the function given to occ.Update or occ.Txn was called for
	// the last time, after which the write was sent); ret is when it
	// returned, or endOfTime for an ambiguous write.
	call, ret int64
	// read is the state the read (or the final attempt) saw; wrote is the
	// state the final attempt wrote.
	read, wrote string
}

// modelInput is an event as porcupine sees it (the output is unused: the
// outcome is part of the input).
type modelInput struct {
	kind        opKind
	ambiguous   bool
	read, wrote string
}

// registerModel is the sequential specification of one key: a register
// whose writes are compare-and-set. A read returns the current state. A
// write that succeeded read the current state and replaced it, atomically
// (occ writes with the version it read, so the read holds at the write).
// An ambiguous write does the same if the state is still the one it read,
// else nothing: since its return is at the end of time, it can always be
// placed where it did not apply (after everything else), so accepting it
// there loses no linearization, and where it applied it must have read the
// current state like any other write. Writes that failed applied nothing
// and are left out of the history.
var registerModel = porcupine.Model{
	Init: func() any { return "" },
	Step: func(state, input, _ any) (bool, any) {
		s, in := state.(string), input.(modelInput)
		switch {
		case in.kind == opRead:
			return s == in.read, s
		case s == in.read:
			return true, in.wrote
		default:
			return in.ambiguous, s
		}
	},
	Hash: func(state any) uint64 {
		h := fnv.New64a()
		h.Write([]byte(state.(string)))
		return h.Sum64()
	},
	DescribeOperation: func(input, _ any) string {
		in := input.(modelInput)
		if in.kind == opRead {
			return "read " + describeState(in.read)
		}
		s := fmt.Sprintf("%s -> %s", describeState(in.read), describeState(in.wrote))
		if in.ambiguous {
			s += " (ambiguous)"
		}
		return s
	},
	DescribeState: func(state any) string { return describeState(state.(string)) },
}

func describeState(s string) string {
	if s == "" {
		return "absent"
	}
	return s
}

// linResult is the linearizability verdict over a run's histories.
type linResult struct {
	// ok is true (linearizable), false (not), or nil (not decided: the
	// check timed out).
	ok      *bool
	note    string
	checked int // events checked
	keys    int
	elapsed time.Duration
	// badKey and info describe the first key found not linearizable.
	badKey string
	info   porcupine.LinearizationInfo
}

// checkLinearizable checks each key's history against registerModel, one
// key after the other, within timeout in all. Failed writes are left out.
func checkLinearizable(events []event, timeout time.Duration) linResult {
	start := time.Now()
	deadline := start.Add(timeout)
	byKey := map[string][]porcupine.Operation{}
	n := 0
	for _, e := range events {
		if e.outcome == failed {
			continue
		}
		byKey[e.key] = append(byKey[e.key], porcupine.Operation{
			ClientId: e.client,
			Input:    modelInput{kind: e.kind, ambiguous: e.outcome == ambiguous, read: e.read, wrote: e.wrote},
			Call:     e.call,
			Return:   e.ret,
		})
		n++
	}
	keys := make([]string, 0, len(byKey))
	for k := range byKey {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	res := linResult{checked: n, keys: len(keys)}
	for i, k := range keys {
		left := time.Until(deadline)
		if left <= 0 {
			res.note = fmt.Sprintf("porcupine ran out of its %s after %d of %d keys", timeout, i, len(keys))
			res.elapsed = time.Since(start)
			return res
		}
		switch porcupine.CheckOperationsTimeout(registerModel, byKey[k], left) {
		case porcupine.Ok:
		case porcupine.Illegal:
			no := false
			res.ok, res.badKey = &no, k
			res.note = fmt.Sprintf("key %s: no linearization of its %d calls", k, len(byKey[k]))
			// Again, verbosely, for a visualization of the failure.
			_, res.info = porcupine.CheckOperationsVerbose(registerModel, byKey[k], time.Minute)
			res.elapsed = time.Since(start)
			return res
		default:
			res.note = fmt.Sprintf("porcupine timed out on key %s (%d calls) after %d of %d keys, %s in all", k, len(byKey[k]), i, len(keys), timeout)
			res.elapsed = time.Since(start)
			return res
		}
	}
	yes := true
	res.ok = &yes
	res.elapsed = time.Since(start)
	return res
}

// Counter states are the counter's value in decimal.
func counterState(n int64, exists bool) string {
	if !exists {
		return ""
	}
	return strconv.FormatInt(n, 10)
}

// account is the value of an account in the transfer workload: its
// balance and the transfer that wrote it last (which makes every state of
// an account unique, and tells which transfers applied).
type account struct {
	Balance int64  `json:"balance"`
	By      string `json:"by"`
}

// initialBalance is the balance of an account that does not exist yet.
const initialBalance = 1000

// accountState is an account's state: "balance@transfer", "" when absent.
func accountState(a account) string { return strconv.FormatInt(a.Balance, 10) + "@" + a.By }

// parseAccountState returns the balance and last writer of a state.
func parseAccountState(s string) (balance int64, by string, err error) {
	if s == "" {
		return initialBalance, "", nil
	}
	b, by, ok := strings.Cut(s, "@")
	if !ok {
		return 0, "", fmt.Errorf("account state %q: no @", s)
	}
	balance, err = strconv.ParseInt(b, 10, 64)
	return balance, by, err
}

// transferCall is one recorded transfer.
type transferCall struct {
	id       string
	from, to string // account keys
	amount   int64
	outcome  outcome
	// wroteFrom and wroteTo are the states the final attempt wrote; ran
	// is false when the function never ran (nothing was written).
	wroteFrom, wroteTo string
	ran                bool
}

// keyState is a state seen on a key: by a read, by a write's final
// attempt, or at the end of the run.
type keyState struct {
	key, state string
}

// transferVerdict is what the transfer check found.
type transferVerdict struct {
	// lost counts transfers that succeeded and never applied;
	// duplicated counts transfers that applied though they failed, or
	// applied more than once (two different states by one transfer).
	lost, duplicated int64
	// ambiguousApplied counts the ambiguous transfers that applied.
	ambiguousApplied int64
	// explained is true when every account's final balance is its initial
	// balance plus the transfers that applied, and every transfer that
	// applied did so on both of its accounts.
	explained bool
	problems  []string
}

// checkTransfers decides which transfers applied — exactly those whose
// state was seen on an account: an applied transfer's state is either an
// account's final state, or was read by the next write of that account
// (which can only write over the state it read), and a state that was seen
// was written — and checks the final balances against them.
//
// seen holds every state any recorded call read (reads, and the final
// attempts of writes, whatever their outcome) and final the final state of
// every account the recorded transfers touched.
func checkTransfers(calls []transferCall, seen []keyState, final map[string]string) transferVerdict {
	var v transferVerdict
	problem := func(format string, args ...any) {
		if len(v.problems) < 10 {
			v.problems = append(v.problems, fmt.Sprintf(format, args...))
		}
	}
	byID := make(map[string]*transferCall, len(calls))
	for i := range calls {
		byID[calls[i].id] = &calls[i]
	}
	type side struct{ from, to bool }
	applied := map[string]*side{}
	doubled := map[string]bool{}
	look := func(ks keyState) {
		_, by, err := parseAccountState(ks.state)
		if err != nil {
			problem("%s: %v", ks.key, err)
			return
		}
		if by == "" {
			return
		}
		c := byID[by]
		if c == nil {
			problem("%s: state %q written by no recorded transfer", ks.key, ks.state)
			return
		}
		sd := applied[by]
		if sd == nil {
			sd = &side{}
			applied[by] = sd
		}
		switch {
		case ks.key == c.from:
			sd.from = true
			if ks.state != c.wroteFrom {
				doubled[by] = true
			}
		case ks.key == c.to:
			sd.to = true
			if ks.state != c.wroteTo {
				doubled[by] = true
			}
		default:
			problem("%s: state %q by transfer %s, which moved %s -> %s", ks.key, ks.state, by, c.from, c.to)
		}
	}
	for _, ks := range seen {
		look(ks)
	}
	finalKeys := make([]string, 0, len(final))
	for k, s := range final {
		finalKeys = append(finalKeys, k)
		look(keyState{k, s})
	}
	slices.Sort(finalKeys)

	want := map[string]int64{}
	for _, c := range calls {
		sd := applied[c.id]
		switch {
		case sd == nil && c.outcome == succeeded:
			v.lost++
			problem("transfer %s (%d, %s -> %s) succeeded and is not there", c.id, c.amount, c.from, c.to)
		case sd == nil:
		case !sd.from || !sd.to:
			problem("transfer %s applied to one account only (%s: %v, %s: %v)", c.id, c.from, sd.from, c.to, sd.to)
		case c.outcome == failed:
			v.duplicated++
			problem("transfer %s failed and applied", c.id)
		case c.outcome == ambiguous:
			v.ambiguousApplied++
		}
		if sd != nil {
			want[c.from] -= c.amount
			want[c.to] += c.amount
		}
	}
	for id := range doubled {
		v.duplicated++
		problem("transfer %s applied more than once (a state it did not write in its final attempt)", id)
	}
	v.explained = len(v.problems) == 0
	for _, k := range finalKeys {
		bal, _, err := parseAccountState(final[k])
		if err != nil {
			continue // reported above
		}
		if bal != initialBalance+want[k] {
			v.explained = false
			problem("%s: final balance %d, the transfers that applied make it %d", k, bal, initialBalance+want[k])
		}
	}
	return v
}

// errSelfTest is the error of a checker that misjudged a known history.
var errSelfTest = errors.New("occfaults: the checker's self-test failed")

// selfTestCase is a hand-made history with a known verdict.
type selfTestCase struct {
	name         string
	events       []event
	linearizable bool
}

// w and r make self-test events.
func w(client int, call, ret int64, o outcome, read, wrote string) event {
	if o == ambiguous {
		ret = endOfTime
	}
	return event{client: client, key: "k", kind: opWrite, outcome: o, call: call, ret: ret, read: read, wrote: wrote}
}

func r(client int, call, ret int64, read string) event {
	return event{client: client, key: "k", kind: opRead, outcome: succeeded, call: call, ret: ret, read: read}
}

// selfTestCases are the histories the command checks before each run, so
// that a checker that accepts everything cannot pass for one that works.
var selfTestCases = []selfTestCase{
	{"increments, one ambiguous write applied and one not", []event{
		w(0, 10, 20, succeeded, "", "1"),
		w(1, 30, 0, ambiguous, "1", "2"), // applied: the next write read it
		w(0, 40, 50, succeeded, "2", "3"),
		w(1, 60, 0, ambiguous, "3", "4"), // not applied: the read below
		r(2, 70, 80, "3"),
		w(3, 65, 90, failed, "3", "4"), // failed: left out
	}, true},
	{"concurrent writes in either order", []event{
		w(0, 10, 40, succeeded, "", "a"),
		w(1, 15, 35, succeeded, "a", "b"),
		r(2, 20, 30, "a"),
	}, true},
	{"lost write: a read after an acknowledged write misses it", []event{
		w(0, 10, 20, succeeded, "", "1"),
		r(1, 30, 40, ""),
	}, false},
	{"stale read", []event{
		w(0, 10, 20, succeeded, "", "1"),
		w(0, 30, 40, succeeded, "1", "2"),
		r(1, 50, 60, "1"),
	}, false},
	{"a write applied twice (two successful writes read the same state)", []event{
		w(0, 10, 20, succeeded, "", "1"),
		w(1, 30, 40, succeeded, "1", "2"),
		w(2, 50, 60, succeeded, "1", "2"),
	}, false},
	{"a state nobody wrote (a failed write that applied)", []event{
		w(0, 10, 20, succeeded, "", "1"),
		w(1, 25, 28, failed, "1", "2"),
		r(2, 30, 40, "2"),
	}, false},
	{"an ambiguous write seen before it was sent", []event{
		r(0, 10, 20, "1"),
		w(1, 30, 0, ambiguous, "", "1"),
	}, false},
}

// transferSelfTest is a hand-made transfer history with a known verdict.
type transferSelfTest struct {
	name                            string
	calls                           []transferCall
	seen                            []keyState
	final                           map[string]string
	explained                       bool
	lost, duplicated, ambiguousUsed int64
}

func tc(id string, amount int64, o outcome, fromBal, toBal int64) transferCall {
	return transferCall{id: id, from: "a", to: "b", amount: amount, outcome: o, ran: true,
		wroteFrom: accountState(account{fromBal, id}), wroteTo: accountState(account{toBal, id})}
}

var transferSelfTests = []transferSelfTest{
	{
		name: "one applied, one ambiguous applied, one ambiguous not",
		calls: []transferCall{
			tc("t1", 10, succeeded, 990, 1010),
			tc("t2", 5, ambiguous, 985, 1015),
			tc("t3", 7, ambiguous, 978, 1022),
		},
		seen:      []keyState{{"a", "990@t1"}, {"b", "1010@t1"}},
		final:     map[string]string{"a": "985@t2", "b": "1015@t2"},
		explained: true, ambiguousUsed: 1,
	},
	{
		name:      "a successful transfer lost",
		calls:     []transferCall{tc("t1", 10, succeeded, 990, 1010)},
		final:     map[string]string{"a": "", "b": ""},
		explained: false, lost: 1,
	},
	{
		name:      "half a transfer",
		calls:     []transferCall{tc("t1", 10, succeeded, 990, 1010)},
		final:     map[string]string{"a": "990@t1", "b": ""},
		explained: false,
	},
	{
		name:      "a failed transfer that applied",
		calls:     []transferCall{tc("t1", 10, failed, 990, 1010)},
		final:     map[string]string{"a": "990@t1", "b": "1010@t1"},
		explained: false, duplicated: 1,
	},
	{
		name:      "a transfer applied by two attempts",
		calls:     []transferCall{tc("t1", 10, succeeded, 980, 1020)},
		seen:      []keyState{{"a", "990@t1"}, {"b", "1010@t1"}},
		final:     map[string]string{"a": "980@t1", "b": "1020@t1"},
		explained: false, duplicated: 1,
	},
}

// selfTest checks the checkers on the hand-made histories.
func selfTest() error {
	var bad []string
	for _, c := range selfTestCases {
		res := checkLinearizable(c.events, 10*time.Second)
		if res.ok == nil || *res.ok != c.linearizable {
			bad = append(bad, fmt.Sprintf("%q: linearizable %v, want %v (%s)", c.name, fmtVerdict(res.ok), c.linearizable, res.note))
		}
	}
	for _, c := range transferSelfTests {
		v := checkTransfers(c.calls, c.seen, c.final)
		if v.explained != c.explained || v.lost != c.lost || v.duplicated != c.duplicated || v.ambiguousApplied != c.ambiguousUsed {
			bad = append(bad, fmt.Sprintf("%q: explained %v lost %d duplicated %d ambiguous applied %d, want %v %d %d %d (%v)",
				c.name, v.explained, v.lost, v.duplicated, v.ambiguousApplied, c.explained, c.lost, c.duplicated, c.ambiguousUsed, v.problems))
		}
	}
	if bad != nil {
		return fmt.Errorf("%w: %s", errSelfTest, strings.Join(bad, "; "))
	}
	return nil
}

func fmtVerdict(ok *bool) string {
	if ok == nil {
		return "unknown"
	}
	return strconv.FormatBool(*ok)
}
