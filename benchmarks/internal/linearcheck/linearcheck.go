// Package linearcheck checks recorded histories of calls on keys for
// linearizability, with porcupine, against the sequential specification of
// one key of an occkit store: a register whose writes are compare-and-set,
// with a fence for fenced writes. It is shared by the fault suite's
// commands and packages (benchmarks/cmd/occfaults records calls of
// occ.Update and occ.Txn, benchmarks/internal/leasefaults the store calls
// of its lease holders).
//
// A caller records each call as an [Op] on one key — when it began, when
// it returned, the state it read and the state it wrote, how it ended —
// and hands them all to [Check]. States are the key's value in some
// comparable form chosen by the caller, "" when the key does not exist. A
// write compares versions, the model compares states: each version must
// have one state (two versions may share one, which only makes the check
// weaker).
//
//	res := linearcheck.Check(ops, linearcheck.Options{Timeout: time.Minute})
//	if res.OK != nil && !*res.OK {
//		_ = res.Visualize("bad.html") // porcupine's view of the key res.BadKey
//	}
//
// # The model
//
// A key is a compare-and-set register with a fence (the largest token of
// a fenced write that applied): a successful write found the value it
// read still current and, if fenced, its token at least the fence; an
// ambiguous write returns at [EndOfTime] and takes effect if both still
// hold, else not; a write refused by the fence ([Fenced]) found a larger
// one; other failed writes are left out.
// Histories longer than [Options].MaxPerKey are checked in overlapping
// segments. docs/reliability.md ("linearizable") gives the reasons.
//
// [SelfTest] runs the checker on hand-made histories with known verdicts
// (a lost write, a stale read, a write applied twice, a stale token
// accepted...), so that a checker that accepts everything cannot pass for
// one that works.
package linearcheck

import (
	"cmp"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/anishathalye/porcupine"
)

// Kind is the kind of a recorded call on one key.
type Kind uint8

const (
	// Read is a plain read of the key.
	Read Kind = iota
	// Write is a conditional write of what the call read.
	Write
)

// Outcome is how a call ended.
type Outcome uint8

const (
	// Succeeded: no error.
	Succeeded Outcome = iota
	// Ambiguous: cas.ErrAmbiguous, it may or may not have applied. Its
	// Return must be EndOfTime.
	Ambiguous
	// Failed: any other error, it applied nothing. Failed calls are left
	// out of the history.
	Failed
	// Fenced: a fenced write refused with cas.ErrFenced.
	Fenced
)

// String returns "ok", "ambiguous", "failed" or "fenced".
func (o Outcome) String() string {
	switch o {
	case Succeeded:
		return "ok"
	case Ambiguous:
		return "ambiguous"
	case Fenced:
		return "fenced"
	}
	return "failed"
}

// EndOfTime is the return time of an ambiguous write: it may take effect
// at any moment after its call, also after every other call returned (or
// never, which looks the same to everyone).
const EndOfTime = math.MaxInt64

// Op is one recorded call's part on one key: a call that writes two keys
// (a transaction) makes one Op per key.
type Op struct {
	// Client identifies the caller (porcupine's visualization groups by
	// it).
	Client int
	Key    string
	Kind   Kind
	// Outcome is how the call ended; reads that failed are not recorded.
	Outcome Outcome
	// Call is when the call began and Return when it returned (or
	// EndOfTime for an ambiguous write), in any unit common to the
	// history. The write must have been decided in between.
	Call, Return int64
	// Read is the state the call read (for a write, the state its
	// compare-and-set expected); Wrote the state a write wrote.
	Read, Wrote string
	// Fenced marks a fenced write (cas.FencedStore.CompareAndSwapFenced)
	// with fencing token Token.
	Fenced bool
	Token  uint64
}

// input is an Op as porcupine sees it (the output is unused: the outcome
// is part of the input).
type input struct {
	kind        Kind
	outcome     Outcome
	read, wrote string
	fenced      bool
	token       uint64
}

// state is a key's state in the model. A segment of a long history
// (Options.MaxPerKey) after the first starts from a state partly unknown:
// valueUnknown says the value may be anything, fenceAtLeast that the
// fence may be any token from fence on. Each step keeps exactly the
// states a key could be in, or more (which makes the check weaker, never
// wrong).
type state struct {
	value                      string
	fence                      uint64
	valueUnknown, fenceAtLeast bool
}

// unknown is the state a later segment starts from.
var unknown = state{valueUnknown: true, fenceAtLeast: true}

// model is the sequential specification of one key (see the package
// documentation). Tests replace it to check that the self-test catches a
// checker that accepts everything.
var model = porcupine.Model{
	Init: func() any { return state{} },
	Step: func(st, in, _ any) (bool, any) {
		s, op := st.(state), in.(input)
		if op.kind == Read {
			if s.valueUnknown {
				s.value, s.valueUnknown = op.read, false
				return true, s
			}
			return s.value == op.read, s
		}
		if op.outcome == Fenced {
			// A fence larger than the token refused it.
			if !op.fenced || !s.fenceAtLeast && op.token >= s.fence {
				return false, s
			}
			if s.fenceAtLeast {
				s.fence = max(s.fence, op.token+1)
			}
			return true, s
		}
		fenceOK := !op.fenced || op.token >= s.fence // possibly, for a fence known from below
		valueOK := s.valueUnknown || s.value == op.read
		switch {
		case !fenceOK || !valueOK:
			// It cannot have applied: only an ambiguous write may not have.
			return op.outcome == Ambiguous, s
		case op.outcome == Ambiguous && s.valueUnknown:
			// Applied or not, the value is anything, and the fence still
			// at least what it was (the token, if applied, was at least
			// the fence).
			return true, s
		}
		s.value, s.valueUnknown = op.wrote, false
		if op.fenced {
			s.fence, s.fenceAtLeast = op.token, false
		}
		return true, s
	},
	Hash: func(st any) uint64 {
		s := st.(state)
		h := fnv.New64a()
		h.Write([]byte(s.value))
		x := h.Sum64() ^ s.fence*0x9e3779b97f4a7c15
		if s.valueUnknown {
			x ^= 1
		}
		if s.fenceAtLeast {
			x ^= 2
		}
		return x
	},
	DescribeOperation: func(in, _ any) string {
		op := in.(input)
		if op.kind == Read {
			return "read " + describeValue(op.read)
		}
		var s string
		if op.outcome == Fenced {
			s = "refused"
		} else {
			s = describeValue(op.read) + " -> " + describeValue(op.wrote)
		}
		if op.fenced {
			s += " (token " + strconv.FormatUint(op.token, 10) + ")"
		}
		if op.outcome == Ambiguous {
			s += " (ambiguous)"
		}
		return s
	},
	DescribeState: func(st any) string {
		s := st.(state)
		v := describeValue(s.value)
		if s.valueUnknown {
			v = "unknown"
		}
		switch {
		case s.fenceAtLeast:
			return v + " (fence at least " + strconv.FormatUint(s.fence, 10) + ")"
		case s.fence != 0:
			return v + " (fence " + strconv.FormatUint(s.fence, 10) + ")"
		}
		return v
	},
}

func describeValue(s string) string {
	if s == "" {
		return "absent"
	}
	return s
}

// Options are Check's limits.
type Options struct {
	// Timeout is porcupine's time for all the keys together; the check
	// decides nothing when it runs out.
	Timeout time.Duration
	// MaxPerKey, if positive, bounds the calls porcupine checks at once
	// (its memory grows with the square of the history it checks): a
	// longer history of a key is checked in segments of at most MaxPerKey
	// calls (more only where no shorter one can end), each overlapping
	// the one before by about a quarter, each starting and ending at a
	// quiescent point — a moment when every call that began before it has
	// returned, but ambiguous writes (which join every later segment).
	// A segment after the first starts from an unknown value and a fence
	// known only from below. Every call is checked; a violation is found
	// if it lies within one segment — one involving calls further apart
	// than a segment's overlap around a segment's start may be missed.
	MaxPerKey int
}

// Result is Check's verdict.
type Result struct {
	// OK is true (linearizable), false (not), or nil (not decided: the
	// check ran out of time).
	OK *bool
	// Note says why OK is nil or false, and which keys were checked in
	// segments.
	Note string
	// Checked is the number of calls checked (failed calls are not
	// counted), on Keys keys, in Segments porcupine checks.
	Checked, Keys, Segments int
	Elapsed                 time.Duration
	// BadKey is the first key found not linearizable.
	BadKey string
	model  porcupine.Model // of the segment found not linearizable
	info   porcupine.LinearizationInfo
}

// Visualize writes porcupine's visualization of the history (or the
// segment of it) of BadKey that is not linearizable, an HTML file, to
// path.
func (r Result) Visualize(path string) error {
	if r.OK == nil || *r.OK {
		return errors.New("linearcheck: no history to visualize: it was linearizable or not decided")
	}
	return porcupine.VisualizePath(r.model, r.info, path)
}

// Check checks each key's history against the model, one key after the
// other (in key order), within opts.Timeout in all. Failed calls are left
// out.
func Check(ops []Op, opts Options) Result {
	start := time.Now()
	deadline := start.Add(opts.Timeout)
	byKey := map[string][]porcupine.Operation{}
	for _, o := range ops {
		if o.Outcome == Failed {
			continue
		}
		byKey[o.Key] = append(byKey[o.Key], porcupine.Operation{
			ClientId: o.Client,
			Input:    input{kind: o.Kind, outcome: o.Outcome, read: o.Read, wrote: o.Wrote, fenced: o.Fenced, token: o.Token},
			Call:     o.Call,
			Return:   o.Return,
		})
	}
	keys := make([]string, 0, len(byKey))
	for k := range byKey {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	res := Result{Keys: len(keys)}
	segmentedKeys, segmented := 0, 0 // keys checked in segments, and their segments
	done := func(note string) Result {
		if segmentedKeys > 0 {
			keys := "keys"
			if segmentedKeys == 1 {
				keys = "key"
			}
			s := fmt.Sprintf("the histories of %d %s, longer than %d calls, checked in %d overlapping segments", segmentedKeys, keys, opts.MaxPerKey, segmented)
			if note == "" {
				note = s
			} else {
				note += "; " + s
			}
		}
		res.Note = note
		res.Elapsed = time.Since(start)
		return res
	}
	for i, k := range keys {
		segs := segments(byKey[k], opts.MaxPerKey)
		if len(segs) > 1 {
			segmentedKeys++
			segmented += len(segs)
		}
		for j, seg := range segs {
			left := time.Until(deadline)
			if left <= 0 {
				return done(fmt.Sprintf("porcupine ran out of its %s after %d of %d keys", opts.Timeout, i, len(keys)))
			}
			m := model
			if j > 0 {
				m.Init = func() any { return unknown }
			}
			res.Segments++
			switch porcupine.CheckOperationsTimeout(m, seg, left) {
			case porcupine.Ok:
			case porcupine.Illegal:
				no := false
				res.OK, res.BadKey, res.model = &no, k, m
				// Again, verbosely, for a visualization of the failure.
				_, res.info = porcupine.CheckOperationsVerbose(m, seg, time.Minute)
				what := fmt.Sprintf("its %d calls", len(seg))
				if len(segs) > 1 {
					what = fmt.Sprintf("the %d calls of its segment %d of %d", len(seg), j+1, len(segs))
				}
				return done(fmt.Sprintf("key %s: no linearization of %s", k, what))
			default:
				return done(fmt.Sprintf("porcupine timed out on key %s (%d calls) after %d of %d keys, %s in all", k, len(seg), i, len(keys), opts.Timeout))
			}
		}
		res.Checked += len(byKey[k])
	}
	yes := true
	res.OK = &yes
	return done("")
}

// segments splits h, one key's history, into the segments Check checks
// (see Options.MaxPerKey): h itself if it has at most limit calls.
//
// Why a segment may be checked on its own, from an unknown state: take
// any linearization of h. Every call that began before a quiescent point
// is linearized before every call that began after it (it returned
// before they began), but for ambiguous writes, which may come later. So
// the calls between two quiescent points, with the ambiguous writes that
// began before, are linearized in one stretch, from whatever state the
// key had when it began: a linearization of the segment from that state
// (an ambiguous write linearized before it, there counted as not applied,
// or after it, there moved to the end). The unknown state stands for
// every state.
func segments(h []porcupine.Operation, limit int) [][]porcupine.Operation {
	if limit <= 0 || len(h) <= limit {
		return [][]porcupine.Operation{h}
	}
	h = slices.Clone(h)
	slices.SortStableFunc(h, func(a, b porcupine.Operation) int { return cmp.Compare(a.Call, b.Call) })
	// quiet[i]: i is a quiescent point (every call of h[:i] but
	// ambiguous writes returned before h[i] began).
	quiet := make([]bool, len(h)+1)
	quiet[0], quiet[len(h)] = true, true
	last := int64(math.MinInt64)
	for i := 1; i < len(h); i++ {
		if h[i-1].Input.(input).outcome != Ambiguous {
			last = max(last, h[i-1].Return)
		}
		quiet[i] = last < h[i].Call
	}
	// lastQuiet returns the last quiescent point in (lo, hi], or -1.
	lastQuiet := func(lo, hi int) int {
		for i := min(hi, len(h)); i > lo; i-- {
			if quiet[i] {
				return i
			}
		}
		return -1
	}
	overlap := limit / 4
	var segs [][]porcupine.Operation
	var pending []porcupine.Operation // ambiguous writes before the segment
	for from, added := 0, 0; ; {
		to := lastQuiet(from, from+limit-len(pending))
		if to < 0 { // no quiescent point within limit: the next one
			to = from + 1
			for !quiet[to] {
				to++
			}
		}
		seg := append(slices.Clip(pending), h[from:to]...)
		segs = append(segs, seg)
		if to == len(h) {
			return segs
		}
		next := lastQuiet(from, to-overlap)
		if next < 0 {
			next = to
		}
		for ; added < next; added++ {
			if h[added].Input.(input).outcome == Ambiguous {
				pending = append(pending, h[added])
			}
		}
		from = next
	}
}

// FormatVerdict formats a Result.OK: "true", "false" or "unknown".
func FormatVerdict(ok *bool) string {
	if ok == nil {
		return "unknown"
	}
	return strconv.FormatBool(*ok)
}
