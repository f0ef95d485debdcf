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
	runSmokeCells(t, l, 2, 5, []smokeCell{
		{"postgres", "occ", "counter"}, {"postgres", "occ-cached", "inventory"}, {"postgres", "hybrid", "counter"},
		{"postgres", "adaptive", "counter"}, {"postgres", "lock-pg-for-update", "inventory"}, {"postgres", "lock-pg-advisory", "counter"},
		{"postgres", "occ-txn", "transfer"}, {"postgres", "hybrid", "transfer"}, {"postgres", "lock-pg-for-update", "transfer"},
		{"postgres", "lock-pg-advisory", "transfer"}, {"memory", "lock-pg-advisory", "counter"},
	})
	// SELECT ... FOR UPDATE locks rows where the data is: not on memory.
	wantNotApplicable(t, l, Cell{Backend: "memory", Strategy: "lock-pg-for-update", Workload: "counter", Workers: 1, Keys: 1, Ops: 1})
	info := l.Infos()[1]
	if !strings.Contains(info.Durability, "fsync=") {
		t.Errorf("durability %q does not state fsync", info.Durability)
	}
}
