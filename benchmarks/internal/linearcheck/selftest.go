package linearcheck

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// ErrSelfTest is the error of a checker that misjudged a known history.
var ErrSelfTest = errors.New("linearcheck: the checker's self-test failed")

// selfTestCase is a hand-made history of key "k" with a known verdict.
type selfTestCase struct {
	name         string
	ops          []Op
	linearizable bool
}

// w, fw, r make self-test ops on key "k": a plain write, a fenced write
// with token t, a read.
func w(client int, call, ret int64, o Outcome, read, wrote string) Op {
	if o == Ambiguous {
		ret = EndOfTime
	}
	return Op{Client: client, Key: "k", Kind: Write, Outcome: o, Call: call, Return: ret, Read: read, Wrote: wrote}
}

func fw(client int, call, ret int64, o Outcome, t uint64, read, wrote string) Op {
	op := w(client, call, ret, o, read, wrote)
	op.Fenced, op.Token = true, t
	return op
}

func r(client int, call, ret int64, read string) Op {
	return Op{Client: client, Key: "k", Kind: Read, Outcome: Succeeded, Call: call, Return: ret, Read: read}
}

// selfTestCases are the histories SelfTest checks.
var selfTestCases = []selfTestCase{
	{"increments, one ambiguous write applied and one not", []Op{
		w(0, 10, 20, Succeeded, "", "1"),
		w(1, 30, 0, Ambiguous, "1", "2"), // applied: the next write read it
		w(0, 40, 50, Succeeded, "2", "3"),
		w(1, 60, 0, Ambiguous, "3", "4"), // not applied: the read below
		r(2, 70, 80, "3"),
		w(3, 65, 90, Failed, "3", "4"), // failed: left out
	}, true},
	{"concurrent writes in either order", []Op{
		w(0, 10, 40, Succeeded, "", "a"),
		w(1, 15, 35, Succeeded, "a", "b"),
		r(2, 20, 30, "a"),
	}, true},
	{"lost write: a read after an acknowledged write misses it", []Op{
		w(0, 10, 20, Succeeded, "", "1"),
		r(1, 30, 40, ""),
	}, false},
	{"stale read", []Op{
		w(0, 10, 20, Succeeded, "", "1"),
		w(0, 30, 40, Succeeded, "1", "2"),
		r(1, 50, 60, "1"),
	}, false},
	{"a write applied twice (two successful writes read the same state)", []Op{
		w(0, 10, 20, Succeeded, "", "1"),
		w(1, 30, 40, Succeeded, "1", "2"),
		w(2, 50, 60, Succeeded, "1", "2"),
	}, false},
	{"a state nobody wrote (a failed write that applied)", []Op{
		w(0, 10, 20, Succeeded, "", "1"),
		w(1, 25, 28, Failed, "1", "2"),
		r(2, 30, 40, "2"),
	}, false},
	{"an ambiguous write seen before it was sent", []Op{
		r(0, 10, 20, "1"),
		w(1, 30, 0, Ambiguous, "", "1"),
	}, false},
	{"fenced writes: equal and larger tokens apply, a smaller one is refused", []Op{
		fw(0, 10, 20, Succeeded, 5, "", "1"),
		fw(0, 30, 40, Succeeded, 5, "1", "2"),
		fw(1, 50, 60, Succeeded, 7, "2", "3"),
		fw(0, 70, 80, Fenced, 5, "3", "4"),
		w(2, 90, 100, Succeeded, "3", "4"), // a plain write leaves the fence
		fw(0, 110, 120, Fenced, 6, "4", "5"),
		r(2, 130, 140, "4"),
	}, true},
	{"a refusal concurrent with the write of the larger token", []Op{
		fw(0, 10, 20, Succeeded, 3, "", "1"),
		fw(1, 30, 60, Succeeded, 5, "1", "2"),
		fw(0, 40, 50, Fenced, 3, "1", "2"),
	}, true},
	{"a stale token accepted", []Op{
		fw(0, 10, 20, Succeeded, 5, "", "1"),
		fw(1, 30, 40, Succeeded, 3, "1", "2"),
	}, false},
	{"a write refused by the fence before a larger token wrote", []Op{
		fw(0, 10, 20, Succeeded, 3, "", "1"),
		fw(1, 30, 40, Fenced, 4, "1", "2"),
		fw(2, 50, 60, Succeeded, 5, "1", "2"),
	}, false},
	{"an ambiguous stale write that applied", []Op{
		fw(0, 10, 20, Succeeded, 5, "", "1"),
		fw(1, 30, 0, Ambiguous, 3, "1", "2"),
		r(2, 40, 50, "2"),
	}, false},
}

// SelfTest runs the checker on hand-made histories with known verdicts —
// good ones, and a lost write, a stale read, a write applied twice, a
// state nobody wrote, an ambiguous write seen before it was sent, a stale
// token accepted, a write refused by a fence no larger token had raised —
// and returns an error matching ErrSelfTest, naming the cases it
// misjudged, if it misjudged any.
func SelfTest() error {
	var bad []string
	for _, c := range selfTestCases {
		res := Check(c.ops, Options{Timeout: 10 * time.Second})
		if res.OK == nil || *res.OK != c.linearizable {
			bad = append(bad, fmt.Sprintf("%q: linearizable %s, want %v (%s)", c.name, FormatVerdict(res.OK), c.linearizable, res.Note))
		}
	}
	if bad != nil {
		return fmt.Errorf("%w: %s", ErrSelfTest, strings.Join(bad, "; "))
	}
	return nil
}
