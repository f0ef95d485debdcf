package pgcas_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/occkit/occkit/adapters/pgcas"
	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/internal/deltatest"
	"github.com/occkit/occkit/internal/pgtest"
)

// sameTable returns a store on s's table reached through a pool of its
// own, without faults: another process writing the same keys.
func sameTable(t *testing.T, s *pgcas.Store) *pgcas.Store {
	t.Helper()
	var schema string
	if err := s.Pool().QueryRow(context.Background(), "SELECT current_schema()").Scan(&schema); err != nil {
		t.Fatal(err)
	}
	o, err := pgcas.New(pgtest.Pool(t), pgcas.Config{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// Fault: the reply to a delta is lost after it applied, while other
// writers keep adding to the key. Add sends the delta again under its id;
// the delta table refuses the second application, and the call returns
// the outcome of the first: the value counts the delta once.
func TestDeltaLostReplyAppliedOnce(t *testing.T) {
	ctx := context.Background()
	var f pgtest.Faults
	s := faultyStore(t, &f)
	other := sameTable(t, s)
	// Stock enough for the other writer however long the lost replies
	// take to resolve on a loaded machine; if it runs out anyway, the
	// other writer stops (the count stays exact).
	const stock = 1_000_000
	if _, _, err := s.Add(ctx, "stock-lost", stock, cas.Bounds{}); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var others int64
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if _, _, err := other.Add(ctx, "stock-lost", -1, cas.AtLeast(50)); err != nil {
				if !errors.Is(err, cas.ErrBound) {
					t.Errorf("other writer: %v", err)
				}
				return
			}
			others++
		}
	}()
	for i := range 5 {
		f.LoseReply("stock-lost")
		left, ver, err := s.Add(ctx, "stock-lost", -10, cas.AtLeast(0))
		if err != nil || ver == 0 || left < 0 {
			t.Fatalf("delta with a lost reply: %d at %d, %v; want it resolved", left, ver, err)
		}
		fired(t, &f, i+1)
	}
	close(stop)
	wg.Wait()
	it, err := other.Get(ctx, "stock-lost")
	if err != nil {
		t.Fatal(err)
	}
	if want := stock - 50 - others; string(it.Value) != strconv.FormatInt(want, 10) {
		t.Fatalf("stock = %s after 5 lost-reply deltas of -10 and %d of -1, want %d: a delta applied twice or not at all", it.Value, others, want)
	}
}

// Fault: the reply to a delta that its bound refused is lost. Sent again,
// it is refused again: a *cas.BoundError, nothing written.
func TestDeltaLostReplyRefused(t *testing.T) {
	ctx := context.Background()
	var f pgtest.Faults
	s := faultyStore(t, &f)
	_, v1, err := s.Add(ctx, "k-refused", 3, cas.Bounds{})
	if err != nil {
		t.Fatal(err)
	}
	f.LoseReply("k-refused")
	_, _, err = s.Add(ctx, "k-refused", -4, cas.AtLeast(0))
	fired(t, &f, 1)
	if !errors.Is(err, cas.ErrBound) {
		t.Fatalf("err = %v, want ErrBound", err)
	}
	wantAt(t, s, "k-refused", "3", v1)
}

// Fault: the connection breaks before the delta is sent: nothing applied,
// a retryable error, not an ambiguous one.
func TestDeltaFailedSendNotApplied(t *testing.T) {
	ctx := context.Background()
	var f pgtest.Faults
	s := faultyStore(t, &f)
	_, v1, _ := s.Add(ctx, "k-unsent", 3, cas.Bounds{})
	f.FailSend("k-unsent")
	_, _, err := s.Add(ctx, "k-unsent", 1, cas.Bounds{})
	fired(t, &f, 1)
	if err == nil || errors.Is(err, cas.ErrAmbiguous) || !pgcas.Retryable(err) {
		t.Fatalf("err = %v, want a retryable error", err)
	}
	wantAt(t, s, "k-unsent", "3", v1)
}

// Without its delta table a store says which table is missing and how to
// make it.
func TestDeltaTableMissing(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.Pool(t)
	s, err := pgcas.New(pool, pgcas.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, "CREATE TABLE occkit_cas (key text COLLATE \"C\" PRIMARY KEY, value bytea, version bigint GENERATED ALWAYS AS IDENTITY, fence_token bigint NOT NULL DEFAULT 0, write_id uuid NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	_, _, err = s.Add(ctx, "k", 1, cas.Bounds{})
	if err == nil || !strings.Contains(err.Error(), `"occkit_cas_deltas" is missing`) || !strings.Contains(err.Error(), "CreateTable") {
		t.Fatalf("err = %v, want one naming the missing delta table and CreateTable", err)
	}
	if err := s.CreateTable(ctx); err != nil {
		t.Fatal(err)
	}
	if v, _, err := s.Add(ctx, "k", 1, cas.Bounds{}); err != nil || v != 1 {
		t.Fatalf("after CreateTable: %d, %v", v, err)
	}
}

// Fault: a delta's first send is held up on its way, the send made again
// is refused by the bound, and the value moves before the first send
// reaches the server. The refusal was recorded under the delta's id, so
// the first send fails on the record and applies nothing: the caller was
// told "refused", and nothing was written.
func TestDeltaLateFirstSendAfterARefusal(t *testing.T) {
	ctx := context.Background()
	var f pgtest.Faults
	s := faultyStore(t, &f)
	if _, _, err := s.Add(ctx, "late-m", 5, cas.Bounds{}); err != nil {
		t.Fatal(err)
	}
	f.SendLate("late-m")
	if _, _, err := s.Add(ctx, "late-m", -10, cas.AtLeast(0)); !errors.Is(err, cas.ErrBound) {
		t.Fatalf("delta whose first send was held up: %v; want ErrBound from the send made again", err)
	}
	fired(t, &f, 1)
	deltatest.WantLateSendAppliesNothing(t, s, "late-m", 100, 105, f.Release)
}

// Fault: as above, on a key that does not exist yet. The held-up first
// send's delta may not create the key (its bound excludes 0), so the send
// made again is refused; the key is then created, and the first send
// reaches the server where the delta would apply. The refusal of the
// absent key was recorded under the delta's id, so that send fails on the
// record and applies nothing.
func TestDeltaLateFirstSendAfterAnAbsentRefusal(t *testing.T) {
	ctx := context.Background()
	var f pgtest.Faults
	s := faultyStore(t, &f)
	f.SendLate("late-absent")
	if _, _, err := s.Add(ctx, "late-absent", -10, cas.AtLeast(0)); !errors.Is(err, cas.ErrBound) {
		t.Fatalf("delta on an absent key whose first send was held up: %v; want ErrBound from the send made again", err)
	}
	fired(t, &f, 1)
	deltatest.WantLateSendAppliesNothing(t, s, "late-absent", 50, 50, f.Release)
}
