package sqlcas_test

import (
	"context"
	"database/sql"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/occkit/occkit/adapters/sqlcas"
	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/internal/cachebench"
	"github.com/occkit/occkit/occ"
)

// BenchmarkOverhead measures what the store adds to the conditional write
// a programmer would write by hand over database/sql, side by side in one
// run (the machines are shared and noisy: read the ratio, not the times).
// Each iteration runs one hand-written swap of one key and one
// Store.CompareAndSwap of another, alternately, and times each.
//
//	go test -run '^$' -bench Overhead -benchtime 3000x ./adapters/sqlcas/
//
// The hand-written swap is
//
//	UPDATE occkit_cas SET value = ?, version = version + 1, write_id = ?
//	WHERE k = ? AND version = ? AND value IS NOT NULL
//
// checked by its rows affected (PostgreSQL: ... RETURNING version), on the
// store's own table.
func BenchmarkOverhead(b *testing.B) {
	for _, d := range dialects {
		b.Run(d.String(), func(b *testing.B) {
			ctx := context.Background()
			s := newStore(b, d, sqlcas.Config{})
			db := s.DB()
			hv, err := s.CompareAndSwap(ctx, "hand", 0, []byte("0"))
			if err != nil {
				b.Fatal(err)
			}
			sv, err := s.CompareAndSwap(ctx, "store", 0, []byte("0"))
			if err != nil {
				b.Fatal(err)
			}
			q := `UPDATE occkit_cas SET value = ?, version = version + 1, write_id = ? WHERE k = ? AND version = ? AND value IS NOT NULL`
			if d == sqlcas.Postgres {
				q = `UPDATE occkit_cas SET value = $1, version = version + 1, write_id = $2 WHERE k = $3 AND version = $4 AND value IS NOT NULL RETURNING version`
			}
			id := make([]byte, 16)
			value := []byte("value")
			if d == sqlcas.Postgres && os.Getenv("OCCKIT_BENCH_SAME_STATEMENT") != "" {
				// The store's own statement (the write and, when it
				// matched nothing, the current row, in one round trip),
				// sent by hand: what is left is the Go side's cost.
				text, args := s.SwapStatement()
				hand := func() {
					var v, cv sql.NullInt64
					var cval []byte
					var ctok sql.NullInt64
					var gone sql.NullBool
					if err := db.QueryRowContext(ctx, text, args("hand", value, id, int64(hv))...).Scan(&v, &cv, &cval, &ctok, &gone); err != nil {
						b.Fatal(err)
					}
					if !v.Valid {
						b.Fatal("the hand-sent swap did not apply")
					}
					hv = cas.Version(v.Int64)
				}
				runOverhead(b, hand, func() error {
					var err error
					sv, err = s.CompareAndSwap(ctx, "store", sv, value)
					return err
				})
				return
			}
			hand := func() {
				if d == sqlcas.Postgres {
					var v int64
					if err := db.QueryRowContext(ctx, q, value, id, "hand", int64(hv)).Scan(&v); err != nil {
						b.Fatal(err)
					}
					hv = cas.Version(v)
					return
				}
				res, err := db.ExecContext(ctx, q, value, id, "hand", int64(hv))
				if err != nil {
					b.Fatal(err)
				}
				if n, _ := res.RowsAffected(); n != 1 {
					b.Fatalf("hand-written swap matched %d rows", n)
				}
				hv++
			}
			var handT, storeT time.Duration
			b.ResetTimer()
			for i := range b.N {
				// Alternate which goes first, so that neither always
				// follows the other.
				if i%2 == 0 {
					t0 := time.Now()
					hand()
					t1 := time.Now()
					sv, err = s.CompareAndSwap(ctx, "store", sv, value)
					storeT += time.Since(t1)
					handT += t1.Sub(t0)
				} else {
					t0 := time.Now()
					sv, err = s.CompareAndSwap(ctx, "store", sv, value)
					t1 := time.Now()
					hand()
					handT += time.Since(t1)
					storeT += t1.Sub(t0)
				}
				if err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(handT.Nanoseconds())/float64(b.N), "hand-ns/op")
			b.ReportMetric(float64(storeT.Nanoseconds())/float64(b.N), "sqlcas-ns/op")
			b.ReportMetric(float64(storeT)/float64(handT), "sqlcas/hand")
		})
	}
}

// runOverhead alternates hand and store calls b.N times and reports their
// times and ratio.
func runOverhead(b *testing.B, hand func(), store func() error) {
	var handT, storeT time.Duration
	b.ResetTimer()
	for i := range b.N {
		t0 := time.Now()
		if i%2 == 0 {
			hand()
			t1 := time.Now()
			if err := store(); err != nil {
				b.Fatal(err)
			}
			storeT += time.Since(t1)
			handT += t1.Sub(t0)
		} else {
			if err := store(); err != nil {
				b.Fatal(err)
			}
			t1 := time.Now()
			hand()
			handT += time.Since(t1)
			storeT += t1.Sub(t0)
		}
	}
	b.ReportMetric(float64(handT.Nanoseconds())/float64(b.N), "hand-ns/op")
	b.ReportMetric(float64(storeT.Nanoseconds())/float64(b.N), "sqlcas-ns/op")
	b.ReportMetric(float64(storeT)/float64(handT), "sqlcas/hand")
}

// BenchmarkModifyVsUpdate measures Table.Modify of rows of an
// application's table against occ.Update over the Store, one key after
// another of 1000, alternately in one run (read the ratio): the
// repository path's own cost where nothing conflicts.
//
//	go test -run '^$' -bench ModifyVsUpdate -benchtime 3000x ./adapters/sqlcas/
func BenchmarkModifyVsUpdate(b *testing.B) {
	type row struct {
		ID      string      `db:"id"`
		N       int64       `db:"n"`
		Version cas.Version `db:"version"`
	}
	ctx := context.Background()
	s := newStore(b, sqlcas.SQLite, sqlcas.Config{})
	db := s.DB()
	if _, err := db.ExecContext(ctx, `CREATE TABLE bench_rows (id TEXT PRIMARY KEY, n INTEGER NOT NULL, version INTEGER NOT NULL)`); err != nil {
		b.Fatal(err)
	}
	tbl, err := sqlcas.NewTable[row](db, sqlcas.TableConfig{Dialect: sqlcas.SQLite, Table: "bench_rows"})
	if err != nil {
		b.Fatal(err)
	}
	if err := tbl.CreateCounter(ctx); err != nil {
		b.Fatal(err)
	}
	typed := cas.NewTyped(s, cas.JSON[int64]())
	keys := make([]string, 1000)
	for i := range keys {
		keys[i] = "k" + strconv.Itoa(i)
		if _, err := tbl.Insert(ctx, row{ID: keys[i]}); err != nil {
			b.Fatal(err)
		}
		if _, err := s.CompareAndSwap(ctx, keys[i], 0, []byte("0")); err != nil {
			b.Fatal(err)
		}
	}
	var tTable, tStore time.Duration
	b.ResetTimer()
	for i := range b.N {
		k := keys[i%len(keys)]
		modify := func() {
			t0 := time.Now()
			if _, err := tbl.Modify(ctx, k, func(r row, _ bool) (row, error) { r.N++; return r, nil }); err != nil {
				b.Fatal(err)
			}
			tTable += time.Since(t0)
		}
		update := func() {
			t0 := time.Now()
			if _, _, err := occ.Update(ctx, typed, k, func(n int64, _ bool) (int64, error) { return n + 1, nil }); err != nil {
				b.Fatal(err)
			}
			tStore += time.Since(t0)
		}
		// Alternate which goes first: on SQLite the first write after the
		// other's costs about 5 µs more, whichever it is.
		if i%2 == 0 {
			modify()
			update()
		} else {
			update()
			modify()
		}
	}
	b.ReportMetric(float64(tTable.Nanoseconds())/float64(b.N), "modify-ns/op")
	b.ReportMetric(float64(tStore.Nanoseconds())/float64(b.N), "update-ns/op")
	b.ReportMetric(float64(tTable)/float64(tStore), "modify/update")
}

// BenchmarkAdd measures Store.Add per dialect: 8 goroutines over 1000
// keys, each call one delta of +1 with no bound (read the ns/op lines
// side by side; on PostgreSQL a delta that applies is one statement).
//
//	go test -run '^$' -bench 'BenchmarkAdd$' -benchtime 20000x ./adapters/sqlcas/
func BenchmarkAdd(b *testing.B) {
	for _, d := range dialects {
		b.Run(d.String(), func(b *testing.B) {
			ctx := context.Background()
			s := newStore(b, d, sqlcas.Config{})
			keys := make([]string, 1000)
			for i := range keys {
				keys[i] = "a" + strconv.Itoa(i)
				if _, _, err := s.Add(ctx, keys[i], 1, cas.Bounds{}); err != nil {
					b.Fatal(err)
				}
			}
			b.ResetTimer()
			cachebench.Workers(b, 8, func(w, i int) error {
				_, _, err := s.Add(ctx, keys[(w*131+i*7)%len(keys)], 1, cas.Bounds{})
				return err
			})
		})
	}
}
