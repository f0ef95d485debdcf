package etcdtest

import (
	"testing"
	"time"
)

func TestMain(m *testing.M) { VerifyTestMain(m) }

// TestStart: the test wrapper's cluster serves through its client and
// agrees on a leader; the test's cleanup stops it.
func TestStart(t *testing.T) {
	c := Start(t, Options{Members: 3})
	ctx := Ctx(t, 30*time.Second)
	if _, err := c.Client().Put(ctx, "k", "1"); err != nil {
		t.Fatal(err)
	}
	if l := c.WaitLeader(10 * time.Second); l < 0 || l > 2 {
		t.Fatalf("leader %d", l)
	}
}
