package lab

import (
	"os"
	"strings"
	"testing"
)

// TestSQLiteSmoke runs small cells on the sqlite backend (a file database
// in WAL mode, several connections; no server needed) and checks that
// closing the lab removes its directory.
func TestSQLiteSmoke(t *testing.T) {
	l := openLab(t, "sqlite")
	runSmokeCells(t, l, 2, 9, []smokeCell{
		{"sqlite", "occ", "counter"}, {"sqlite", "occ-cached", "inventory"}, {"sqlite", "occ-combine", "counter"}, {"sqlite", "hybrid", "counter"},
		{"sqlite", "adaptive", "counter"}, {"sqlite", "lock-local", "counter"}, {"sqlite", "occ-txn", "transfer"}, {"sqlite", "hybrid", "transfer"},
	})
	// The local locker is a lock of one process: hybrid does not apply
	// across processes (its tokens would fence off the other process's
	// writes).
	wantNotApplicable(t, l, Cell{Backend: "sqlite", Strategy: "hybrid", Workload: "counter", Workers: 2, Keys: 1, Ops: 1, Procs: 2})
	info := l.Infos()[0]
	if !strings.Contains(info.Durability, "journal_mode=wal") || !strings.Contains(info.Locker, "NewLocalLocker") {
		t.Errorf("info %+v: want WAL and the local locker", info)
	}
	b, _ := l.backend("sqlite")
	dir := b.Server().URL
	if err := l.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("the lab's SQLite directory %s is still there after Close (%v)", dir, err)
	}
}

// TestProcsEmptyShares runs cells whose --procs split leaves some child
// processes nothing to do: more processes than workers, and fewer
// operations than workers. Such a child runs its empty share; the cell
// runs whole.
func TestProcsEmptyShares(t *testing.T) {
	l := openLab(t, "sqlite")
	for _, c := range []Cell{
		{Backend: "sqlite", Strategy: "occ", Workload: "counter", Workers: 2, Keys: 1, Ops: 40, Seed: 3, Procs: 4},
		{Backend: "sqlite", Strategy: "occ", Workload: "counter", Workers: 8, Keys: 1, Ops: 3, Seed: 3, Procs: 4},
	} {
		r := runCell(t, l, c)
		if !r.InvariantOK || r.FailedOps != 0 || r.Ops != c.Ops {
			t.Errorf("%d workers, %d ops in %d processes: invariant %v %s; %d committed, %d failed (%s)", c.Workers, c.Ops, c.Procs, r.InvariantOK, r.Invariant, r.Ops, r.FailedOps, r.Error)
		}
	}
}
