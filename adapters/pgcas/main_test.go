package pgcas_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if a test leaves a goroutine behind: every
// pool a test opens is closed in its cleanup (pgxpool runs a health-check
// goroutine per pool), and leases stop their watchers when released.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
