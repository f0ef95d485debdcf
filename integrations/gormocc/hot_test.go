package gormocc_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"

	"gorm.io/driver/postgres"
	"gorm.io/gorm"

	"github.com/occkit/occkit/integrations/gormocc"
	"github.com/occkit/occkit/occ"
)

// TestUpdateHotRow: 16 goroutines × 50 decrements of one row through
// gormocc.Update, at default options and with a shared combiner: no call
// gives up (a queueing lock would have served each), the stock ends
// exact, every call gets back its own decrement, and the combiner saves
// fewer times than it updates. The per-call retry loop gormocc.Update had
// before gave up on some of the calls at default options.
func TestUpdateHotRow(t *testing.T) {
	const workers, ops = 16, 50
	for _, mode := range []struct {
		name string
		cb   *occ.Combiner
	}{{"defaults", nil}, {"combined", occ.NewCombiner()}} {
		t.Run(mode.name, func(t *testing.T) {
			each(t, func(t *testing.T, db *gorm.DB) {
				ctx := context.Background()
				it := Item{Name: "lamp", Stock: workers * ops}
				if err := db.Create(&it).Error; err != nil {
					t.Fatal(err)
				}
				var opts []occ.Option
				if mode.cb != nil {
					opts = append(opts, occ.WithCombiner(mode.cb))
				}
				seen := make([]atomic.Bool, workers*ops)
				var failed atomic.Int64
				var wg sync.WaitGroup
				for range workers {
					wg.Go(func() {
						for range ops {
							got, err := gormocc.Update(ctx, db, Item{ID: it.ID}, func(m *Item) error {
								m.Stock--
								return nil
							}, opts...)
							if err != nil {
								if failed.Add(1) == 1 {
									t.Errorf("Update: %v", err)
								}
								continue
							}
							if got.Stock < 0 || got.Stock >= workers*ops || seen[got.Stock].Swap(true) {
								t.Errorf("a call got back stock %d: not its own decrement", got.Stock)
							}
						}
					})
				}
				wg.Wait()
				if n := failed.Load(); n > 0 {
					t.Fatalf("%d of %d calls failed", n, workers*ops)
				}
				var final Item
				if err := db.Take(&final, it.ID).Error; err != nil || final.Stock != 0 {
					t.Fatalf("stock %d (%v) after %d decrements of %d", final.Stock, err, workers*ops, workers*ops)
				}
				if mode.cb != nil {
					if st := mode.cb.Stats(); st.Writes >= st.Updates {
						t.Fatalf("combiner %+v: nothing combined", st)
					}
				}
			})
		})
	}
}

// TestUpdateHotRowAcrossProcesses: four *gorm.DB on one PostgreSQL
// database stand for four processes (their calls take no turns with each
// other's); 16 goroutines × 25 decrements of one row at default options.
// No call may give up: a call that keeps losing to the other "processes"
// holds the row (SELECT ... FOR UPDATE) for one attempt.
func TestUpdateHotRowAcrossProcesses(t *testing.T) {
	const workers, ops = 16, 25
	first := openPostgres(t)
	dsn := first.Dialector.(*postgres.Dialector).Config.DSN
	dbs := []*gorm.DB{first}
	for range 3 {
		dbs = append(dbs, setup(t, postgres.Open(dsn)))
	}
	ctx := context.Background()
	it := Item{Name: "lamp", Stock: workers * ops}
	if err := first.Create(&it).Error; err != nil {
		t.Fatal(err)
	}
	var failed atomic.Int64
	var wg sync.WaitGroup
	for i := range workers {
		db := dbs[i%len(dbs)]
		wg.Go(func() {
			for range ops {
				if _, err := gormocc.Update(ctx, db, Item{ID: it.ID}, func(m *Item) error {
					m.Stock--
					return nil
				}); err != nil {
					if failed.Add(1) == 1 {
						t.Errorf("Update: %v", err)
					}
				}
			}
		})
	}
	wg.Wait()
	var final Item
	if err := first.Take(&final, it.ID).Error; err != nil || final.Stock != int(failed.Load()) {
		t.Fatalf("stock %d (%v), want %d (the failed calls')", final.Stock, err, failed.Load())
	}
	if n := failed.Load(); n > 0 {
		t.Fatalf("%d of %d calls failed", n, workers*ops)
	}
}
