package story

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"
)

// judge computes a run's Outcome from the data read back at the end (the
// final stock, the audit list of accepted writes and the list of the
// store's refusals), marks the writes of the timeline stale or not from
// the same data, fails when the timeline's writes are not the data's, and
// writes the verdict.
func (r *run) judge(ctx context.Context, res *Result) error {
	final, err := r.final(ctx)
	if err != nil {
		return fmt.Errorf("reading the final stock: %w", err)
	}
	entries, err := r.audit(ctx)
	if err != nil {
		return fmt.Errorf("reading the audit list: %w", err)
	}
	refused, err := r.refusals(ctx)
	if err != nil {
		return fmt.Errorf("reading the refusal list: %w", err)
	}
	o := Outcome{Expected: r.spec.Initial - int64(len(entries)), Final: final}
	// Every update is a sale (minus one): a lost one leaves the stock
	// above the expected value.
	o.LostUpdates = max(final-o.Expected, 0)
	// A write is stale when its client no longer held the lock, or when
	// what it read was no longer the current stock (another write was
	// applied between its read and its write).
	stale := make([]bool, len(entries))
	overtaken := make([]string, len(entries))
	prev := r.spec.Initial
	for i, e := range entries {
		stale[i] = !e.Held || e.Read != prev
		if e.Read != prev {
			overtaken[i] = fmt.Sprintf("its read of %d was stale: the stock was %d when it wrote", e.Read, prev)
		}
		if stale[i] {
			o.StaleAccepted++
		}
		prev = e.Wrote
	}
	if prev != final {
		if len(entries) == 0 {
			return fmt.Errorf("the stock is %d, but no write was accepted (initial %d)", final, prev)
		}
		return fmt.Errorf("the stock is %d, but the last accepted write wrote %d", final, prev)
	}
	// Every write the store refused was stale: its token or its version
	// had been overtaken.
	o.StaleRejected = len(refused)
	for _, f := range refused {
		if f.Status == refusedFenced {
			o.FencedOff++
		}
	}
	// The timeline's accepted writes, client by client, are the audit's,
	// and its rejected writes the store's refusals.
	var reasons []string
	accepted, rejected := map[string]int{}, map[string]int{}
	for i := range res.Events {
		e := &res.Events[i]
		switch e.Kind {
		case WriteAccepted:
			k := nthOf(entries, func(a auditEntry) bool { return a.Client == e.Client }, accepted[e.Client])
			accepted[e.Client]++
			if k < 0 {
				return fmt.Errorf("%s's accepted write at %v is not in the audit list", e.Client, e.At)
			}
			e.Stale = stale[k]
			if overtaken[k] != "" {
				e.Detail = join(e.Detail, overtaken[k])
			}
		case WriteRejected:
			k := nthOf(refused, func(f refusalEntry) bool { return f.Client == e.Client }, rejected[e.Client])
			rejected[e.Client]++
			if k < 0 {
				return fmt.Errorf("%s's rejected write at %v was not refused by the store (no refusal of it was seen)", e.Client, e.At)
			}
			e.Stale = true
			why := "a version conflict"
			if refused[k].Status == refusedFenced {
				why = fmt.Sprintf("%s's token %d fenced off", e.Client, e.Token)
			}
			if !slices.Contains(reasons, why) {
				reasons = append(reasons, why)
			}
		}
	}
	if n := sum(accepted); n != len(entries) {
		return fmt.Errorf("the audit list has %d accepted writes, the timeline %d", len(entries), n)
	}
	if n := sum(rejected); n != len(refused) {
		return fmt.Errorf("the store refused %d writes, the timeline shows %d", len(refused), n)
	}
	o.Blocked = blocked(res.Events)
	res.Outcome = o
	res.Safe = o.LostUpdates == 0 && o.StaleAccepted == 0
	res.Verdict = verdict(o, entries, stale, reasons)
	return nil
}

func sum(m map[string]int) (n int) {
	for _, v := range m {
		n += v
	}
	return n
}

// nthOf returns the index of the n-th entry (from 0) that is, or -1.
func nthOf[E any](entries []E, is func(E) bool, n int) int {
	for i, e := range entries {
		if is(e) {
			if n == 0 {
				return i
			}
			n--
		}
	}
	return -1
}

// blocked sums, over the lanes, the time from each Acquire to its Grant.
func blocked(events []Event) (total time.Duration) {
	asked := map[string]time.Duration{}
	waiting := map[string]bool{}
	for _, e := range events {
		switch e.Kind {
		case Acquire:
			asked[e.Client], waiting[e.Client] = e.At, true
		case Grant:
			if waiting[e.Client] {
				total += e.At - asked[e.Client]
				waiting[e.Client] = false
			}
		}
	}
	return total
}

func plural(n int64, one, many string) string {
	if n == 1 {
		return fmt.Sprintf("%d %s", n, one)
	}
	return fmt.Sprintf("%d %s", n, many)
}

// verdict is the one line of a run's outcome; reasons say why the store
// refused the stale writes it refused.
func verdict(o Outcome, entries []auditEntry, stale []bool, reasons []string) string {
	first := -1
	for i, s := range stale {
		if s {
			first = i
			break
		}
	}
	switch {
	case o.LostUpdates > 0 && first >= 0:
		e := entries[first]
		how := fmt.Sprintf("%s's stale write of %d (from its read of %d) was accepted", e.Client, e.Wrote, e.Read)
		if first > 0 && entries[first-1].Client != e.Client {
			p := entries[first-1]
			how += fmt.Sprintf(" after %s's write of %d", p.Client, p.Wrote)
		}
		return fmt.Sprintf("lost %s: %s; final %d, expected %d", plural(o.LostUpdates, "update", "updates"), how, o.Final, o.Expected)
	case o.LostUpdates > 0:
		return fmt.Sprintf("lost %s: final %d, expected %d", plural(o.LostUpdates, "update", "updates"), o.Final, o.Expected)
	case o.StaleAccepted > 0:
		e := entries[first]
		return fmt.Sprintf("no update lost, but %s accepted: %s wrote after its lock had ended (nothing else had been written in between)",
			plural(int64(o.StaleAccepted), "stale write", "stale writes"), e.Client)
	case o.Final != o.Expected:
		return fmt.Sprintf("final %d, expected %d", o.Final, o.Expected)
	case o.StaleRejected > 0:
		if len(reasons) > 3 {
			reasons = append(reasons[:3:3], "…")
		}
		return fmt.Sprintf("safe: %s rejected (%s) and retried; final %d as expected",
			plural(int64(o.StaleRejected), "stale write", "stale writes"), strings.Join(reasons, ", "), o.Final)
	default:
		return fmt.Sprintf("safe: final %d as expected; no stale write", o.Final)
	}
}
