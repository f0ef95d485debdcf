// Package mysqltest gives tests a real MySQL or MariaDB to work in: the
// server named by OCCKIT_MYSQL_DSN (started by `make test`, see
// scripts/servers/mariadb.sh), a fresh database private to each test,
// dropped when the test ends, and a *sql.DB whose connections work in it.
//
// A test that needs the server and finds OCCKIT_MYSQL_DSN unset fails,
// loudly and with the way to get one: a missing server must never pass for
// a passing test.
package mysqltest

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/occkit/occkit/internal/testenv"
)

// EnvDSN is the environment variable holding the test server's DSN, in
// go-sql-driver/mysql's form (user@tcp(127.0.0.1:3306)/db).
const EnvDSN = "OCCKIT_MYSQL_DSN"

// Config returns the parsed DSN from OCCKIT_MYSQL_DSN, or fails the test.
func Config(t testing.TB) *mysql.Config {
	t.Helper()
	dsn := testenv.Server{Env: EnvDSN, What: "a MySQL or MariaDB server", Script: "mariadb.sh",
		Own: "user:pass@tcp(host:port)/db"}.Lookup(t)
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		t.Fatalf("mysqltest: parse %s: %v", EnvDSN, err)
	}
	return cfg
}

// Database creates a fresh, uniquely named, empty database and returns a
// DSN configuration for it (interpolateParams on, see package sqlcas), after
// letting each configure function adjust it. The database is dropped when
// the test ends.
func Database(t testing.TB, configure ...func(*mysql.Config)) *mysql.Config {
	t.Helper()
	cfg := Config(t)
	name := testenv.UniqueName("occkit_test_")
	admin(t, cfg, "CREATE DATABASE `"+name+"`")
	t.Cleanup(func() { admin(t, cfg, "DROP DATABASE IF EXISTS `"+name+"`") })
	c := cfg.Clone()
	c.DBName = name
	c.InterpolateParams = true
	for _, f := range configure {
		f(c)
	}
	return c
}

// DB opens a *sql.DB over a fresh database (see Database), checks that it
// reaches the server, and closes it when the test ends.
func DB(t testing.TB, configure ...func(*mysql.Config)) *sql.DB {
	t.Helper()
	return Open(t, Database(t, configure...))
}

// Open opens a *sql.DB with cfg, pings it, and closes it when the test
// ends.
func Open(t testing.TB, cfg *mysql.Config) *sql.DB {
	t.Helper()
	connector, err := mysql.NewConnector(cfg)
	if err != nil {
		t.Fatalf("mysqltest: %v", err)
	}
	db := sql.OpenDB(connector)
	t.Cleanup(func() { _ = db.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := db.PingContext(ctx); err != nil {
		t.Fatalf("mysqltest: ping %s: %v", EnvDSN, err)
	}
	return db
}

// admin runs one statement on a connection of its own.
func admin(t testing.TB, cfg *mysql.Config, stmt string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	connector, err := mysql.NewConnector(cfg)
	if err != nil {
		t.Fatalf("mysqltest: %v", err)
	}
	db := sql.OpenDB(connector)
	defer db.Close()
	if _, err := db.ExecContext(ctx, stmt); err != nil {
		t.Fatalf("mysqltest: %s: %v", stmt, err)
	}
}
