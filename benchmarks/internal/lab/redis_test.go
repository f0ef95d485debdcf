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
	runSmokeCells(t, l, 8, 7, []smokeCell{
		{"redis", "occ", "counter"}, {"redis", "occ-cached", "inventory"}, {"redis", "hybrid", "counter"}, {"redis", "adaptive", "inventory"},
		{"redis", "lock-local", "counter"}, {"redis", "occ-txn", "transfer"}, {"redis", "hybrid", "transfer"},
		{"redis", "lock-redis", "counter"}, {"redis", "lock-redis", "transfer"},
	})
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
