package story

import (
	"context"
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/occkit/occkit/benchmarks/internal/backends"
	"github.com/occkit/occkit/internal/mysqltest"
	"github.com/occkit/occkit/internal/redistest"
	"github.com/occkit/occkit/internal/servers"
	"github.com/occkit/occkit/internal/zktest"
)

// testLog sends the lab's messages to the test log.
type testLog struct{ t *testing.T }

func (l testLog) Write(p []byte) (int, error) {
	l.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// testEnv is how the tests reach their servers: Redis from
// OCCKIT_REDIS_URL (`make test` starts one), ZooKeeper started here
// (zktest), Redlock's five Redis servers started by the lab from
// redis-server, MariaDB from OCCKIT_MYSQL_DSN (`make test` starts one),
// etcd in process. A missing server fails the test, saying how to get it.
func testEnv(t *testing.T) backends.Env {
	redistest.URL(t)    // fails loudly without a server
	mysqltest.Config(t) // likewise
	if _, err := os.Stat(servers.RedisBinary); err != nil && os.Getenv(backends.EnvRedlockURLs) == "" {
		t.Fatalf("%s is missing and %s is not set: the redlock mode needs %d Redis servers, which this test starts from redis-server. "+
			"Run `make test` once (scripts/servers/redis.sh installs it) or apt-get install redis-server, or set %s",
			servers.RedisBinary, backends.EnvRedlockURLs, backends.RedlockServers, backends.EnvRedlockURLs)
	}
	zk := zktest.Start(t)
	return backends.Env{StartServers: true, Log: testLog{t}, Getenv: func(k string) string {
		if k == backends.EnvZooKeeperAddr {
			return zk.Addr
		}
		return os.Getenv(k)
	}}
}

var unfenced = []string{ModeRedis, ModeRedisWatchdog, ModeRedlock, ModeZooKeeper, ModeEtcd, ModeMySQL}

// TestStories runs every story in every mode on real servers, as
// `occbench story` does, and checks the shape of each outcome: the
// unfenced locks lose B's update when the holder is paused, cut off, or
// its lock ends early on the server (final 9, A's stale write accepted);
// the fenced write and occ never lose one (final 8, A's stale write
// rejected); under contention, the locks without renewal (redis, redlock)
// lose updates when a critical section outlasts the TTL, and the others
// do not.
func TestStories(t *testing.T) {
	env := testEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	started := time.Now()
	rep, err := Run(ctx, Config{Env: env, Command: "go test ./benchmarks/story -run TestStories"})
	if err != nil {
		t.Fatal(err)
	}
	var table strings.Builder
	if err := WriteMarkdown(&table, rep); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d runs in %v:\n%s", len(rep.Results), time.Since(started).Round(time.Second), table.String())
	if got, want := len(rep.Results), len(StoryNames())*len(ModeNames()); got != want {
		t.Fatalf("%d results, want %d", got, want)
	}
	if len(rep.Servers) < 5 {
		t.Errorf("servers %q: want Redis, etcd, ZooKeeper, MariaDB and Redlock's", rep.Servers)
	}
	for _, res := range rep.Results {
		t.Run(res.Story+"/"+res.Mode, func(t *testing.T) {
			if res.Err != "" {
				t.Fatalf("run failed: %s", res.Err)
			}
			checkShape(t, res)
			if t.Failed() {
				b, _ := json.MarshalIndent(res.Events, "", "  ")
				t.Logf("events: %s", b)
			}
		})
	}
	if p := Problems(rep); len(p) > 0 {
		t.Errorf("problems: %q", p)
	}
	t.Run("page", func(t *testing.T) { checkRunInChromium(t, rep) })
}

func checkShape(t *testing.T, res Result) {
	o := res.Outcome
	kinds := map[string]int{}
	for _, e := range res.Events {
		kinds[e.Client+" "+string(e.Kind)]++
	}
	if res.Story == Contention {
		if o.Expected != 10 || len(res.Clients) != contentionClients {
			t.Errorf("expected %d with %d clients, want 10 with %d", o.Expected, len(res.Clients), contentionClients)
		}
		switch res.Mode {
		case ModeRedis, ModeRedlock:
			if o.LostUpdates < 1 || o.StaleAccepted < 1 || res.Safe {
				t.Errorf("%+v: want lost updates (A's lock expired under its long critical section)", o)
			}
		default:
			if !res.Safe || o.Final != 10 || o.LostUpdates != 0 || o.StaleAccepted != 0 {
				t.Errorf("%+v (%s): want safe, final 10", o, res.Verdict)
			}
			if res.Mode == ModeRedisWatchdog && kinds["A renew"] < 2 {
				t.Errorf("A renewed %d times during its %v critical section, want at least 2", kinds["A renew"], contentionLongWork)
			}
		}
		if res.Mode != ModeOCC && o.Blocked < contentionWork {
			t.Errorf("blocked %v: five clients on one lock wait", o.Blocked)
		}
		return
	}
	if o.Expected != 8 || !slices.Equal(res.Clients, []string{"A", "B"}) {
		t.Errorf("expected %d, clients %v: want 8, [A B]", o.Expected, res.Clients)
	}
	switch {
	case slices.Contains(unfenced, res.Mode):
		if o.Final != 9 || o.LostUpdates != 1 || o.StaleAccepted < 1 || res.Safe {
			t.Errorf("%+v (%s): want final 9, 1 lost update, A's stale write accepted", o, res.Verdict)
		}
	case res.Mode == ModeFenced || res.Mode == ModeOCC:
		if o.Final != 8 || o.LostUpdates != 0 || o.StaleAccepted != 0 || o.StaleRejected < 1 || !res.Safe {
			t.Errorf("%+v (%s): want final 8, A's stale write rejected", o, res.Verdict)
		}
	}
	// The fence, not only the version, refused A's stale write: a fenced
	// mode that wrote without its token would pass the check above on the
	// version alone.
	switch res.Mode {
	case ModeFenced:
		if o.FencedOff < 1 {
			t.Errorf("%+v (%s): A's stale write was not refused for its token", o, res.Verdict)
		}
	case ModeOCC:
		if o.FencedOff != 0 {
			t.Errorf("%+v: occ writes carry no token, yet a write was fenced off", o)
		}
	}
	switch res.Story {
	case GCPause:
		if kinds["A pause"] != 1 || kinds["A resume"] != 1 {
			t.Errorf("A paused %d and resumed %d times, want once", kinds["A pause"], kinds["A resume"])
		}
	case Partition:
		if kinds["A fault"] != 2 {
			t.Errorf("%d faults on A's lane, want the cut and the heal", kinds["A fault"])
		}
	case ClockJump:
		if res.Mode != ModeOCC && kinds["A fault"] < 1 {
			t.Errorf("no fault on A's lane")
		}
	}
	if res.Mode != ModeOCC && res.Story != ClockJump && kinds["A expire"] != 1 {
		t.Errorf("%d expiries of A's lock seen, want 1", kinds["A expire"])
	}
}

func TestUnknownNames(t *testing.T) {
	for _, cfg := range []Config{{Stories: []string{"nope"}}, {Modes: []string{"nope"}}} {
		if _, err := Run(context.Background(), cfg); err == nil || !strings.Contains(err.Error(), "unknown") {
			t.Errorf("%+v: %v, want an unknown-name error", cfg, err)
		}
	}
}
