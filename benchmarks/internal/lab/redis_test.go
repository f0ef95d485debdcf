package lab

import (
	"slices"
	"testing"

	"github.com/occkit/occkit/internal/redistest"
)

// TestRedisSmoke runs small cells on the Redis server named by
// OCCKIT_REDIS_URL (`make test` starts one): it fails, saying how to get a
// server, when the variable is unset. Every cell's keys are deleted after
// it.
func TestRedisSmoke(t *testing.T) {
	redistest.URL(t) // fails loudly without a server
	l := openLab(t, "redis")
	for _, c := range []struct{ strategy, workload string }{
		{"occ", "counter"}, {"occ-cached", "inventory"}, {"hybrid", "counter"}, {"adaptive", "inventory"},
		{"lock-local", "counter"}, {"occ-txn", "transfer"}, {"hybrid", "transfer"},
		{"lock-redis", "counter"}, {"lock-redis", "transfer"},
	} {
		t.Run(c.strategy+"/"+c.workload, func(t *testing.T) {
			r := runCell(t, l, Cell{Backend: "redis", Strategy: c.strategy, Workload: c.workload, Workers: 4, Keys: 8, Ops: 120, Seed: 7, MaxAttempts: 1000})
			if !r.InvariantOK || r.FailedOps != 0 || r.Ops+r.DeclinedOps != 120 {
				t.Errorf("invariant %v %s; %d committed, %d declined, %d failed (%s)", r.InvariantOK, r.Invariant, r.Ops, r.DeclinedOps, r.FailedOps, r.Error)
			}
		})
	}
}

// TestRedisLockOverOtherData: lock-redis over data that is not in Redis,
// with the redis backend not selected: the lab opens Redis
// (OCCKIT_REDIS_URL) when the first cell needs it, keeps it for the run
// and reports it.
func TestRedisLockOverOtherData(t *testing.T) {
	redistest.URL(t)
	l := openLab(t, "memory")
	for _, wl := range []string{"counter", "inventory", "transfer"} {
		// Two keys, four workers: the lock is contended, and any lapse
		// in its exclusion would break the invariant (the writes carry
		// the version read, so it would show as a conflict, retried).
		r := runCell(t, l, Cell{Backend: "memory", Strategy: "lock-redis", Workload: wl, Workers: 4, Keys: 2, Ops: 200, Seed: 8})
		attempts := r.AttemptsPerOp * float64(r.Ops)
		if !r.InvariantOK || r.FailedOps != 0 || r.Ops+r.DeclinedOps != 200 || attempts > float64(r.Ops+r.DeclinedOps)+0.5 {
			t.Errorf("%s: invariant %v %s; %d committed, %d declined, %d failed (%s), %.0f attempts (more than one per operation: a conflict under the lock, which did not exclude)",
				wl, r.InvariantOK, r.Invariant, r.Ops, r.DeclinedOps, r.FailedOps, r.Error, attempts)
		}
	}
	if got := l.Open(); !slices.Equal(got, []string{"memory", "redis"}) {
		t.Errorf("open services %v, want memory and redis (opened for the lock)", got)
	}
}
