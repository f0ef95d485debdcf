// Package mutanttest checks that a conformance suite fails for broken
// implementations: the suite runs against a mutant (an implementation with
// one deliberate bug) in a child process of the test binary, so that the
// failure expected of it does not fail the parent test. cas/castest and
// hybrid/lockertest use it.
//
// The test binary has two tests: one that calls [Expect] for each mutant
// and subtest, and one, run only in the child, that runs the suite against
// the mutant [Child] names.
package mutanttest

import (
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// Case names a mutant and the subtests of the suite (slash-separated) that
// must fail for it.
type Case struct {
	Mutant   string
	Subtests []string
}

// Run calls Expect for every case and subtest, each as a subtest of t; in
// a child process (env set) it skips t instead.
func Run(t *testing.T, env, test string, cases []Case) {
	t.Helper()
	if _, child := Child(env); child {
		t.Skip("inside a mutant run")
	}
	for _, c := range cases {
		for _, sub := range c.Subtests {
			t.Run(c.Mutant+"/"+sub, func(t *testing.T) { Expect(t, env, test, c.Mutant, sub) })
		}
	}
}

// Child reports the mutant this process runs, and whether it is a child
// started by Expect at all (the variable env is set). The control, the
// implementation without a bug, is the mutant "".
func Child(env string) (mutant string, ok bool) {
	v, ok := os.LookupEnv(env)
	return strings.TrimSuffix(v, "#"), ok
}

// Expect runs subtest sub (slash-separated, under the test named test) in
// a child process with env naming the control, then the mutant: it fails
// t unless the control passes and the mutant fails in sub.
func Expect(t *testing.T, env, test, mutant, sub string) {
	t.Helper()
	if out, failed := run(t, env, test, "", sub); failed {
		t.Fatalf("the control fails %s:\n%s", sub, out)
	}
	out, failed := run(t, env, test, mutant, sub)
	if !failed {
		t.Fatalf("the suite passed mutant %q in %s:\n%s", mutant, sub, out)
	}
	if !strings.Contains(out, "--- FAIL: "+test+"/"+sub) {
		t.Fatalf("mutant %q: expected %s to fail, output:\n%s", mutant, sub, out)
	}
}

// run runs test/sub in a child process for mutant and reports its output
// and whether it failed.
func run(t *testing.T, env, test, mutant, sub string) (string, bool) {
	t.Helper()
	pattern := "^" + test + "$"
	for _, p := range strings.Split(sub, "/") {
		pattern += "/^" + p + "$"
	}
	cmd := exec.Command(os.Args[0], "-test.run="+pattern, "-test.v", "-test.count=1")
	// The "#" keeps the variable set, and non-empty, for the control.
	cmd.Env = append(os.Environ(), env+"="+mutant+"#")
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatalf("mutanttest: running the child test: %v", err)
	}
	return string(out), err != nil
}
