package sqlcas_test

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/occkit/occkit/adapters/sqlcas"
	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/internal/mysqltest"
)

// TestDeltaLostCommitReply loses the reply to the COMMIT of deltas (they
// applied), and another store takes from the same key before the delta
// can be sent again. Add runs
// each delta again under its write id: the delta table refuses the second
// application, Add returns the recorded outcome, and the stock counts
// every delta once.
func TestDeltaLostCommitReply(t *testing.T) {
	ctx := context.Background()
	direct, viaProxy, p := proxied(t)
	other, err := sqlcas.New(mysqltest.Open(t, direct), sqlcas.Config{Dialect: sqlcas.MySQL})
	if err != nil {
		t.Fatal(err)
	}
	if err := other.CreateTable(ctx); err != nil {
		t.Fatal(err)
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
	var armed atomic.Bool
	restore := sqlcas.SetBeforeCommitHook(func() {
		// Cut the reply to the first COMMIT of each delta, and disarm once
		// the cut happened (a run cut again is sent again: that is fine).
		if !armed.Swap(false) {
			return
		}
		before := p.Cuts()
		p.CutAfter(1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for p.Cuts() == before {
				time.Sleep(20 * time.Microsecond)
			}
			// Other writers take from the key before the delta is sent
			// again (the hook is global: armed is false for their commits).
			for range 3 {
				if _, _, err := other.Add(ctx, "stock", -1, cas.AtLeast(0)); err != nil {
					t.Errorf("other writer: %v", err)
				}
				others.Add(1)
			}
			p.CutAfter(0)
		}()
	})
	for i := range 5 {
		cuts := p.Cuts()
		armed.Store(true)
		left, ver, err := store.Add(ctx, "stock", -10, cas.AtLeast(0))
		if err != nil || ver == 0 || left < 0 {
			t.Fatalf("delta %d whose COMMIT reply was lost: %d at v%d, %v; want it resolved", i, left, ver, err)
		}
		if p.Cuts() == cuts {
			t.Fatalf("delta %d: the proxy cut nothing", i)
		}
	}
	wg.Wait()
	restore()
	p.CutAfter(0)
	it, err := other.Get(ctx, "stock")
	if err != nil {
		t.Fatal(err)
	}
	if want := 1000 - 50 - others.Load(); string(it.Value) != strconv.FormatInt(want, 10) {
		t.Fatalf("stock = %s after 5 deltas of -10 whose replies were lost and %d of -1, want %d: a delta applied twice or not at all", it.Value, others.Load(), want)
	}
}
