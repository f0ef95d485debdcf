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
	type cell struct{ backend, strategy, workload string }
	cells := []cell{
		{"etcd", "occ", "counter"}, {"etcd", "occ-cached", "inventory"}, {"etcd", "hybrid", "counter"},
		{"etcd", "adaptive", "inventory"}, {"etcd", "lock-etcd-mutex", "counter"}, {"etcd", "lock-local", "counter"},
		{"etcd", "occ-txn", "transfer"}, {"etcd", "hybrid", "transfer"}, {"etcd", "lock-etcd-mutex", "transfer"},
		{"memory", "lock-etcd-mutex", "counter"},
	}
	for _, c := range cells {
		t.Run(c.backend+"/"+c.strategy+"/"+c.workload, func(t *testing.T) {
			r := runCell(t, l, Cell{Backend: c.backend, Strategy: c.strategy, Workload: c.workload, Workers: 4, Keys: 8, Ops: 120, Seed: 4, MaxAttempts: 1000})
			if !r.InvariantOK || r.FailedOps != 0 || r.Ops+r.DeclinedOps != 120 {
				t.Errorf("invariant %v %s; %d committed, %d declined, %d failed (%s)", r.InvariantOK, r.Invariant, r.Ops, r.DeclinedOps, r.FailedOps, r.Error)
			}
		})
	}
	if info := l.Infos(); len(info) != 2 || info[1].Durability == "" {
		t.Errorf("backend infos %+v", info)
	}
}
