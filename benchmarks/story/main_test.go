package story

import (
	"testing"

	"github.com/occkit/occkit/internal/etcdtest"
)

// TestMain runs the test binary as gc-pause's child client when the
// runner re-executes it (ChildMain), and otherwise fails the package if a
// test leaves a goroutine behind. The embedded etcd's HTTP handlers wind
// down after it closes, as in package lab.
func TestMain(m *testing.M) {
	ChildMain()
	tiedHelperMain()
	etcdtest.VerifyTestMain(m)
}
