package sqlcas_test

import (
	"context"
	"errors"
	"strconv"
	"testing"

	"github.com/jackc/pgx/v5/stdlib"

	"github.com/occkit/occkit/adapters/sqlcas"
	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/internal/deltatest"
	"github.com/occkit/occkit/internal/pgtest"
)

// faultyPostgres returns a PostgreSQL store whose connections go through
// f, and a second store on the same table reached directly.
func faultyPostgres(t *testing.T, f *pgtest.Faults) (faulty, direct *sqlcas.Store) {
	t.Helper()
	cfg := pgtest.Config(t)
	directDB := stdlib.OpenDB(*cfg.ConnConfig.Copy())
	t.Cleanup(func() { _ = directDB.Close() })
	f.Configure(cfg)
	db := stdlib.OpenDB(*cfg.ConnConfig)
	t.Cleanup(func() { _ = db.Close() })
	direct = storeOn(t, directDB, sqlcas.Config{Dialect: sqlcas.Postgres})
	return storeOn(t, db, sqlcas.Config{Dialect: sqlcas.Postgres}), direct
}

// TestDeltaPostgresLostReply loses the reply to a delta's first send on
// PostgreSQL (the one statement that updates the row and records the
// delta) after it applied, five times, another store taking from the
// key between them. Add sends the delta again as its transaction under the same
// write id: the record refuses a second application, and Add returns the
// recorded outcome. The stock counts every delta once.
func TestDeltaPostgresLostReply(t *testing.T) {
	ctx := context.Background()
	var f pgtest.Faults
	s, other := faultyPostgres(t, &f)
	const stock = 1000
	if _, _, err := other.Add(ctx, "stock-pg", stock, cas.Bounds{}); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		f.LoseReply("stock-pg")
		left, ver, err := s.Add(ctx, "stock-pg", -10, cas.AtLeast(0))
		if err != nil || ver == 0 {
			t.Fatalf("delta %d with a lost reply: %d at %d, %v; want it resolved", i, left, ver, err)
		}
		if want := int64(stock - 10*(i+1) - i); left != want { // and one taken by the other store after each
			t.Fatalf("delta %d with a lost reply left %d, want %d", i, left, want)
		}
		if _, _, err := other.Add(ctx, "stock-pg", -1, cas.AtLeast(0)); err != nil {
			t.Fatal(err)
		}
		if got := f.Fired(); got != i+1 {
			t.Fatalf("fault fired %d times, want %d", got, i+1)
		}
	}
	it, err := other.Get(ctx, "stock-pg")
	if want := strconv.Itoa(stock - 50 - 5); err != nil || string(it.Value) != want {
		t.Fatalf("stock = %q, %v; want %s: a delta applied twice or not at all", it.Value, err, want)
	}
}

// TestDeltaPostgresLateFirstSend holds a delta's first send up on its way
// while the client's read fails, so Add sends it again, and the bound
// refuses that send. The value then moves, and the first send reaches the
// server where the bound would let it through: its record collides with
// the refusal recorded under the same id, and the statement applies
// nothing.
func TestDeltaPostgresLateFirstSend(t *testing.T) {
	ctx := context.Background()
	var f pgtest.Faults
	s, other := faultyPostgres(t, &f)
	if _, _, err := other.Add(ctx, "late-pg", 5, cas.Bounds{}); err != nil {
		t.Fatal(err)
	}
	f.SendLate("late-pg")
	if _, _, err := s.Add(ctx, "late-pg", -10, cas.AtLeast(0)); !errors.Is(err, cas.ErrBound) {
		t.Fatalf("delta whose first send was held up: %v; want ErrBound from the send made again", err)
	}
	if got := f.Fired(); got != 1 {
		t.Fatalf("fault fired %d times, want 1", got)
	}
	// Release returns once the server answered the released statement
	// (it answers at the statement's end, after its commit or rollback).
	deltatest.WantLateSendAppliesNothing(t, other, "late-pg", 100, 105, f.Release)
}
