package lab

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/occkit/occkit/benchmarks/internal/backends"
	"github.com/occkit/occkit/internal/redistest"
	"github.com/occkit/occkit/internal/servers"
)

// TestDynamoDBSmoke runs small cells on the dynamodb backend over
// minidyn's server in process, without Redis: hybrid and adaptive then
// lease from the in-process locker, and the report says so.
func TestDynamoDBSmoke(t *testing.T) {
	l := openIsolatedLab(t, "dynamodb")
	if info := l.Infos()[0]; !strings.Contains(info.Server, "minidyn") {
		t.Fatalf("server %q, want minidyn in process", info.Server)
	}
	type cell struct{ strategy, workload string }
	for _, c := range []cell{
		{"occ", "counter"}, {"occ-cached", "inventory"}, {"hybrid", "counter"}, {"adaptive", "inventory"},
		{"lock-local", "counter"}, {"occ-txn", "transfer"}, {"occ-cached", "transfer"}, {"hybrid", "transfer"}, {"lock-local", "transfer"},
	} {
		t.Run(c.strategy+"/"+c.workload, func(t *testing.T) {
			r := runCell(t, l, Cell{Backend: "dynamodb", Strategy: c.strategy, Workload: c.workload, Workers: 4, Keys: 4, Ops: 100, Seed: 10, MaxAttempts: 1000})
			if !r.InvariantOK || r.FailedOps != 0 || r.Ops+r.DeclinedOps != 100 {
				t.Errorf("invariant %v %s; %d committed, %d declined, %d failed (%s)", r.InvariantOK, r.Invariant, r.Ops, r.DeclinedOps, r.FailedOps, r.Error)
			}
		})
	}
	if info := l.Infos()[0]; !strings.Contains(info.Locker, "hybrid.NewLocalLocker") || !strings.Contains(info.Durability, "none") {
		t.Errorf("without Redis: locker %q, durability %q", info.Locker, info.Durability)
	}
	// lock-redis needs a Redis, which this lab may not reach or start.
	wantNotApplicable(t, l, Cell{Backend: "dynamodb", Strategy: "lock-redis", Workload: "counter", Workers: 1, Keys: 1, Ops: 1})
}

// TestDynamoDBWithRedis: with the redis backend open, hybrid and adaptive
// on DynamoDB lease from Redis (rediscas.Locker), and lock-redis runs over
// DynamoDB data. It needs OCCKIT_REDIS_URL, and fails loudly without it.
func TestDynamoDBWithRedis(t *testing.T) {
	redistest.URL(t)
	l := openLabWith(t, Env{MaxWorkers: 8, Log: testLog{t}, Getenv: withoutDynalite}, "redis", "dynamodb")
	type cell struct{ strategy, workload string }
	for _, c := range []cell{{"hybrid", "counter"}, {"adaptive", "counter"}, {"hybrid", "transfer"}, {"lock-redis", "inventory"}, {"lock-redis", "transfer"}} {
		t.Run(c.strategy+"/"+c.workload, func(t *testing.T) {
			r := runCell(t, l, Cell{Backend: "dynamodb", Strategy: c.strategy, Workload: c.workload, Workers: 4, Keys: 4, Ops: 100, Seed: 11, MaxAttempts: 1000})
			if !r.InvariantOK || r.FailedOps != 0 || r.Ops+r.DeclinedOps != 100 {
				t.Errorf("invariant %v %s; %d committed, %d declined, %d failed (%s)", r.InvariantOK, r.Invariant, r.Ops, r.DeclinedOps, r.FailedOps, r.Error)
			}
		})
	}
	if info := l.Infos()[1]; info.Name != "dynamodb" || !strings.Contains(info.Locker, "rediscas.Locker") {
		t.Errorf("with Redis open: %s's locker %q", info.Name, info.Locker)
	}
}

// TestDynamoDBOnDynalite: with OCCKIT_DYNALITE_URL the backend runs on
// dynalite, which has no TransactWriteItems: single-key cells run, the
// multi-key ones are not applicable, with the reason, in the plan and when
// run. Without the variable the test starts dynalite with
// scripts/servers/dynalite.sh when it is installed, and fails saying how
// to get it otherwise.
func TestDynamoDBOnDynalite(t *testing.T) {
	url := os.Getenv(backends.EnvDynaliteURL)
	if url == "" {
		root, err := backends.Env{}.Root()
		if err != nil {
			t.Fatal(err)
		}
		cli := filepath.Join(root, "internal", "dynamotest", "dynalite", "node_modules", "dynalite", "cli.js")
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		p, err := servers.StartScript(ctx, root, "dynalite", backends.EnvDynaliteURL, cli, testLog{t})
		if err != nil {
			t.Fatalf("%s is not set and dynalite could not be started (%v): run `make test` (it installs and starts dynalite), "+
				"or `bash scripts/servers/dynalite.sh` and export the %s it prints", backends.EnvDynaliteURL, err, backends.EnvDynaliteURL)
		}
		t.Cleanup(func() {
			if err := p.Stop(context.Background()); err != nil {
				t.Errorf("stopping dynalite: %v", err)
			}
		})
		url = p.URL
	}
	l := openLabWith(t, Env{MaxWorkers: 8, Log: testLog{t}, Getenv: func(k string) string {
		if k == backends.EnvDynaliteURL {
			return url
		}
		return ""
	}}, "dynamodb")
	if info := l.Infos()[0]; !strings.Contains(info.Server, "dynalite") {
		t.Fatalf("server %q, want dynalite", info.Server)
	}
	for _, s := range []string{"occ", "hybrid", "lock-local"} {
		r := runCell(t, l, Cell{Backend: "dynamodb", Strategy: s, Workload: "counter", Workers: 4, Keys: 4, Ops: 60, Seed: 12, MaxAttempts: 1000})
		if !r.InvariantOK || r.FailedOps != 0 || r.Ops != 60 {
			t.Errorf("%s: invariant %v %s; %d committed, %d failed (%s)", s, r.InvariantOK, r.Invariant, r.Ops, r.FailedOps, r.Error)
		}
	}
	err := wantNotApplicable(t, l, Cell{Backend: "dynamodb", Strategy: "occ-txn", Workload: "transfer", Workers: 1, Keys: 2, Ops: 1})
	if err != nil && !strings.Contains(err.Error(), "TransactWriteItems") {
		t.Errorf("occ-txn transfer on dynalite: %v, want not applicable for want of TransactWriteItems", err)
	}
	cells, skips, err := Grid{}.Plan(l)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cells {
		if c.Workload == "transfer" {
			t.Errorf("planned %s on dynalite", CellName(c))
		}
	}
	found := false
	for _, s := range skips {
		found = found || (s.Name == "dynamodb/transfer" && strings.Contains(s.Reason, "TransactWriteItems"))
	}
	if !found {
		t.Errorf("plan skips %+v: transfer on dynalite is not marked n/a with the reason", skips)
	}
}

// withoutDynalite reads the environment but for OCCKIT_DYNALITE_URL (set
// by `make test`): the dynamodb backend then runs on minidyn, which has
// TransactWriteItems.
func withoutDynalite(k string) string {
	if k == backends.EnvDynaliteURL {
		return ""
	}
	return os.Getenv(k)
}
