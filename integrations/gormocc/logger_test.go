package gormocc_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/glebarez/sqlite"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/integrations/gormocc"
	"github.com/occkit/occkit/occ"
)

// logBuffer is a logger.Writer that keeps what it is given.
type logBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (w *logBuffer) Printf(format string, args ...any) {
	w.mu.Lock()
	defer w.mu.Unlock()
	fmt.Fprintf(&w.b, format+"\n", args...)
}

func (w *logBuffer) take() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	s := w.b.String()
	w.b.Reset()
	return s
}

// TestQuietConflicts: GORM's logger prints a stale Save as an error with
// its SQL; through QuietConflicts it prints nothing at the Warn level,
// the statement without the error at the Info level (db.Debug()), and
// other errors as before.
func TestQuietConflicts(t *testing.T) {
	for _, quiet := range []bool{false, true} {
		t.Run(fmt.Sprintf("quiet=%v", quiet), func(t *testing.T) {
			var buf logBuffer
			var l logger.Interface = logger.New(&buf, logger.Config{LogLevel: logger.Warn, ParameterizedQueries: true})
			if quiet {
				l = gormocc.QuietConflicts(l)
			}
			db := setupWith(t, sqlite.Open(filepath.Join(t.TempDir(), "log.db")), &gorm.Config{Logger: l})
			it := Item{Name: "teapot", Stock: 10}
			if err := db.Create(&it).Error; err != nil {
				t.Fatal(err)
			}
			stale := it
			it.Stock--
			if err := db.Save(&it).Error; err != nil {
				t.Fatal(err)
			}
			buf.take()

			stale.Name = "kettle"
			if err := db.Save(&stale).Error; !errors.Is(err, cas.ErrConflict) {
				t.Fatalf("stale save: %v, want a conflict", err)
			}
			logged := buf.take()
			if quiet != (logged == "") {
				t.Errorf("a conflict at the Warn level logged %q", logged)
			}
			if !quiet && !strings.Contains(logged, "version conflict") {
				t.Errorf("GORM's own logger did not log the conflict as an error: %q", logged)
			}

			// db.Debug() switches the logger to Info (LogMode): the
			// statement is logged, the conflict still not as an error.
			if err := db.Debug().Save(&stale).Error; !errors.Is(err, cas.ErrConflict) {
				t.Fatalf("stale save: %v, want a conflict", err)
			}
			logged = buf.take()
			if !strings.Contains(logged, "UPDATE") {
				t.Errorf("at the Info level the statement was not logged: %q", logged)
			}
			if quiet == strings.Contains(logged, "version conflict") {
				t.Errorf("at the Info level: %q", logged)
			}
			if quiet && strings.Contains(logged, "kettle") {
				t.Errorf("ParameterizedQueries was lost: the value is in %q", logged)
			}

			// Any other error is logged.
			if err := db.Exec(`INSERT INTO no_such_table VALUES (1)`).Error; err == nil {
				t.Fatal("insert into a missing table succeeded")
			}
			if logged := buf.take(); !strings.Contains(logged, "no_such_table") {
				t.Errorf("another error was not logged: %q", logged)
			}
		})
	}
}

// TestQuietConflictsUpdate: the conflicts gormocc.Update meets and
// retries at a hot row, which GORM's logger prints as errors, print
// nothing through QuietConflicts.
func TestQuietConflictsUpdate(t *testing.T) {
	for _, quiet := range []bool{false, true} {
		t.Run(fmt.Sprintf("quiet=%v", quiet), func(t *testing.T) {
			var buf logBuffer
			var l logger.Interface = logger.New(&buf, logger.Config{LogLevel: logger.Warn})
			if quiet {
				l = gormocc.QuietConflicts(l)
			}
			db := setupWith(t, sqlite.Open(filepath.Join(t.TempDir(), "hot.db")+"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)"),
				&gorm.Config{Logger: l})
			if err := db.Create(&Item{ID: 1, Name: "teapot"}).Error; err != nil {
				t.Fatal(err)
			}
			// Rounds of 4 writers until the row has seen a conflict.
			var conflicts atomic.Int64
			count := occ.WithObserver(occ.ObserverFuncs{Attempt: func(_ context.Context, a occ.Attempt) {
				if a.Outcome == occ.OutcomeConflict {
					conflicts.Add(1)
				}
			}})
			ctx := context.Background()
			for round := 0; conflicts.Load() == 0 && round < 20; round++ {
				var wg sync.WaitGroup
				for range 4 {
					wg.Go(func() {
						for range 10 {
							if _, err := gormocc.Update(ctx, db, Item{ID: 1}, func(it *Item) error {
								it.Stock++
								return nil
							}, count); err != nil {
								t.Error(err)
							}
						}
					})
				}
				wg.Wait()
			}
			if conflicts.Load() == 0 {
				t.Skip("no conflict in 20 rounds of 4 writers")
			}
			logged := strings.Count(buf.take(), "version conflict")
			t.Logf("%d conflicts retried, %d logged", conflicts.Load(), logged)
			if quiet != (logged == 0) {
				t.Errorf("%d conflicts retried, %d logged as errors", conflicts.Load(), logged)
			}
		})
	}
}

// A stale Save, which GORM's logger would print as an error with its
// SQL, prints nothing through QuietConflicts; the caller still gets the
// conflict.
func ExampleQuietConflicts() {
	dir, _ := os.MkdirTemp("", "gormocc")
	defer os.RemoveAll(dir)
	gormLog := logger.New(log.New(os.Stdout, "\r\n", log.LstdFlags), logger.Config{LogLevel: logger.Warn}) // as logger.Default
	db, err := gorm.Open(sqlite.Open(filepath.Join(dir, "shop.db")), &gorm.Config{Logger: gormocc.QuietConflicts(gormLog)})
	if err != nil {
		panic(err)
	}
	if sqlDB, err := db.DB(); err == nil {
		defer sqlDB.Close()
	}
	type Product struct {
		ID      uint
		Stock   int
		Version gormocc.Version
	}
	_ = db.Use(gormocc.Plugin{})
	_ = db.AutoMigrate(&Product{})
	db.Create(&Product{ID: 1, Stock: 10})

	var a, b Product
	db.First(&a, 1)
	db.First(&b, 1)
	a.Stock--
	db.Save(&a)
	b.Stock--
	err = db.Save(&b).Error // stale: a conflict, not logged
	fmt.Println(errors.Is(err, cas.ErrConflict))
	// Output: true
}
