package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

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

func TestUsage(t *testing.T) {
	for _, args := range [][]string{{"--theta", "3"}, {"--workers", "0"}, {"--work", "soon"}, {"--nope"}, {"--backends", "memory", "--strategies", "nope", "--ops", "1"}} {
		if code := run(args, &strings.Builder{}); code != 2 {
			t.Errorf("%v: exit status %d, want 2", args, code)
		}
	}
}
