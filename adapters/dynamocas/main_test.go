package dynamocas_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if a test leaves a goroutine behind: every
// SDK client's idle connections are closed and every in-process minidyn
// server is stopped when its test ends.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
