package main

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/occkit/occkit/benchmarks/internal/linearcheck"
)

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
	outcome  linearcheck.Outcome
	// wroteFrom and wroteTo are the states the final attempt wrote; ran
	// is false when the function never ran (nothing was written).
	wroteFrom, wroteTo string
	ran                bool
}

// keyState is a state seen on a key: by a read, by a write's final
// attempt, or at the end of the run. durable marks a state that no
// failover can have undone: a final state, or one read by the final
// attempt of a write the store acknowledged on a replica.
type keyState struct {
	key, state string
	durable    bool
}

// transferVerdict is what the transfer check found.
type transferVerdict struct {
	// lost counts transfers that succeeded and never applied;
	// duplicated counts transfers that applied though they failed, or
	// applied more than once (two different states by one transfer).
	lost, duplicated int64
	// ambiguousApplied counts the ambiguous transfers that applied.
	ambiguousApplied int64
	// undone counts, in a row whose failover may undo writes, the
	// transfers that failed, or applied once, although an earlier state
	// of theirs was seen: only by calls whose writes the failover could
	// undo, so the failover undid it (the row's Run.Allowed).
	undone int64
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
//
// When mayUndo is set (a failover row), a write seen on the old master can
// have been undone by the failover, and its call can then fail, or apply
// again, honestly. There only durable states (keyState.durable, and final
// states) make a failed transfer duplicated, or a second application
// doubled; the others are counted as undone. The check errs that way only
// in failover rows: a failed transfer seen only by an ambiguous write that
// survived there is counted as undone, not duplicated.
func checkTransfers(calls []transferCall, seen []keyState, final map[string]string, mayUndo bool) transferVerdict {
	var v transferVerdict
	bad := false
	note := func(format string, args ...any) {
		if len(v.problems) < 10 {
			v.problems = append(v.problems, fmt.Sprintf(format, args...))
		}
	}
	problem := func(format string, args ...any) {
		bad = true
		note(format, args...)
	}
	byID := make(map[string]*transferCall, len(calls))
	for i := range calls {
		byID[calls[i].id] = &calls[i]
	}
	// side says which accounts a transfer's states were seen on, and
	// whether one of them was durable.
	type side struct{ from, to, durable bool }
	applied := map[string]*side{}
	// doubled holds the transfers seen in a state their final attempt did
	// not write: true when that state was durable.
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
		sd.durable = sd.durable || ks.durable
		switch {
		case ks.key == c.from:
			sd.from = true
			if ks.state != c.wroteFrom {
				doubled[by] = doubled[by] || ks.durable
			}
		case ks.key == c.to:
			sd.to = true
			if ks.state != c.wroteTo {
				doubled[by] = doubled[by] || ks.durable
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
		look(keyState{k, s, true})
	}
	slices.Sort(finalKeys)

	want := map[string]int64{}
	// undone holds the transfers counted as undone: a failed one that
	// calls saw, or one seen applied twice (a second application).
	var undone []transferCall
	for _, c := range calls {
		sd := applied[c.id]
		switch {
		case sd == nil && c.outcome == linearcheck.Succeeded:
			v.lost++
			problem("transfer %s (%d, %s -> %s) succeeded and is not there", c.id, c.amount, c.from, c.to)
		case sd == nil:
		case !sd.from || !sd.to:
			problem("transfer %s applied to one account only (%s: %v, %s: %v)", c.id, c.from, sd.from, c.to, sd.to)
		case c.outcome == linearcheck.Failed && mayUndo && !sd.durable:
			v.undone++
			undone = append(undone, c)
			note("transfer %s failed; calls saw it applied before the failover undid it", c.id)
			continue
		case c.outcome == linearcheck.Failed:
			v.duplicated++
			problem("transfer %s failed and applied", c.id)
		case c.outcome == linearcheck.Ambiguous:
			v.ambiguousApplied++
		}
		if sd != nil {
			want[c.from] -= c.amount
			want[c.to] += c.amount
		}
	}
	for id, durable := range doubled {
		if mayUndo && !durable {
			v.undone++
			undone = append(undone, *byID[id])
			note("transfer %s: calls saw a state of an earlier attempt, which the failover undid", id)
			continue
		}
		v.duplicated++
		problem("transfer %s applied more than once (a state it did not write in its final attempt)", id)
	}
	v.explained = !bad
	// explains reports whether the final balances are the initial ones
	// plus moves.
	explains := func(moves map[string]int64) bool {
		for _, k := range finalKeys {
			if bal, _, err := parseAccountState(final[k]); err == nil && bal != initialBalance+moves[k] {
				return false
			}
		}
		return true
	}
	if len(undone) > 0 && !explains(want) {
		// The balances may say that the transfers counted as undone
		// applied after all (their states overwritten by writes the
		// check could not call durable): then they were duplicated.
		with := maps.Clone(want)
		for _, c := range undone {
			with[c.from] -= c.amount
			with[c.to] += c.amount
		}
		if explains(with) {
			v.undone -= int64(len(undone))
			v.duplicated += int64(len(undone))
			want = with
			problem("the final balances say that the %d transfers counted as undone applied (failed, or twice)", len(undone))
		}
	}
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

// transferSelfTest is a hand-made transfer history with a known verdict.
type transferSelfTest struct {
	name                            string
	calls                           []transferCall
	seen                            []keyState
	final                           map[string]string
	mayUndo                         bool
	explained                       bool
	lost, duplicated, ambiguousUsed int64
	undone                          int64
}

func tc(id string, amount int64, o linearcheck.Outcome, fromBal, toBal int64) transferCall {
	return transferCall{id: id, from: "a", to: "b", amount: amount, outcome: o, ran: true,
		wroteFrom: accountState(account{fromBal, id}), wroteTo: accountState(account{toBal, id})}
}

var transferSelfTests = []transferSelfTest{
	{
		name: "one applied, one ambiguous applied, one ambiguous not",
		calls: []transferCall{
			tc("t1", 10, linearcheck.Succeeded, 990, 1010),
			tc("t2", 5, linearcheck.Ambiguous, 985, 1015),
			tc("t3", 7, linearcheck.Ambiguous, 978, 1022),
		},
		seen:      []keyState{{"a", "990@t1", false}, {"b", "1010@t1", false}},
		final:     map[string]string{"a": "985@t2", "b": "1015@t2"},
		explained: true, ambiguousUsed: 1,
	},
	{
		name:      "a successful transfer lost",
		calls:     []transferCall{tc("t1", 10, linearcheck.Succeeded, 990, 1010)},
		final:     map[string]string{"a": "", "b": ""},
		explained: false, lost: 1,
	},
	{
		name:      "half a transfer",
		calls:     []transferCall{tc("t1", 10, linearcheck.Succeeded, 990, 1010)},
		final:     map[string]string{"a": "990@t1", "b": ""},
		explained: false,
	},
	{
		name:      "a failed transfer that applied",
		calls:     []transferCall{tc("t1", 10, linearcheck.Failed, 990, 1010)},
		final:     map[string]string{"a": "990@t1", "b": "1010@t1"},
		explained: false, duplicated: 1,
	},
	{
		name:      "a transfer applied by two attempts",
		calls:     []transferCall{tc("t1", 10, linearcheck.Succeeded, 980, 1020)},
		seen:      []keyState{{"a", "990@t1", false}, {"b", "1010@t1", false}},
		final:     map[string]string{"a": "980@t1", "b": "1020@t1"},
		explained: false, duplicated: 1,
	},
	{
		name:      "a failed transfer a read saw, undone by a failover",
		calls:     []transferCall{tc("t1", 10, linearcheck.Failed, 990, 1010)},
		seen:      []keyState{{"a", "990@t1", false}, {"b", "1010@t1", false}},
		final:     map[string]string{"a": "", "b": ""},
		mayUndo:   true,
		explained: true, undone: 1,
	},
	{
		name:  "a failed transfer an acknowledged write read, in a failover row",
		calls: []transferCall{tc("t1", 10, linearcheck.Failed, 990, 1010), tc("t2", 5, linearcheck.Succeeded, 985, 1015)},
		seen: []keyState{{"a", "990@t1", true}, {"b", "1010@t1", true},
			{"a", "985@t2", false}, {"b", "1015@t2", false}},
		final:     map[string]string{"a": "985@t2", "b": "1015@t2"},
		mayUndo:   true,
		explained: false, duplicated: 1,
	},
	{
		name: "a failed transfer that applied, overwritten by an ambiguous one, in a failover row",
		calls: []transferCall{tc("t1", 10, linearcheck.Failed, 990, 1010),
			{id: "t2", from: "a", to: "b", amount: 5, outcome: linearcheck.Ambiguous, ran: true,
				wroteFrom: "985@t2", wroteTo: "1015@t2"}},
		seen:      []keyState{{"a", "990@t1", false}, {"b", "1010@t1", false}},
		final:     map[string]string{"a": "985@t2", "b": "1015@t2"},
		mayUndo:   true,
		explained: true, duplicated: 1, ambiguousUsed: 1,
	},
	{
		name:  "an earlier attempt a read saw, undone by a failover",
		calls: []transferCall{tc("t1", 10, linearcheck.Succeeded, 990, 1010)},
		seen: []keyState{{"a", "980@t1", false}, {"b", "1020@t1", false},
			{"a", "990@t1", false}, {"b", "1010@t1", false}},
		final:     map[string]string{"a": "990@t1", "b": "1010@t1"},
		mayUndo:   true,
		explained: true, undone: 1,
	},
	{
		name:  "the same without a failover",
		calls: []transferCall{tc("t1", 10, linearcheck.Succeeded, 990, 1010)},
		seen: []keyState{{"a", "980@t1", false}, {"b", "1020@t1", false},
			{"a", "990@t1", false}, {"b", "1010@t1", false}},
		final:     map[string]string{"a": "990@t1", "b": "1010@t1"},
		explained: false, duplicated: 1,
	},
}

// mismatch runs the transfer check on the history and says how its
// verdict differs from the known one ("" when it does not).
func (c transferSelfTest) mismatch() string {
	v := checkTransfers(c.calls, c.seen, c.final, c.mayUndo)
	if v.explained != c.explained || v.lost != c.lost || v.duplicated != c.duplicated || v.ambiguousApplied != c.ambiguousUsed || v.undone != c.undone {
		return fmt.Sprintf("explained %v lost %d duplicated %d ambiguous applied %d undone %d, want %v %d %d %d %d (%v)",
			v.explained, v.lost, v.duplicated, v.ambiguousApplied, v.undone, c.explained, c.lost, c.duplicated, c.ambiguousUsed, c.undone, v.problems)
	}
	return ""
}

// selfTest checks the checkers on the hand-made histories: the
// linearizability checker's (linearcheck.SelfTest) and the transfer
// check's.
func selfTest() error {
	var bad []string
	if err := linearcheck.SelfTest(); err != nil {
		bad = append(bad, err.Error())
	}
	for _, c := range transferSelfTests {
		if m := c.mismatch(); m != "" {
			bad = append(bad, fmt.Sprintf("%q: %s", c.name, m))
		}
	}
	if bad != nil {
		return fmt.Errorf("%w: %s", errSelfTest, strings.Join(bad, "; "))
	}
	return nil
}

// fmtVerdict formats a verdict: "true", "false" or "unknown".
func fmtVerdict(ok *bool) string { return linearcheck.FormatVerdict(ok) }
