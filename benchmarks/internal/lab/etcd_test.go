package lab

import (
	"testing"
)

// TestEtcdSmoke runs small cells on the in-process etcd: every strategy
// that runs there, on a single-key and the multi-key workload, and a lock
// from etcd over data in memory. Each must commit every operation and
// keep its invariant.
func TestEtcdSmoke(t *testing.T) {
	l := openLab(t, "memory", "etcd")
	runSmokeCells(t, l, 8, 4, []smokeCell{
		{"etcd", "occ", "counter"}, {"etcd", "occ-cached", "inventory"}, {"etcd", "hybrid", "counter"},
		{"etcd", "adaptive", "inventory"}, {"etcd", "lock-etcd-mutex", "counter"}, {"etcd", "lock-local", "counter"},
		{"etcd", "occ-txn", "transfer"}, {"etcd", "hybrid", "transfer"}, {"etcd", "lock-etcd-mutex", "transfer"},
		{"memory", "lock-etcd-mutex", "counter"},
	})
	if info := l.Infos(); len(info) != 2 || info[1].Durability == "" {
		t.Errorf("backend infos %+v", info)
	}
}
