package lab

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/occkit/occkit/benchmarks/internal/backends"
	"github.com/occkit/occkit/internal/zktest"
)

// TestZooKeeperSmoke runs lock-zookeeper over data in memory against a
// throwaway ZooKeeper (zktest installs Debian's package when missing and
// the test runs as root, or fails saying how to get it).
func TestZooKeeperSmoke(t *testing.T) {
	srv := zktest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	env := Env{MaxWorkers: 8, Log: testLog{t}, Getenv: func(k string) string {
		if k == backends.EnvZooKeeperAddr {
			return srv.Addr
		}
		return os.Getenv(k)
	}}
	l, err := OpenLab(ctx, []string{"memory", "zookeeper"}, env)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close(context.Background())
	if s := l.Skipped(); len(s) > 0 {
		t.Fatalf("not opened: %+v", s)
	}
	if got := l.DataBackends(); len(got) != 1 || got[0] != "memory" {
		t.Errorf("data backends %v: zookeeper only lends locks", got)
	}
	for _, wl := range []string{"counter", "transfer"} {
		r := runCell(t, l, Cell{Backend: "memory", Strategy: "lock-zookeeper", Workload: wl, Workers: 4, Keys: 2, Ops: 120, Seed: 6})
		if !r.InvariantOK || r.FailedOps != 0 || r.Ops+r.DeclinedOps != 120 {
			t.Errorf("%s: invariant %v %s; %d committed, %d declined, %d failed (%s)", wl, r.InvariantOK, r.Invariant, r.Ops, r.DeclinedOps, r.FailedOps, r.Error)
		}
	}
	cells, _, err := Grid{}.Plan(l)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cells {
		if c.Backend != "memory" {
			t.Fatalf("planned a cell on %s", c.Backend)
		}
	}
}
