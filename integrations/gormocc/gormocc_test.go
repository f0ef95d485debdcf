package gormocc_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"path/filepath"
	"sync"
	"testing"

	"github.com/glebarez/sqlite"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/integrations/gormocc"
	"github.com/occkit/occkit/internal/pgtest"
	"github.com/occkit/occkit/occ"
)

type Item struct {
	ID      uint
	Name    string
	Stock   int
	Version gormocc.Version
}

type Doc struct {
	Slug    string `gorm:"primaryKey"`
	Body    string
	Version gormocc.Version
	Deleted gorm.DeletedAt
}

// Plain has no version field: the plugin leaves it alone.
type Plain struct {
	ID    uint
	Count int
}

// databases returns the databases every test runs on: SQLite (pure Go) in
// a temporary file, and PostgreSQL at OCCKIT_PG_URL in a fresh schema.
func databases(t *testing.T) map[string]func(t *testing.T) *gorm.DB {
	return map[string]func(t *testing.T) *gorm.DB{
		"sqlite":   openSQLite,
		"postgres": openPostgres,
	}
}

func openSQLite(t *testing.T) *gorm.DB {
	dsn := filepath.Join(t.TempDir(), "test.db") + "?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)"
	return setup(t, sqlite.Open(dsn))
}

func openPostgres(t *testing.T) *gorm.DB {
	u, err := url.Parse(pgtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("search_path", pgtest.Schema(t))
	u.RawQuery = q.Encode()
	return setup(t, postgres.Open(u.String()))
}

func setup(t *testing.T, d gorm.Dialector) *gorm.DB {
	t.Helper()
	return setupWith(t, d, &gorm.Config{Logger: logger.Discard})
}

// setupWith opens d with cfg, closes it at the test's end, registers the
// plugin and migrates the test models.
func setupWith(t *testing.T, d gorm.Dialector, cfg *gorm.Config) *gorm.DB {
	t.Helper()
	db, err := gorm.Open(d, cfg)
	if err != nil {
		t.Fatal(err)
	}
	sqlDB, err := db.DB()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sqlDB.Close() })
	if err := db.Use(gormocc.Plugin{}); err != nil {
		t.Fatal(err)
	}
	if err := db.AutoMigrate(&Item{}, &Doc{}, &Plain{}); err != nil {
		t.Fatal(err)
	}
	return db
}

func each(t *testing.T, test func(t *testing.T, db *gorm.DB)) {
	for name, open := range databases(t) {
		t.Run(name, func(t *testing.T) { test(t, open(t)) })
	}
}

func wantConflict(t *testing.T, what string, err error, expected gormocc.Version, current gormocc.Version) *cas.ConflictError {
	t.Helper()
	var ce *cas.ConflictError
	if !errors.Is(err, cas.ErrConflict) || !errors.As(err, &ce) {
		t.Fatalf("%s: error %v, want a *cas.ConflictError", what, err)
	}
	if ce.Expected != expected.CAS() || !ce.HasCurrent || ce.Current.Version != current.CAS() {
		t.Fatalf("%s: %+v, want expected %d, current %d", what, ce, expected, current)
	}
	return ce
}

// TestStaleSave: two copies of a row read at the same version; the second
// Save fails with a conflict naming the row and both versions, changes
// nothing, and succeeds once the row is read again. Without the plugin the
// second Save overwrites the first.
func TestStaleSave(t *testing.T) {
	each(t, func(t *testing.T, db *gorm.DB) {
		it := Item{Name: "teapot", Stock: 10}
		if err := db.Create(&it).Error; err != nil {
			t.Fatal(err)
		}
		if it.Version == 0 {
			t.Fatal("Create set no version")
		}
		var a, b Item
		db.First(&a, it.ID)
		db.First(&b, it.ID)
		if a.Version != it.Version || b.Version != it.Version {
			t.Fatalf("read versions %d, %d, want %d", a.Version, b.Version, it.Version)
		}

		a.Stock = 9
		if err := db.Save(&a).Error; err != nil {
			t.Fatalf("first save: %v", err)
		}
		if a.Version != it.Version+1 {
			t.Fatalf("after save the model holds version %d, want %d", a.Version, it.Version+1)
		}

		b.Name = "kettle"
		res := db.Save(&b)
		ce := wantConflict(t, "stale save", res.Error, it.Version, a.Version)
		if ce.Key != fmt.Sprintf("items/%d", it.ID) {
			t.Fatalf("conflict key %q", ce.Key)
		}
		if b.Version != it.Version {
			t.Fatalf("a refused save changed the model's version to %d", b.Version)
		}
		var row Item
		db.First(&row, it.ID)
		if row.Name != "teapot" || row.Stock != 9 || row.Version != a.Version {
			t.Fatalf("row %+v after a refused save, want the first save's", row)
		}

		db.First(&b, it.ID)
		b.Name = "kettle"
		if err := db.Save(&b).Error; err != nil {
			t.Fatalf("save after re-read: %v", err)
		}
		db.First(&row, it.ID)
		if row.Name != "kettle" || row.Stock != 9 {
			t.Fatalf("row %+v, want both changes", row)
		}
	})
}

// TestUpdatesAndDelete: Updates (map and struct), Update and
// UpdateColumn are conditional and refresh the version; Delete is
// conditional; a deleted row's conflict matches cas.ErrNotFound.
func TestUpdatesAndDelete(t *testing.T) {
	each(t, func(t *testing.T, db *gorm.DB) {
		it := Item{Name: "mug", Stock: 3}
		db.Create(&it)
		stale := it

		steps := []struct {
			name  string
			write func(m *Item) *gorm.DB
		}{
			{"Updates map", func(m *Item) *gorm.DB { return db.Model(m).Updates(map[string]any{"stock": 2}) }},
			{"Updates struct", func(m *Item) *gorm.DB { return db.Model(m).Updates(Item{Name: "cup"}) }},
			{"Update", func(m *Item) *gorm.DB { return db.Model(m).Update("stock", 1) }},
			{"UpdateColumn", func(m *Item) *gorm.DB { return db.Model(m).UpdateColumn("name", "bowl") }},
			{"Select Updates", func(m *Item) *gorm.DB { return db.Model(m).Select("name").Updates(Item{Name: "jar"}) }},
		}
		for _, s := range steps {
			before := it.Version
			if err := s.write(&it).Error; err != nil {
				t.Fatalf("%s: %v", s.name, err)
			}
			if it.Version != before+1 {
				t.Fatalf("%s: model version %d, want %d", s.name, it.Version, before+1)
			}
			var row Item
			db.First(&row, it.ID)
			if row.Version != it.Version {
				t.Fatalf("%s: row version %d, model %d", s.name, row.Version, it.Version)
			}
			cp := stale
			wantConflict(t, s.name+" with a stale version", s.write(&cp).Error, stale.Version, it.Version)
		}
		var row Item
		db.First(&row, it.ID)
		if row.Name != "jar" || row.Stock != 1 {
			t.Fatalf("row %+v", row)
		}

		wantConflict(t, "stale delete", db.Delete(&stale).Error, stale.Version, it.Version)
		if err := db.Delete(&it).Error; err != nil {
			t.Fatalf("delete: %v", err)
		}
		err := db.Model(&it).Update("stock", 5).Error
		ce := wantConflict(t, "update of a deleted row", err, it.Version, 0)
		if !errors.Is(ce, cas.ErrNotFound) {
			t.Fatal("conflict on a deleted row does not match cas.ErrNotFound")
		}
		wantConflict(t, "delete of a deleted row", db.Delete(&it).Error, it.Version, 0)

		// Re-created under the same key, the row gets a version it never had.
		again := Item{ID: it.ID, Name: "new"}
		if err := db.Create(&again).Error; err != nil {
			t.Fatal(err)
		}
		if again.Version <= it.Version {
			t.Fatalf("re-created row has version %d, not after the old %d", again.Version, it.Version)
		}
		wantConflict(t, "write with a version of the deleted row", db.Save(&it).Error, it.Version, again.Version)
	})
}

// TestSoftDelete: a soft-deleted row is gone for a stale writer.
func TestSoftDelete(t *testing.T) {
	each(t, func(t *testing.T, db *gorm.DB) {
		d := Doc{Slug: "readme", Body: "v1"}
		if err := db.Create(&d).Error; err != nil {
			t.Fatal(err)
		}
		stale := d
		if err := db.Delete(&d).Error; err != nil {
			t.Fatalf("soft delete: %v", err)
		}
		stale.Body = "v2"
		err := db.Save(&stale).Error
		if !errors.Is(err, cas.ErrConflict) || !errors.Is(err, cas.ErrNotFound) {
			t.Fatalf("save of a soft-deleted row: %v, want a conflict matching cas.ErrNotFound", err)
		}
		var n int64
		db.Unscoped().Model(&Doc{}).Where("slug = ? AND body = ?", "readme", "v1").Count(&n)
		if n != 1 {
			t.Fatal("the soft-deleted row was changed")
		}
	})
}

// TestRefusals: writes that cannot be checked are refused or move the
// version.
func TestRefusals(t *testing.T) {
	each(t, func(t *testing.T, db *gorm.DB) {
		a, b := Item{Name: "a", Stock: 1}, Item{Name: "b", Stock: 1}
		db.Create(&a)
		db.Create(&b)

		unread := Item{ID: a.ID, Name: "blind"}
		if err := db.Save(&unread).Error; !errors.Is(err, gormocc.ErrNoVersion) {
			t.Fatalf("save without a version: %v, want ErrNoVersion", err)
		}
		if err := db.Delete(&Item{ID: a.ID}).Error; !errors.Is(err, gormocc.ErrNoVersion) {
			t.Fatalf("delete without a version: %v, want ErrNoVersion", err)
		}
		if err := db.Save(&[]Item{a, b}).Error; !errors.Is(err, gormocc.ErrUpsert) {
			t.Fatalf("save of a slice: %v, want ErrUpsert", err)
		}

		// A batch update by condition moves every version it touches, so
		// that holders of the old versions conflict.
		if err := db.Model(&Item{}).Where("stock > ?", 0).Update("stock", 0).Error; err != nil {
			t.Fatalf("batch update: %v", err)
		}
		wantConflict(t, "save after a batch update", db.Save(&a).Error, a.Version, a.Version+1)

		// Models without a Version field are untouched.
		p := Plain{Count: 1}
		db.Create(&p)
		p2 := p
		p.Count, p2.Count = 2, 3
		if err := db.Save(&p).Error; err != nil {
			t.Fatal(err)
		}
		if err := db.Save(&p2).Error; err != nil {
			t.Fatalf("plain model: %v", err)
		}
	})
}

// TestConcurrentWriters: writers that each decrement one row's stock with
// gormocc.Update lose nothing: the stock ends at zero with exactly one
// accepted decrement per unit and one version per write.
func TestConcurrentWriters(t *testing.T) {
	each(t, func(t *testing.T, db *gorm.DB) {
		ctx := context.Background()
		const writers, units = 6, 60
		it := Item{Name: "hot", Stock: units}
		if err := db.Create(&it).Error; err != nil {
			t.Fatal(err)
		}
		errSoldOut := errors.New("sold out")
		var (
			wg       sync.WaitGroup
			mu       sync.Mutex
			accepted int
			firstErr error
		)
		for range writers {
			wg.Go(func() {
				for {
					_, err := gormocc.Update(ctx, db, Item{ID: it.ID}, func(m *Item) error {
						if m.Stock == 0 {
							return errSoldOut
						}
						m.Stock--
						return nil
					}, occ.WithMaxAttempts(1000))
					mu.Lock()
					switch {
					case err == nil:
						accepted++
					case !errors.Is(err, errSoldOut) && firstErr == nil:
						firstErr = err
					}
					mu.Unlock()
					if err != nil {
						return
					}
				}
			})
		}
		wg.Wait()
		if firstErr != nil {
			t.Fatal(firstErr)
		}
		var row Item
		db.First(&row, it.ID)
		if row.Stock != 0 || accepted != units {
			t.Fatalf("stock %d, %d decrements accepted, want 0 and %d", row.Stock, accepted, units)
		}
		if row.Version != it.Version+units {
			t.Fatalf("version %d, want %d (one per write)", row.Version, it.Version+units)
		}
	})
}

func TestUpdateHelper(t *testing.T) {
	each(t, func(t *testing.T, db *gorm.DB) {
		ctx := context.Background()
		_, err := gormocc.Update(ctx, db, Item{ID: 999}, func(*Item) error { return nil })
		if !errors.Is(err, cas.ErrNotFound) || !errors.Is(err, gorm.ErrRecordNotFound) {
			t.Fatalf("missing row: %v", err)
		}
		d := Doc{Slug: "s", Body: "x"}
		db.Create(&d)
		got, err := gormocc.Update(ctx, db, Doc{Slug: "s", Body: "ignored"}, func(m *Doc) error {
			m.Body += "y"
			return nil
		})
		if err != nil || got.Body != "xy" || got.Version != d.Version+1 {
			t.Fatalf("Update: %+v, %v", got, err)
		}
		// A conflict from another writer inside the loop is retried.
		calls := 0
		got, err = gormocc.Update(ctx, db, Doc{Slug: "s"}, func(m *Doc) error {
			calls++
			if calls == 1 {
				other := *m
				other.Body = "other"
				if err := db.Save(&other).Error; err != nil {
					return err
				}
			}
			m.Body += "!"
			return nil
		})
		if err != nil || calls != 2 || got.Body != "other!" {
			t.Fatalf("Update with a meddler: %+v, %d calls, %v", got, calls, err)
		}
		plain := db.Session(&gorm.Session{NewDB: true})
		noPlugin, _ := gorm.Open(plain.Dialector, &gorm.Config{Logger: logger.Discard})
		if _, err := gormocc.Update(ctx, noPlugin, Doc{Slug: "s"}, func(*Doc) error { return nil }); err == nil {
			t.Fatal("Update without the plugin did not fail")
		}
	})
}
