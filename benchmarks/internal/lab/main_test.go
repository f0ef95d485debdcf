package lab

import (
	"testing"

	"github.com/occkit/occkit/internal/etcdtest"
)

// TestMain fails the package if a test leaves a goroutine behind: every
// cell stops its workers, strategies close their sessions and leases, and
// a lab stops the servers it started. The embedded etcd's HTTP handlers
// wind down after Close returns, as in the hybrid package's tests, and so
// do the peer connections of etcd3's three members (as in
// adapters/etcdcas and internal/servers).
// It adds the tests' broken strategy to the lab's, and runs a --procs
// child's share of a cell when a test's cell started this binary as one.
func TestMain(m *testing.M) {
	ChildMain()
	strategySpecs = append(strategySpecs, blindWrite)
	etcdtest.VerifyTestMain(m)
}
