package sqlcas_test

import (
	"io"
	"log"
	"testing"

	"github.com/go-sql-driver/mysql"
	"go.uber.org/goleak"
)

// TestMain silences go-sql-driver's log of broken connections (the fault
// tests break hundreds on purpose) and fails the package if a test leaves
// a goroutine behind: every *sql.DB is closed in its test's cleanup, and
// leases stop their watchers when released.
func TestMain(m *testing.M) {
	_ = mysql.SetLogger(log.New(io.Discard, "", 0))
	goleak.VerifyTestMain(m)
}
