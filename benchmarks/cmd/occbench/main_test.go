package main

import (
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/occkit/occkit/benchmarks/internal/lab"
	"github.com/occkit/occkit/benchmarks/story"
	"github.com/occkit/occkit/internal/etcdtest"
	"github.com/occkit/occkit/internal/redistest"
)

// TestMain runs the test binary as a lock story's child client when
// `occbench story` re-executes it (as main does), and otherwise checks for
// leaked goroutines. The embedded etcd's HTTP handlers wind down after it
// closes, as in package lab.
func TestMain(m *testing.M) {
	story.ChildMain()
	lab.ChildMain()
	etcdtest.VerifyTestMain(m)
}

// TestRun runs the command on memory with short cells and checks its
// outputs.
func TestRun(t *testing.T) {
	dir := t.TempDir()
	var out strings.Builder
	code := run([]string{"--backends", "memory", "--workloads", "counter,transfer", "--strategies", "occ,occ-txn,hybrid,lock-local",
		"--keys", "50,1", "--duration", "50ms", "--warmup", "10ms", "--out", dir}, &out)
	if code != 0 {
		t.Fatalf("exit status %d; stdout:\n%s", code, out.String())
	}
	for _, s := range []string{"| memory | counter | 8w 50k θ=0 | occ |", "| memory | transfer | 8w 2k | occ-txn |", "### Goal checks", "memory/transfer/occ: single-key only"} {
		if !strings.Contains(out.String(), s) {
			t.Errorf("stdout lacks %q:\n%s", s, out.String())
		}
	}
	for _, f := range []string{"results.json", "results.csv", "report.html", "charts/memory-counter.png", "charts/memory-transfer.png"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Error(err)
		}
	}
}

// TestStory runs `occbench story` on two quick stories in three modes
// (gc-pause's client A is this test binary, re-executed) on Redis
// (OCCKIT_REDIS_URL, or a throwaway server it starts), and checks its
// table, stories.json and stories.html.
func TestStory(t *testing.T) {
	dir := t.TempDir()
	var out strings.Builder
	code := run([]string{"story", "--stories", "gc-pause,clock-jump", "--modes", "redis,fenced,occ", "--out", dir}, &out)
	if code != 0 {
		t.Fatalf("exit status %d; stdout:\n%s", code, out.String())
	}
	for _, s := range []string{"| story | mode | lost updates |", "| gc-pause | redis | 1 | 1 | 0 |", "| gc-pause | fenced | 0 | 0 | 1 |", "| clock-jump | occ | 0 | 0 | 1 |"} {
		if !strings.Contains(out.String(), s) {
			t.Errorf("stdout lacks %q:\n%s", s, out.String())
		}
	}
	if page, err := os.ReadFile(filepath.Join(dir, "stories.html")); err != nil || !strings.Contains(string(page), "gc-pause") {
		t.Errorf("stories.html: %v (%d bytes)", err, len(page))
	}
	b, err := os.ReadFile(filepath.Join(dir, "stories.json"))
	if err != nil {
		t.Fatal(err)
	}
	var rep story.Report
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Results) != 6 || len(rep.Stories) != 2 || len(rep.Modes) != 3 || !strings.Contains(rep.Command, "occbench story") {
		t.Errorf("stories.json: %d results, %d stories, %d modes, command %q", len(rep.Results), len(rep.Stories), len(rep.Modes), rep.Command)
	}
}

// TestProcsAndRTT runs cells with --procs 2 --rtt 0 on Redis
// (OCCKIT_REDIS_URL): the workers run in two child processes (this test
// binary, run again through lab.ChildMain) whose counters are merged (all
// 8 workers of occ-combine commit), the
// counter invariant holds over both processes' increments, each cell
// records procs 2 and the proxy, and lock-local is left out with a note.
func TestProcsAndRTT(t *testing.T) {
	t.Setenv(redistest.EnvURL, redistest.URL(t))
	dir := t.TempDir()
	var out strings.Builder
	code := run([]string{"--backends", "redis", "--workloads", "counter", "--strategies", "occ-combine,lock-redis,lock-local",
		"--keys", "1", "--duration", "300ms", "--warmup", "50ms", "--procs", "2", "--rtt", "0", "--no-start", "--out", dir}, &out)
	if code != 0 {
		t.Fatalf("exit status %d; stdout:\n%s", code, out.String())
	}
	for _, s := range []string{"| redis | counter | 8w 1k | occ-combine |", "lock-local: --procs 2: a mutex of one process is not a lock across processes"} {
		if !strings.Contains(out.String(), s) {
			t.Errorf("stdout lacks %q:\n%s", s, out.String())
		}
	}
	b, err := os.ReadFile(filepath.Join(dir, "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	var res struct {
		Cells []struct {
			Strategy    string `json:"strategy"`
			Procs       int    `json:"procs"`
			Proxy       bool   `json:"proxy"`
			Ops         int64  `json:"ops"`
			InvariantOK bool   `json:"invariant_ok"`
			Committers  int    `json:"workers_committed"`
		} `json:"cells"`
	}
	if err := json.Unmarshal(b, &res); err != nil {
		t.Fatal(err)
	}
	if len(res.Cells) != 2 {
		t.Fatalf("%d cells, want occ-combine and lock-redis: %+v", len(res.Cells), res.Cells)
	}
	for _, c := range res.Cells {
		if c.Procs != 2 || !c.Proxy || !c.InvariantOK || c.Ops == 0 {
			t.Errorf("cell %+v: want procs 2, proxied, invariant ok, operations", c)
		}
		// lock-redis polls and may starve a worker in 300 ms; the
		// combiner's queue does not.
		if c.Strategy == "occ-combine" && c.Committers != 8 {
			t.Errorf("occ-combine: %d of 8 workers committed: the children's counters were not all merged", c.Committers)
		}
	}
}

// TestStorySkipsMissingServers runs `occbench story` with a mode whose
// server is not available (ZooKeeper with --no-start and no
// OCCKIT_ZK_ADDR): the mode is skipped with a note and the command exits
// 0, running the other mode; with --require-servers it exits 1.
func TestStorySkipsMissingServers(t *testing.T) {
	t.Setenv(redistest.EnvURL, redistest.URL(t))
	t.Setenv("OCCKIT_ZK_ADDR", "")
	args := []string{"story", "--no-start", "--stories", "clock-jump", "--modes", "zookeeper,occ"}
	var out strings.Builder
	if code := run(args, &out); code != 0 {
		t.Fatalf("exit status %d, want 0; stdout:\n%s", code, out.String())
	}
	for _, s := range []string{"| clock-jump | occ | 0 | 0 | 1 |", "skipped mode zookeeper: no zookeeper: "} {
		if !strings.Contains(out.String(), s) {
			t.Errorf("stdout lacks %q:\n%s", s, out.String())
		}
	}
	if strings.Contains(out.String(), "| clock-jump | zookeeper |") {
		t.Errorf("the skipped mode has a row:\n%s", out.String())
	}
	out.Reset()
	if code := run(append(args, "--require-servers"), &out); code != 1 {
		t.Fatalf("with --require-servers: exit status %d, want 1; stdout:\n%s", code, out.String())
	}
}

// TestCPUProfile checks that --cpuprofile writes a profile pprof reads
// (gzipped protobuf: its magic bytes) and refuses a path it cannot create.
func TestCPUProfile(t *testing.T) {
	if f := flag.Lookup("test.cpuprofile"); f != nil && f.Value.String() != "" {
		t.Skip("skipped: go test -cpuprofile holds the process's one CPU profile")
	}
	path := filepath.Join(t.TempDir(), "cpu.out")
	code := run([]string{"--backends", "memory", "--workloads", "counter", "--strategies", "occ",
		"--keys", "1", "--duration", "50ms", "--warmup", "10ms", "--cpuprofile", path}, &strings.Builder{})
	if code != 0 {
		t.Fatalf("exit status %d", code)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) < 2 || b[0] != 0x1f || b[1] != 0x8b {
		t.Fatalf("the profile is %d bytes and not gzipped: % x", len(b), b[:min(len(b), 8)])
	}
	if code := run([]string{"--cpuprofile", filepath.Join(t.TempDir(), "no", "such", "dir", "cpu.out")}, &strings.Builder{}); code != 2 {
		t.Errorf("--cpuprofile into a missing directory: exit status %d, want 2", code)
	}
}

func TestUsage(t *testing.T) {
	for _, args := range [][]string{{"--theta", "3"}, {"--workers", "0"}, {"--work", "soon"}, {"--nope"}, {"--backends", "memory", "--strategies", "nope", "--ops", "1"},
		{"story", "--modes", "nope"}, {"story", "--stories", "gc-pause,nope"}, {"story", "extra"}, {"story", "--nope"}} {
		if code := run(args, &strings.Builder{}); code != 2 {
			t.Errorf("%v: exit status %d, want 2", args, code)
		}
	}
}
