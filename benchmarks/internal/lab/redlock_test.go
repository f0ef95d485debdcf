package lab

import (
	"net"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/occkit/occkit/benchmarks/internal/backends"
	"github.com/occkit/occkit/internal/servers"
)

// TestRedlockSmoke runs lock-redlock over data in memory and in DynamoDB
// (minidyn), as the lab runs it: the first cell that needs Redlock starts
// five throwaway Redis servers with scripts/servers/redis.sh (or uses
// OCCKIT_REDLOCK_URLS), and closing the lab stops them. It fails, saying
// how to get one, when redis-server is not installed.
func TestRedlockSmoke(t *testing.T) {
	if _, err := os.Stat(servers.RedisBinary); err != nil && os.Getenv(backends.EnvRedlockURLs) == "" {
		t.Fatalf("%s is missing and %s is not set: lock-redlock needs %d Redis servers, which this test starts from redis-server. "+
			"Run `make test` once (scripts/servers/redis.sh installs it) or apt-get install redis-server, "+
			"or set %s to %d comma-separated Redis URLs", servers.RedisBinary, backends.EnvRedlockURLs, backends.RedlockServers, backends.EnvRedlockURLs, backends.RedlockServers)
	}
	l := openLabWith(t, Env{StartServers: true, MaxWorkers: 8, Log: testLog{t}, Getenv: withoutDynalite}, "memory", "dynamodb")
	type cell struct{ backend, workload string }
	for _, c := range []cell{{"memory", "counter"}, {"memory", "transfer"}, {"dynamodb", "inventory"}, {"dynamodb", "transfer"}} {
		t.Run(c.backend+"/"+c.workload, func(t *testing.T) {
			// Four workers over four keys: waits happen (redsync polls
			// every 50–250 ms), and a lapse in exclusion would show.
			r := runCell(t, l, Cell{Backend: c.backend, Strategy: "lock-redlock", Workload: c.workload, Workers: 4, Keys: 4, Ops: 40, Seed: 9})
			if !r.InvariantOK || r.FailedOps != 0 || r.Ops+r.DeclinedOps != 40 {
				t.Errorf("invariant %v %s; %d committed, %d declined, %d failed (%s)", r.InvariantOK, r.Invariant, r.Ops, r.DeclinedOps, r.FailedOps, r.Error)
			}
		})
	}
	rl, ok := l.backend("redlock")
	if !ok {
		t.Fatalf("no redlock backend among %v", l.Open())
	}
	var addrs []string
	for _, c := range rl.Redlock() {
		addrs = append(addrs, c.Options().Addr)
	}
	if len(slices.Compact(slices.Sorted(slices.Values(addrs)))) != backends.RedlockServers {
		t.Fatalf("redlock servers %v, want %d distinct", addrs, backends.RedlockServers)
	}
	if os.Getenv(backends.EnvRedlockURLs) != "" {
		return // not ours to stop
	}
	if err := l.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if c, err := net.DialTimeout("tcp", a, time.Second); err == nil {
			c.Close()
			t.Errorf("redlock server %s still answers after the lab closed", a)
		}
	}
}
