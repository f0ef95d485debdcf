//go:build linux

package story

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// envTiedHelper makes the test binary tiedHelper: a stand-in runner that
// starts a child as startChild does, stops it and waits to be killed.
const envTiedHelper = "OCCKIT_STORY_TIED_HELPER"

// tiedHelperMain runs the test binary as tiedHelper when envTiedHelper
// is set (TestMain calls it first thing), and otherwise returns.
func tiedHelperMain() {
	if os.Getenv(envTiedHelper) != "" {
		tiedHelper()
	}
}

// tiedHelper starts `sleep 600` with startTied, stops it with SIGSTOP as
// gc-pause stops client A, prints its pid and blocks.
func tiedHelper() {
	cmd := exec.Command("sleep", "600")
	exited := make(chan struct{})
	if err := startTied(cmd, exited); err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	if err := stopProcess(cmd.Process); err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	fmt.Println(cmd.Process.Pid)
	time.Sleep(time.Hour) // until the test kills it
}

// procState returns the state letter of pid from /proc ("" when it is
// gone).
func procState(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ""
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 >= len(s) {
		return ""
	}
	return s[i+2 : i+3]
}

// TestChildDiesWithRunner: a runner killed while its child is stopped
// (SIGKILL, a test binary's timeout) takes the child with it, instead of
// leaving it stopped for ever.
func TestChildDiesWithRunner(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	helper := exec.Command(exe, "-test.run=^$")
	helper.Env = append(os.Environ(), envTiedHelper+"=1")
	out, err := helper.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := helper.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = helper.Process.Kill(); _ = helper.Wait() }()
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("helper: %v", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		t.Fatalf("helper said %q", line)
	}
	defer func() { _ = syscall.Kill(pid, syscall.SIGKILL) }() // whatever happens
	for deadline := time.Now().Add(5 * time.Second); procState(pid) != "T"; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the child is %q, not stopped", procState(pid))
		}
	}
	if err := helper.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = helper.Wait()
	deadline := time.Now().Add(5 * time.Second)
	for st := procState(pid); st != "" && st != "Z" && st != "X"; st = procState(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("the runner was killed, its stopped child is still there (state %s)", st)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
