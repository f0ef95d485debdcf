package testenv

import (
	"strings"
	"testing"
)

func TestLookup(t *testing.T) {
	t.Setenv("OCCKIT_TESTENV_TEST", "redis://127.0.0.1:1")
	if got := (Server{Env: "OCCKIT_TESTENV_TEST"}).Lookup(t); got != "redis://127.0.0.1:1" {
		t.Fatalf("Lookup = %q", got)
	}
}

func TestUniqueName(t *testing.T) {
	a, b := UniqueName("occkit_test_"), UniqueName("occkit_test_")
	if a == b || !strings.HasPrefix(a, "occkit_test_") || len(a) != len("occkit_test_")+16 {
		t.Fatalf("UniqueName: %q and %q", a, b)
	}
}
