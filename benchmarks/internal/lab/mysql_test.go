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
	runSmokeCells(t, l, 2, 5, []smokeCell{
		{"mysql", "occ", "counter"}, {"mysql", "occ-cached", "inventory"}, {"mysql", "hybrid", "counter"},
		{"mysql", "adaptive", "counter"}, {"mysql", "lock-mysql-for-update", "counter"}, {"mysql", "lock-mysql-for-update", "inventory"},
		{"mysql", "lock-mysql-get-lock", "counter"}, {"mysql", "occ-txn", "transfer"}, {"mysql", "hybrid", "transfer"},
		{"mysql", "lock-mysql-for-update", "transfer"}, {"mysql", "lock-mysql-get-lock", "transfer"},
		{"memory", "lock-mysql-get-lock", "counter"},
	})
	// SELECT ... FOR UPDATE locks rows where the data is: not on memory.
	wantNotApplicable(t, l, Cell{Backend: "memory", Strategy: "lock-mysql-for-update", Workload: "counter", Workers: 1, Keys: 1, Ops: 1})
	info := l.Infos()[1]
	if !strings.Contains(info.Durability, "innodb_flush_log_at_trx_commit=") || !strings.Contains(info.Locker, "GET_LOCK") {
		t.Errorf("info %+v: want the durability settings and the GET_LOCK locker", info)
	}
}
