package sqlcas_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/stdlib"
	_ "modernc.org/sqlite" // registers "sqlite"

	"github.com/occkit/occkit/adapters/sqlcas"
	"github.com/occkit/occkit/internal/mysqltest"
	"github.com/occkit/occkit/internal/pgtest"
)

// dialects are the three databases every test of the package runs on.
var dialects = []sqlcas.Dialect{sqlcas.MySQL, sqlcas.SQLite, sqlcas.Postgres}

// sqliteDSN is the DSN of a SQLite file database in WAL mode with a busy
// timeout, as the package documentation recommends.
func sqliteDSN(path string) string {
	return "file:" + path + "?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)&_txlock=immediate"
}

// openSQLite opens a fresh SQLite file database (several connections).
func openSQLite(t testing.TB) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", sqliteDSN(filepath.Join(t.TempDir(), "test.db")))
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(8)
	t.Cleanup(func() { _ = db.Close() })
	if err := db.PingContext(context.Background()); err != nil {
		t.Fatal(err)
	}
	return db
}

// openPostgres opens a *sql.DB (pgx's stdlib) over a fresh schema.
func openPostgres(t testing.TB) *sql.DB {
	t.Helper()
	cfg := pgtest.Config(t)
	db := stdlib.OpenDB(*cfg.ConnConfig)
	t.Cleanup(func() { _ = db.Close() })
	if err := db.PingContext(context.Background()); err != nil {
		t.Fatal(err)
	}
	return db
}

// openDB opens a fresh database of dialect d: MariaDB (OCCKIT_MYSQL_DSN),
// a SQLite file, PostgreSQL (OCCKIT_PG_URL).
func openDB(t testing.TB, d sqlcas.Dialect, configure ...func(*mysql.Config)) *sql.DB {
	t.Helper()
	switch d {
	case sqlcas.MySQL:
		return mysqltest.DB(t, configure...)
	case sqlcas.SQLite:
		return openSQLite(t)
	}
	return openPostgres(t)
}

// newStore returns a store on a fresh database of dialect d, its table
// created.
func newStore(t testing.TB, d sqlcas.Dialect, cfg sqlcas.Config) *sqlcas.Store {
	t.Helper()
	cfg.Dialect = d
	return storeOn(t, openDB(t, d), cfg)
}

// storeOn returns a store with cfg on db, its tables created.
func storeOn(t testing.TB, db *sql.DB, cfg sqlcas.Config) *sqlcas.Store {
	t.Helper()
	s, err := sqlcas.New(db, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.CreateTable(context.Background()); err != nil {
		t.Fatal(err)
	}
	return s
}

// eachDialect runs f as a subtest per dialect.
func eachDialect(t *testing.T, f func(t *testing.T, d sqlcas.Dialect)) {
	for _, d := range dialects {
		t.Run(d.String(), func(t *testing.T) { f(t, d) })
	}
}
