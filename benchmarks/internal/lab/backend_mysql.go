package lab

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/occkit/occkit/adapters/sqlcas"
	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/hybrid"
	"github.com/occkit/occkit/internal/servers"
)

// EnvMySQLDSN names the MySQL or MariaDB server the lab uses (a
// go-sql-driver/mysql DSN); when it is unset, the lab starts a MariaDB
// (scripts/servers/mariadb.sh) if it is installed.
const EnvMySQLDSN = "OCCKIT_MYSQL_DSN"

// envLabMySQLDB passes the lab's database to its --procs children.
const envLabMySQLDB = "OCCKIT_LAB_MYSQL_DB"

var mysqlSpecs = []backendSpec{
	{
		Name:  "mysql",
		About: "sqlcas (dialect MySQL) on MariaDB: OCCKIT_MYSQL_DSN, or a throwaway server started with scripts/servers/mariadb.sh",
		Open:  openMySQL,
	},
}

// MySQLService is implemented by the mysql backend, for strategies and
// the lock stories that lock through MySQL.
type MySQLService interface {
	// MySQLDB is the lab's pool; its connections work in the lab's
	// database.
	MySQLDB() *sql.DB
	// MySQLDSN is the server's DSN as the lab reached it (not through
	// the lab's proxy), for clients of their own.
	MySQLDSN() string
}

type mysqlBackend struct {
	db      *sql.DB
	dsn     string // the server's own DSN (not the proxy's)
	dbName  string // the lab's database
	server  string
	durable string
	locker  *sqlcas.Locker
	started *servers.Script
	// attached is set in a --procs child, which works in its parent's
	// database and leaves it.
	attached bool
}

// childEnv implements childEnver.
func (b *mysqlBackend) childEnv() []string {
	return []string{EnvMySQLDSN + "=" + b.dsn, envLabMySQLDB + "=" + b.dbName}
}

func openMySQL(ctx context.Context, env *Env) (_ service, err error) {
	b := &mysqlBackend{}
	defer func() {
		if err != nil {
			_ = b.close(context.WithoutCancel(ctx))
		}
	}()
	dsn, started, err := env.reach(ctx, "mariadb", EnvMySQLDSN, servers.MariaDBBinary)
	if err != nil {
		return nil, err
	}
	b.started, b.dsn = started, dsn
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", errUnavailable, EnvMySQLDSN, err)
	}
	server := cfg.Addr
	if cfg.Addr, err = env.dial(cfg.Addr); err != nil {
		return nil, fmt.Errorf("%w: %w", errUnavailable, err)
	}
	octx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var rb [6]byte
	_, _ = rand.Read(rb[:])
	b.dbName = "occbench_" + hex.EncodeToString(rb[:])
	if s := env.getenv(envLabMySQLDB); s != "" {
		b.dbName, b.attached = s, true // a --procs child: the parent's database
	}
	admin, err := openMySQLPool(cfg)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errUnavailable, err)
	}
	defer admin.Close()
	var version, flush, syncBinlog string
	if err := admin.QueryRowContext(octx, `SELECT VERSION(), @@innodb_flush_log_at_trx_commit, @@sync_binlog`).Scan(&version, &flush, &syncBinlog); err != nil {
		return nil, fmt.Errorf("%w: connect to %s: %w", errUnavailable, server, err)
	}
	if !b.attached {
		if _, err := admin.ExecContext(octx, "CREATE DATABASE `"+b.dbName+"`"); err != nil {
			return nil, fmt.Errorf("%w: create database: %w", errUnavailable, err)
		}
	}
	own := cfg.Clone()
	own.DBName = b.dbName
	own.InterpolateParams = true // one round trip per statement (see sqlcas)
	if b.db, err = openMySQLPool(own); err != nil {
		return nil, fmt.Errorf("%w: %w", errUnavailable, err)
	}
	// GET_LOCK leases pin a connection each, and so does a transaction:
	// a worker may hold two leases (transfer) and borrow a third
	// connection for the data.
	conns := 3*max(env.MaxWorkers, DefaultWorkers) + 4
	b.db.SetMaxOpenConns(conns)
	b.db.SetMaxIdleConns(conns)
	if b.locker, err = sqlcas.NewLocker(b.db, sqlcas.LockerConfig{TokenTable: "lab_lock_tokens"}); err != nil {
		return nil, err
	}
	if err := b.locker.CreateTokenTable(octx); err != nil {
		return nil, fmt.Errorf("%w: %w", errUnavailable, err)
	}
	where := "at " + server + " (" + EnvMySQLDSN + ")"
	if b.started != nil {
		where = "at " + server + ", started by the lab with scripts/servers/mariadb.sh"
	}
	where += env.via()
	b.server = fmt.Sprintf("MySQL/MariaDB %s %s, database %s, pool of %d connections", version, where, b.dbName, conns)
	b.durable = fmt.Sprintf("innodb_flush_log_at_trx_commit=%s, sync_binlog=%s", flush, syncBinlog)
	if flush != "1" {
		b.durable += " (commits are not flushed to disk one by one)"
	}
	env.logf("mysql: %s; %s", b.server, b.durable)
	return b, nil
}

// openMySQLPool opens a pool with cfg (a *sql.DB; it does not connect).
func openMySQLPool(cfg *mysql.Config) (*sql.DB, error) {
	c, err := mysql.NewConnector(cfg)
	if err != nil {
		return nil, err
	}
	return sql.OpenDB(c), nil
}

var mysqlTuning = retryTuning{Retryable: sqlcas.Retryable}

func (b *mysqlBackend) MySQLDB() *sql.DB    { return b.db }
func (b *mysqlBackend) MySQLDSN() string    { return b.dsn }
func (b *mysqlBackend) tuning() retryTuning { return mysqlTuning }

// table returns the quoted name of the sqlcas table holding a cell's data
// (ns is lower-case letters, digits and '_').
func (b *mysqlBackend) table(ns string) string { return "`" + ns + "`" }

func (b *mysqlBackend) Info() backendInfo {
	return backendInfo{
		Name:       "mysql",
		Server:     b.server,
		Durability: b.durable,
		Locker:     "sqlcas.Locker (GET_LOCK in a pinned connection's session; tokens from a counter row)",
		BackOff:    describeBackOff(mysqlTuning),
	}
}

func (b *mysqlBackend) NewStore(ctx context.Context, ns string) (cas.Store, func(context.Context) error, error) {
	s, err := sqlcas.New(b.db, sqlcas.Config{Dialect: sqlcas.MySQL, Table: ns})
	if err != nil {
		return nil, nil, err
	}
	if err := s.CreateTable(ctx); err != nil {
		return nil, nil, err
	}
	drop := func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		_, err := b.db.ExecContext(ctx, "DROP TABLE IF EXISTS "+b.table(ns))
		return err
	}
	return s, drop, nil
}

func (b *mysqlBackend) openStore(_ context.Context, ns string) (cas.Store, error) {
	return sqlcas.New(b.db, sqlcas.Config{Dialect: sqlcas.MySQL, Table: ns})
}

// NewLocker returns the backend's sqlcas.Locker, shared by the cells (the
// harness puts lock names in the cell's namespace).
func (b *mysqlBackend) NewLocker(context.Context, string) (hybrid.Locker, func(context.Context) error, error) {
	return b.locker, func(context.Context) error { return nil }, nil
}

func (b *mysqlBackend) Close(ctx context.Context) error { return b.close(ctx) }

func (b *mysqlBackend) close(ctx context.Context) error {
	var errs []error
	if b.locker != nil {
		errs = append(errs, b.locker.Close())
		b.locker = nil
	}
	if b.db != nil {
		if !b.attached {
			cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			_, err := b.db.ExecContext(cctx, "DROP DATABASE IF EXISTS `"+b.dbName+"`")
			cancel()
			errs = append(errs, err)
		}
		errs = append(errs, b.db.Close())
		b.db = nil
	}
	if b.started != nil {
		errs = append(errs, b.started.Stop(ctx))
		b.started = nil
	}
	return errors.Join(errs...)
}
