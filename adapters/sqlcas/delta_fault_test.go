package sqlcas_test

import (
	"context"
	"errors"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/occkit/occkit/adapters/sqlcas"
	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/internal/connfault"
	"github.com/occkit/occkit/internal/deltatest"
	"github.com/occkit/occkit/internal/mysqltest"
)

// TestDeltaLostReply loses the reply to deltas that applied, and another
// store takes from the same key before the delta can be sent again: once
// with the store's delta procedure (its CALL's reply is lost), once
// without it (the procedure dropped: the reply to the transaction's
// COMMIT is lost). Add runs each delta again under its write id: the
// delta table refuses the second application, Add returns the recorded
// outcome, and the stock counts every delta once.
func TestDeltaLostReply(t *testing.T) {
	for _, proc := range []bool{true, false} {
		t.Run(map[bool]string{true: "procedure", false: "transaction"}[proc], func(t *testing.T) {
			ctx := context.Background()
			direct, viaProxy, p := proxied(t)
			db := mysqltest.Open(t, direct)
			other := storeOn(t, db, sqlcas.Config{Dialect: sqlcas.MySQL})
			if !proc {
				if _, err := db.ExecContext(ctx, "DROP PROCEDURE occkit_cas_add_v1"); err != nil {
					t.Fatal(err)
				}
			}
			store, err := sqlcas.New(mysqltest.Open(t, viaProxy), sqlcas.Config{Dialect: sqlcas.MySQL})
			if err != nil {
				t.Fatal(err)
			}
			if _, _, err := other.Add(ctx, "stock", 1000, cas.Bounds{}); err != nil {
				t.Fatal(err)
			}
			var others atomic.Int64
			var wg sync.WaitGroup
			// cut cuts the next answer the store reads, then lets other
			// writers take from the key, then disarms (a run cut again
			// is sent again: that is fine).
			cut := func() {
				before := p.Cuts()
				p.CutAfter(1)
				wg.Add(1)
				go func() {
					defer wg.Done()
					for p.Cuts() == before {
						time.Sleep(20 * time.Microsecond)
					}
					for range 3 {
						if _, _, err := other.Add(ctx, "stock", -1, cas.AtLeast(0)); err != nil {
							t.Errorf("other writer: %v", err)
						}
						others.Add(1)
					}
					p.CutAfter(0)
				}()
			}
			var armed atomic.Bool
			if !proc {
				// The hook is global: armed is false for the others' commits.
				restore := sqlcas.SetBeforeCommitHook(func() {
					if armed.Swap(false) {
						cut()
					}
				})
				defer restore()
			}
			for i := range 5 {
				cuts := p.Cuts()
				if proc {
					cut() // the CALL is the next request
				} else {
					armed.Store(true)
				}
				left, ver, err := store.Add(ctx, "stock", -10, cas.AtLeast(0))
				if err != nil || ver == 0 || left < 0 {
					t.Fatalf("delta %d whose reply was lost: %d at v%d, %v; want it resolved", i, left, ver, err)
				}
				wg.Wait()
				if p.Cuts() == cuts {
					t.Fatalf("delta %d: the proxy cut nothing", i)
				}
			}
			p.CutAfter(0)
			it, err := other.Get(ctx, "stock")
			if err != nil {
				t.Fatal(err)
			}
			if want := 1000 - 50 - others.Load(); string(it.Value) != strconv.FormatInt(want, 10) {
				t.Fatalf("stock = %s after 5 deltas of -10 whose replies were lost and %d of -1, want %d: a delta applied twice or not at all", it.Value, others.Load(), want)
			}
		})
	}
}

// TestDeltaLateFirstSendAfterARefusal holds a delta's CALL up on its way
// while the client's read fails, so Add sends it again under its write
// id, and the bound refuses that send. The value then moves, and the
// first CALL reaches the server where the bound would let it through.
// The refusal was recorded under the delta's id, so that CALL fails on
// the record and applies nothing: the caller was told "refused", and
// nothing was written.
func TestDeltaLateFirstSendAfterARefusal(t *testing.T) {
	ctx := context.Background()
	direct := mysqltest.Database(t)
	other := storeOn(t, mysqltest.Open(t, direct), sqlcas.Config{Dialect: sqlcas.MySQL})
	var m connfault.Marker
	held := direct.Clone()
	held.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return m.Wrap(c, errors.New("connfault: injected")), nil
	}
	store, err := sqlcas.New(mysqltest.Open(t, held), sqlcas.Config{Dialect: sqlcas.MySQL})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := other.Add(ctx, "late-m", 5, cas.Bounds{}); err != nil {
		t.Fatal(err)
	}
	m.SendLate("late-m")
	if _, _, err := store.Add(ctx, "late-m", -10, cas.AtLeast(0)); !errors.Is(err, cas.ErrBound) || m.Fired() != 1 {
		t.Fatalf("delta whose first CALL was held up: %v (fired %d); want ErrBound from the CALL made again", err, m.Fired())
	}
	deltatest.WantLateSendAppliesNothing(t, other, "late-m", 100, 105, m.Release)
}
