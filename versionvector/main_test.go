package versionvector

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if a test leaves a goroutine behind: the
// package starts none, and the simulation's writers and anti-entropy loop
// must all have stopped when it returns.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
