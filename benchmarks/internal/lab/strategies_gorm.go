package lab

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/jackc/pgx/v5/stdlib"
	gormsqlite "github.com/libtnb/sqlite"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"
	"gorm.io/gorm/schema"
	moderncsqlite "modernc.org/sqlite"

	"github.com/occkit/occkit/benchmarks/internal/backends"
	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/integrations/gormocc"
)

// The GORM repository path: the cell's data in a model of the
// application's own, read and written with gormocc.Update, on the
// backends GORM reaches here (PostgreSQL, SQLite).

var gormStrategies = []strategySpec{
	{
		Name:      "occ-gorm",
		Kind:      kindOptimistic,
		About:     "gormocc.Update (GORM with gormocc.Plugin and GORM's defaults, each Save in its own transaction) over a model of the application's own (ID, N, gormocc.Version); PostgreSQL through pgx's database/sql driver over the lab's pool, SQLite through github.com/libtnb/sqlite over the backend's connections",
		SingleKey: true,
		OwnTable:  true,
		DefaultOn: func(b string, _ bool) bool { return gormBackends[b] },
		New:       newGormStrategy,
	},
}

// gormBackends are the backends occ-gorm runs on.
var gormBackends = map[string]bool{backends.Postgres: true, backends.SQLite: true}

// The SQLite dialect of GORM: github.com/libtnb/sqlite works over
// modernc.org/sqlite, the pure-Go driver the sqlite backend already uses
// (github.com/glebarez/sqlite, gormocc's tests' dialect, brings a fork of
// it that registers the database/sql driver "sqlite" a second time, which
// panics). Its init turns on three process-wide switches of
// modernc.org/sqlite that are off upstream (strict PRAGMAs, OFD locks,
// fdatasync); they are turned off again here, before any database is
// opened, so that the sqlite backend runs as it would without GORM in the
// binary, for every strategy. MODERNC_SQLITE_OFD_LOCK, when set, still
// decides the locks, as modernc.org/sqlite reads it.
func init() {
	moderncsqlite.StrictPragmas(false)
	_, _ = moderncsqlite.Fdatasync(false)
	if _, set := os.LookupEnv("MODERNC_SQLITE_OFD_LOCK"); !set {
		_, _ = moderncsqlite.OFDLocking(false)
	}
}

// gormRow is the model of occ-gorm's table, <NS>_gorm_rows.
type gormRow struct {
	ID      string `gorm:"primaryKey"`
	N       int64
	Version gormocc.Version
}

// newGormStrategy makes an occ-gorm cell: a *gorm.DB over the backend's
// connections whose tables are named in the cell's namespace, with the
// model's table made and seeded (in a --procs child, the parent's).
func newGormStrategy(ctx context.Context, h *harness) (cellStrategy, error) {
	if !gormBackends[h.Backend.System] {
		return nil, fmt.Errorf("occ-gorm runs on PostgreSQL and SQLite, not on %s: %w", h.Backend.System, errNotApplicable)
	}
	cli := h.Backend
	var dialector gorm.Dialector
	if cli.System == backends.Postgres {
		// database/sql over the lab's pool (its schema, its proxy);
		// closing it leaves the pool open.
		sqlDB := stdlib.OpenDBFromPool(cli.Postgres())
		h.OnClose(func(context.Context) error { return sqlDB.Close() })
		dialector = postgres.New(postgres.Config{Conn: sqlDB})
	} else {
		dialector = gormsqlite.New(gormsqlite.Config{Conn: cli.SQL()})
	}
	db, err := gorm.Open(dialector, &gorm.Config{
		NamingStrategy: schema.NamingStrategy{TablePrefix: h.NS + "_"},
		Logger:         logger.Discard, // its slow-query lines would go to stdout
	})
	if err != nil {
		return nil, err
	}
	if err := db.Use(gormocc.Plugin{}); err != nil {
		return nil, err
	}
	if !h.Attached {
		if err := db.WithContext(ctx).AutoMigrate(&gormRow{}); err != nil {
			return nil, fmt.Errorf("creating the model's table: %w", err)
		}
		h.OnClose(func(ctx context.Context) error { return db.WithContext(ctx).Migrator().DropTable(&gormRow{}) })
		rows := make([]gormRow, len(h.Keys))
		for i, k := range h.Keys {
			rows[i] = gormRow{ID: k, N: h.Cell.Initial}
		}
		if err := db.WithContext(ctx).CreateInBatches(rows, 500).Error; err != nil {
			return nil, fmt.Errorf("seeding %d rows: %w", len(rows), err)
		}
	}
	return gormStrategy{db: db, h: h}, nil
}

// gormStrategy performs an operation as one gormocc.Update of its row.
type gormStrategy struct {
	db *gorm.DB
	h  *harness
}

// Do updates op's row.
func (s gormStrategy) Do(ctx context.Context, w int, op operation) error {
	_, err := gormocc.Update(ctx, s.db, gormRow{ID: op.Keys[0]}, func(m *gormRow) error {
		v := [1]int64{m.N}
		if err := op.Apply(v[:]); err != nil {
			return err
		}
		m.N = v[0]
		return nil
	}, s.h.Options(w)...)
	return err
}

// Close does nothing: the table is dropped after the invariant check.
func (gormStrategy) Close(context.Context) error { return nil }

// Value implements valueReader: the row's N.
func (s gormStrategy) Value(ctx context.Context, key string) (int64, error) {
	var r gormRow
	err := s.db.WithContext(ctx).Take(&r, "id = ?", key).Error
	if errors.Is(err, gorm.ErrRecordNotFound) {
		err = fmt.Errorf("%w: %w", cas.ErrNotFound, err)
	}
	return r.N, err
}
