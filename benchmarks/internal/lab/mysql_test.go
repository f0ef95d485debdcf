package lab

import (
	"strings"
	"testing"

	"github.com/occkit/occkit/internal/mysqltest"
)

// TestMySQLSmoke runs small cells on the MySQL or MariaDB server named by
// OCCKIT_MYSQL_DSN (`make test` starts one): it fails, saying how to get a
// server, when the variable is unset. The lab works in a database of its
// own, dropped when it closes.
func TestMySQLSmoke(t *testing.T) {
	mysqltest.Config(t) // fails loudly without a server
	l := openLab(t, "memory", "mysql")
	type cell struct{ backend, strategy, workload string }
	cells := []cell{
		{"mysql", "occ", "counter"}, {"mysql", "occ-cached", "inventory"}, {"mysql", "hybrid", "counter"},
		{"mysql", "adaptive", "counter"}, {"mysql", "lock-mysql-for-update", "counter"}, {"mysql", "lock-mysql-for-update", "inventory"},
		{"mysql", "lock-mysql-get-lock", "counter"}, {"mysql", "occ-txn", "transfer"}, {"mysql", "hybrid", "transfer"},
		{"mysql", "lock-mysql-for-update", "transfer"}, {"mysql", "lock-mysql-get-lock", "transfer"},
		{"memory", "lock-mysql-get-lock", "counter"},
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
	_, err := l.Run(t.Context(), Cell{Backend: "memory", Strategy: "lock-mysql-for-update", Workload: "counter", Workers: 1, Keys: 1, Ops: 1})
	if err == nil || !strings.Contains(err.Error(), "not applicable") {
		t.Errorf("lock-mysql-for-update on memory: %v, want not applicable", err)
	}
	info := l.Infos()[1]
	if !strings.Contains(info.Durability, "innodb_flush_log_at_trx_commit=") || !strings.Contains(info.Locker, "GET_LOCK") {
		t.Errorf("info %+v: want the durability settings and the GET_LOCK locker", info)
	}
}
