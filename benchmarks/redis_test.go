package benchmarks

import (
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
	} {
		t.Run(c.strategy+"/"+c.workload, func(t *testing.T) {
			r := runCell(t, l, Cell{Backend: "redis", Strategy: c.strategy, Workload: c.workload, Workers: 4, Keys: 8, Ops: 120, Seed: 7, MaxAttempts: 1000})
			if !r.InvariantOK || r.FailedOps != 0 || r.Ops+r.DeclinedOps != 120 {
				t.Errorf("invariant %v %s; %d committed, %d declined, %d failed (%s)", r.InvariantOK, r.Invariant, r.Ops, r.DeclinedOps, r.FailedOps, r.Error)
			}
		})
	}
}
