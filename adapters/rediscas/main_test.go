package rediscas_test

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks for goroutine leaks (every lease's watchdog must stop),
// and runs the child side of TestProcessPause when the test binary is
// started as that child.
func TestMain(m *testing.M) {
	if os.Getenv(pauseChildEnv) != "" {
		os.Exit(pauseChild())
	}
	goleak.VerifyTestMain(m)
}
