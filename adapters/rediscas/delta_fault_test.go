package rediscas_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/occkit/occkit/adapters/rediscas"
	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/internal/redistest"
)

// TestDeltaDroppedConnection: the answer of a delta is lost after the
// server ran it, and other clients then write the key more times than its
// history holds. Add sends the delta again under its write id: its record
// makes the script report the first outcome, and the value counts the
// delta once. A refused delta whose answer is lost is refused again.
func TestDeltaDroppedConnection(t *testing.T) {
	s, other, f, admin := faultyStore(t, rediscas.Config{History: 2})
	ctx := redistest.Ctx(t, 20*time.Second)
	if _, _, err := s.Add(ctx, "stock", 100, cas.Bounds{}); err != nil {
		t.Fatal(err)
	}
	// records counts the deltas applied: each leaves one record.
	records := func() int { k, _ := admin.Keys(ctx, s.DeltaRecords()).Result(); return len(k) }
	before := records()
	f.LoseReply(s.DataKey("stock"), func() {
		for range 5 {
			if _, _, err := other.Add(context.Background(), "stock", -1, cas.AtLeast(0)); err != nil {
				t.Error(err)
			}
		}
	})
	left, ver, err := s.Add(ctx, "stock", -10, cas.AtLeast(0))
	if err != nil || f.Fired() != 1 {
		t.Fatalf("delta with a lost answer: %d at v%d, %v (faults fired %d); want success", left, ver, err, f.Fired())
	}
	if left != 90 && left != 85 {
		t.Fatalf("the delta returned %d, want 90 (applied before the others) or 85", left)
	}
	wantValue(t, s, "stock", "85", 0)
	if got := records() - before; got != 6 {
		t.Fatalf("%d delta records for 6 deltas", got)
	}

	f.LoseReply(s.DataKey("stock"), nil)
	_, _, err = s.Add(ctx, "stock", -86, cas.AtLeast(0))
	if !errors.Is(err, cas.ErrBound) || f.Fired() != 2 {
		t.Fatalf("refused delta with a lost answer: %v, want ErrBound", err)
	}
	wantValue(t, s, "stock", "85", 0)
}

// TestDeltaFailedSend: the connection breaks before the delta is sent:
// the client sends it again on a new connection, and it applies once.
func TestDeltaFailedSend(t *testing.T) {
	s, _, f, _ := faultyStore(t, rediscas.Config{})
	ctx := redistest.Ctx(t, 20*time.Second)
	if _, _, err := s.Add(ctx, "n", 3, cas.Bounds{}); err != nil {
		t.Fatal(err)
	}
	f.FailSend(s.DataKey("n"))
	v, _, err := s.Add(ctx, "n", 1, cas.Bounds{})
	if err != nil || v != 4 || f.Fired() != 1 {
		t.Fatalf("delta whose send failed: %d, %v (fired %d); want it sent again and applied once", v, err, f.Fired())
	}
	wantValue(t, s, "n", "4", 0)
}

// TestDeltaLateFirstSend: a delta's first send is held up on its way (a
// proxy, a kernel buffer) while the client's connection fails, so Add
// sends it again under its write id, and that send applies it. Then the
// first send reaches the server: it finds the delta's record and applies
// nothing. (When the script looked the record up only on sends it knew
// were repeats, the late first send applied the delta a second time.)
func TestDeltaLateFirstSend(t *testing.T) {
	s, _, f, admin := faultyStore(t, rediscas.Config{})
	ctx := redistest.Ctx(t, 20*time.Second)
	if _, _, err := s.Add(ctx, "n", 10, cas.Bounds{}); err != nil {
		t.Fatal(err)
	}
	records := func() int { k, _ := admin.Keys(ctx, s.DeltaRecords()).Result(); return len(k) }
	before := records()
	f.SendLate(s.DataKey("n"))
	v, _, err := s.Add(ctx, "n", 5, cas.Bounds{})
	if err != nil || v != 15 || f.Fired() != 1 {
		t.Fatalf("delta whose first send was held up: %d, %v (fired %d); want 15, applied by the second send", v, err, f.Fired())
	}
	if err := f.Release(5 * time.Second); err != nil {
		t.Fatalf("releasing the held-up first send: %v", err)
	}
	wantValue(t, s, "n", "15", 0)
	if got := records() - before; got != 1 {
		t.Fatalf("%d delta records for one delta", got)
	}
}

// Fault: a delta's first send is held up on its way, the send made again
// is refused by the bound, and the value moves before the first send
// arrives. The refusal was recorded under the delta's id, so the first
// send, arriving where the bound would now let it through, applies
// nothing: the caller was told "refused", and nothing was written.
func TestDeltaLateFirstSendAfterARefusal(t *testing.T) {
	s, _, f, _ := faultyStore(t, rediscas.Config{})
	ctx := redistest.Ctx(t, 20*time.Second)
	if _, _, err := s.Add(ctx, "m", 5, cas.Bounds{}); err != nil {
		t.Fatal(err)
	}
	f.SendLate(s.DataKey("m"))
	if _, _, err := s.Add(ctx, "m", -10, cas.AtLeast(0)); !errors.Is(err, cas.ErrBound) || f.Fired() != 1 {
		t.Fatalf("delta whose first send was held up: %v (fired %d); want ErrBound from the send made again", err, f.Fired())
	}
	if _, _, err := s.Add(ctx, "m", 100, cas.Bounds{}); err != nil {
		t.Fatal(err)
	}
	if err := f.Release(5 * time.Second); err != nil {
		t.Fatalf("releasing the held-up first send: %v", err)
	}
	wantValue(t, s, "m", "105", 0)
}
