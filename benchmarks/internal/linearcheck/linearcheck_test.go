package linearcheck

import (
	"errors"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestCheckerVerdicts: the checker accepts the good hand-made histories
// and rejects the bad ones.
func TestCheckerVerdicts(t *testing.T) {
	for _, c := range selfTestCases {
		t.Run(c.name, func(t *testing.T) {
			res := Check(c.ops, Options{Timeout: 10 * time.Second})
			if res.OK == nil {
				t.Fatalf("no verdict: %s", res.Note)
			}
			if *res.OK != c.linearizable {
				t.Fatalf("linearizable = %v, want %v (%s)", *res.OK, c.linearizable, res.Note)
			}
			if !c.linearizable {
				if res.BadKey != "k" {
					t.Fatalf("bad key %q, want k", res.BadKey)
				}
				if err := res.Visualize(filepath.Join(t.TempDir(), "bad.html")); err != nil {
					t.Fatalf("Visualize: %v", err)
				}
			}
		})
	}
}

// TestSelfTestCatchesAVacuousChecker: with a model that accepts every
// step, SelfTest fails.
func TestSelfTestCatchesAVacuousChecker(t *testing.T) {
	if err := SelfTest(); err != nil {
		t.Fatalf("self-test of the real checker: %v", err)
	}
	saved := model
	t.Cleanup(func() { model = saved })
	model.Step = func(state, _, _ any) (bool, any) { return true, state }
	if err := SelfTest(); !errors.Is(err, ErrSelfTest) {
		t.Fatalf("self-test of a checker that accepts everything: %v, want ErrSelfTest", err)
	}
}

// TestAmbiguousWriteAppliedLate: an ambiguous write whose effect is seen
// long after its call (it returns at the end of time) is linearizable,
// and the same history with the write counted as succeeded — returned
// before the read that misses it — is not.
func TestAmbiguousWriteAppliedLate(t *testing.T) {
	h := []Op{
		w(0, 10, 0, Ambiguous, "", "1"),
		r(1, 20, 30, ""),
		r(1, 40, 50, "1"),
	}
	if res := Check(h, Options{Timeout: 10 * time.Second}); res.OK == nil || !*res.OK {
		t.Fatalf("ambiguous write applied late: %s", res.Note)
	}
	h[0] = w(0, 10, 15, Succeeded, "", "1")
	if res := Check(h, Options{Timeout: 10 * time.Second}); res.OK == nil || *res.OK {
		t.Fatalf("acknowledged write missed by a later read: linearizable %s", FormatVerdict(res.OK))
	}
}

// TestCheckTimeout: a check that runs out of time decides nothing.
func TestCheckTimeout(t *testing.T) {
	res := Check([]Op{w(0, 1, 2, Succeeded, "", "1")}, Options{Timeout: -time.Second})
	if res.OK != nil || res.Note == "" {
		t.Fatalf("out of time: linearizable %s, note %q", FormatVerdict(res.OK), res.Note)
	}
	if err := res.Visualize(filepath.Join(t.TempDir(), "x.html")); err == nil {
		t.Fatal("Visualize of an undecided check: nil error")
	}
}

// increments returns n sequential increments of key k, each a read then a
// write, 100 time units apart, by two clients taking turns.
func increments(k string, n int) []Op {
	var h []Op
	for i := range n {
		t := int64(100 * i)
		a, b := strconv.Itoa(i), strconv.Itoa(i+1)
		if i == 0 {
			a = "" // absent
		}
		h = append(h,
			Op{Client: i % 2, Key: k, Kind: Read, Call: t, Return: t + 10, Read: a},
			Op{Client: i % 2, Key: k, Kind: Write, Call: t + 20, Return: t + 30, Read: a, Wrote: b})
	}
	return h
}

// TestMaxPerKey: a history longer than MaxPerKey is checked in
// segments, all of it: a bad call anywhere is found, also next to where a
// segment starts, and the ends of the segments move to where no call is
// in flight.
func TestMaxPerKey(t *testing.T) {
	opts := Options{Timeout: 10 * time.Second, MaxPerKey: 101}
	h := increments("k", 100) // 200 calls, quiescent after each, and a final read
	h = append(h, Op{Key: "k", Kind: Read, Call: 100 * 100, Return: 100*100 + 10, Read: "100"})
	res := Check(append(slices.Clone(h), increments("short", 3)...), opts)
	if res.OK == nil || !*res.OK {
		t.Fatalf("linearizable %s: %s", FormatVerdict(res.OK), res.Note)
	}
	if res.Checked != 201+6 || res.Keys != 2 || res.Segments != 4 || !strings.Contains(res.Note, "1 key, longer than 101 calls, checked in 3 overlapping segments") {
		t.Fatalf("checked %d, keys %d, segments %d, note %q; want 207, 2, 4 and a note", res.Checked, res.Keys, res.Segments, res.Note)
	}

	// Each call made wrong, one at a time.
	for i := range h {
		bad := slices.Clone(h)
		switch {
		case bad[i].Kind == Read && i > 0:
			bad[i].Read = bad[i-1].Read // stale: the write before it is missed
		case bad[i].Kind == Read:
			bad[i].Read = "1" // a value nobody wrote yet
		default:
			bad[i].Wrote = "x" // a value the next read does not see
		}
		if res := Check(bad, opts); res.OK == nil || *res.OK {
			t.Fatalf("call %d made wrong: linearizable %s (%s)", i, FormatVerdict(res.OK), res.Note)
		}
	}

	// A read in flight past the 102nd call: no segment can end in
	// between, so the first ends before it and the second after it.
	slow := slices.Clone(h)
	slow[2].Return = slow[101].Call + 1
	if res := Check(slow, opts); res.OK == nil || !*res.OK || res.Checked != 201 || res.Segments != 3 {
		t.Fatalf("a call in flight: linearizable %s, %d checked in %d segments, want true, 201 in 3 (%s)", FormatVerdict(res.OK), res.Checked, res.Segments, res.Note)
	}

	// A read in flight over more than MaxPerKey calls: a longer segment.
	slow[2].Return = slow[150].Call + 1
	if res := Check(slow, opts); res.OK == nil || !*res.OK || res.Checked != 201 {
		t.Fatalf("a call in flight over 150 calls: linearizable %s, %d checked (%s)", FormatVerdict(res.OK), res.Checked, res.Note)
	}
}

// TestSegmentsAmbiguous: an ambiguous write joins every later segment; it
// may apply in one of them, or never, and a stale token's ambiguous write
// cannot apply in a later segment either.
func TestSegmentsAmbiguous(t *testing.T) {
	opts := Options{Timeout: 10 * time.Second, MaxPerKey: 40}
	var h []Op
	add := func(op Op) { h = append(h, op) }
	// Fenced increments with token 5, 100 time units apart, read first.
	v := ""
	for i := range 40 {
		tm := int64(100 * i)
		next := strconv.Itoa(i + 1)
		add(Op{Key: "k", Kind: Read, Call: tm, Return: tm + 10, Read: v})
		add(Op{Key: "k", Kind: Write, Call: tm + 20, Return: tm + 30, Read: v, Wrote: next, Fenced: true, Token: 5})
		v = next
	}
	// An ambiguous write at the start that applies much later: "30" -> "y".
	amb := Op{Key: "k", Kind: Write, Outcome: Ambiguous, Call: 1, Return: EndOfTime, Read: "30", Wrote: "y", Fenced: true, Token: 7}
	tm := int64(100 * 40)
	// After it applied (fence 7): token 5 is refused, the value is y.
	after := []Op{
		{Key: "k", Kind: Read, Call: tm, Return: tm + 10, Read: "y"},
		{Key: "k", Kind: Write, Outcome: Fenced, Call: tm + 20, Return: tm + 30, Read: "y", Wrote: "z", Fenced: true, Token: 5},
	}
	hist := func(amb Op) []Op {
		// The 30th increment's write is its last before "y"; cut the
		// increments after it short so that "30" is the value then.
		out := append([]Op{amb}, h[:60]...)
		return append(out, after...)
	}
	if res := Check(hist(amb), opts); res.OK == nil || !*res.OK || res.Segments < 2 {
		t.Fatalf("an ambiguous write applied in a later segment: linearizable %s in %d segments (%s)", FormatVerdict(res.OK), res.Segments, res.Note)
	}
	amb.Token = 3 // stale: it cannot apply over token 5's writes
	if res := Check(hist(amb), opts); res.OK == nil || *res.OK {
		t.Fatalf("a stale ambiguous write seen applied: linearizable %s (%s)", FormatVerdict(res.OK), res.Note)
	}
}

// simulate returns a history of n calls on key "k" of a correct fenced
// register: each call takes effect at a point inside its interval (the
// intervals overlap a few neighbours'), writes carry growing tokens with
// some stale ones (refused), some writes read a superseded value (failed:
// a conflict), and some are ambiguous (applied or not).
func simulate(rng *rand.Rand, n int) []Op {
	var h []Op
	value, fence := "", uint64(0)
	var old []string // values the key had
	token := uint64(1)
	for i := range n {
		p := int64(10 * i) // the point the call takes effect at
		op := Op{Client: i % 7, Key: "k", Call: p - rng.Int64N(25), Return: p + rng.Int64N(25)}
		switch rng.IntN(4) {
		case 0:
			op.Kind, op.Read = Read, value
		default:
			op.Kind, op.Read, op.Wrote = Write, value, "v"+strconv.Itoa(i)
			if rng.IntN(2) == 0 {
				if rng.IntN(5) == 0 && token > 2 {
					op.Fenced, op.Token = true, token-1-rng.Uint64N(2) // maybe stale
				} else {
					token += rng.Uint64N(2)
					op.Fenced, op.Token = true, token
				}
			}
			if len(old) > 0 && rng.IntN(6) == 0 {
				op.Read = old[rng.IntN(len(old))] // superseded
			}
			applies := op.Read == value && (!op.Fenced || op.Token >= fence)
			switch {
			case op.Fenced && op.Token < fence:
				op.Outcome = Fenced
			case !applies:
				op.Outcome = Failed
			}
			if rng.IntN(8) == 0 && op.Outcome != Fenced {
				op.Outcome, op.Return = Ambiguous, EndOfTime
				applies = applies && rng.IntN(2) == 0
			}
			if applies {
				old = append(old, value)
				value = op.Wrote
				if op.Fenced {
					fence = op.Token
				}
			}
		}
		h = append(h, op)
	}
	return h
}

// TestSimulatedHistories: histories of a correct register are found
// linearizable, whole and in segments (the segments accuse no correct
// history).
func TestSimulatedHistories(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 20 {
		h := simulate(rng, 400)
		for _, limit := range []int{0, 40, 100} {
			res := Check(h, Options{Timeout: 10 * time.Second, MaxPerKey: limit})
			if res.OK == nil || !*res.OK {
				t.Fatalf("history %d, MaxPerKey %d: linearizable %s (%s)", i, limit, FormatVerdict(res.OK), res.Note)
			}
			if limit == 40 && res.Segments < 5 {
				t.Fatalf("history %d: %d segments of at most 40 calls", i, res.Segments)
			}
		}
	}
}
