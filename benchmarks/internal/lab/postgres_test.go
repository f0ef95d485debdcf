package lab

import (
	"strings"
	"testing"

	"github.com/occkit/occkit/internal/pgtest"
)

// TestPostgresSmoke runs small cells on the PostgreSQL server named by
// OCCKIT_PG_URL (`make test` starts one): it fails, saying how to get a
// server, when the variable is unset. The lab works in a schema of its
// own, dropped when it closes.
func TestPostgresSmoke(t *testing.T) {
	pgtest.URL(t) // fails loudly without a server
	l := openLab(t, "memory", "postgres")
	type cell struct{ backend, strategy, workload string }
	cells := []cell{
		{"postgres", "occ", "counter"}, {"postgres", "occ-cached", "inventory"}, {"postgres", "hybrid", "counter"},
		{"postgres", "adaptive", "counter"}, {"postgres", "lock-pg-for-update", "inventory"}, {"postgres", "lock-pg-advisory", "counter"},
		{"postgres", "occ-txn", "transfer"}, {"postgres", "hybrid", "transfer"}, {"postgres", "lock-pg-for-update", "transfer"},
		{"postgres", "lock-pg-advisory", "transfer"}, {"memory", "lock-pg-advisory", "counter"},
	}
	for _, c := range cells {
		t.Run(c.backend+"/"+c.strategy+"/"+c.workload, func(t *testing.T) {
			r := runCell(t, l, Cell{Backend: c.backend, Strategy: c.strategy, Workload: c.workload, Workers: 4, Keys: 2, Ops: 120, Seed: 5, MaxAttempts: 1000})
			if !r.InvariantOK || r.FailedOps != 0 || r.Ops+r.DeclinedOps != 120 {
				t.Errorf("invariant %v %s; %d committed, %d declined, %d failed (%s)", r.InvariantOK, r.Invariant, r.Ops, r.DeclinedOps, r.FailedOps, r.Error)
			}
		})
	}
	// SELECT ... FOR UPDATE locks rows where the data is: not on memory.
	_, err := l.Run(t.Context(), Cell{Backend: "memory", Strategy: "lock-pg-for-update", Workload: "counter", Workers: 1, Keys: 1, Ops: 1})
	if err == nil || !strings.Contains(err.Error(), "not applicable") {
		t.Errorf("lock-pg-for-update on memory: %v, want not applicable", err)
	}
	info := l.Infos()[1]
	if !strings.Contains(info.Durability, "fsync=") {
		t.Errorf("durability %q does not state fsync", info.Durability)
	}
}
