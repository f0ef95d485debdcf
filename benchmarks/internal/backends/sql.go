package backends

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/go-sql-driver/mysql"
	_ "modernc.org/sqlite" // the "sqlite" database/sql driver, pure Go

	"github.com/occkit/occkit/adapters/sqlcas"
	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/hybrid"
)

// sqlDriver is a *sql.DB of sqlcas's: MySQL/MariaDB, or SQLite.
type sqlDriver struct {
	db      *sql.DB
	dialect sqlcas.Dialect
	scope   string // MySQL: the database
}

func connectMySQL(ctx context.Context, s *Server, opts ClientOptions) (_ *sqlDriver, err error) {
	cfg, err := mysql.ParseDSN(s.URL)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", s.EnvVar, err)
	}
	cfg.InterpolateParams = true // one round trip per statement (see sqlcas)
	if opts.Via != "" {
		cfg.Addr = opts.Via
	}
	if opts.DialTimeout > 0 {
		cfg.Timeout = opts.DialTimeout
	}
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if opts.CreateScope && opts.Scope != "" {
		admin, err := openMySQL(cfg)
		if err != nil {
			return nil, err
		}
		_, err = admin.ExecContext(cctx, "CREATE DATABASE `"+opts.Scope+"`")
		if cerr := admin.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return nil, fmt.Errorf("create database: %w", err)
		}
	}
	if opts.Scope != "" {
		cfg.DBName = opts.Scope
	}
	d := &sqlDriver{dialect: sqlcas.MySQL, scope: opts.Scope}
	if d.db, err = openMySQL(cfg); err != nil {
		return nil, err
	}
	if opts.Conns > 0 {
		d.db.SetMaxOpenConns(opts.Conns)
		d.db.SetMaxIdleConns(opts.Conns)
	}
	return d, nil
}

// openMySQL opens a pool with cfg (it does not connect).
func openMySQL(cfg *mysql.Config) (*sql.DB, error) {
	c, err := mysql.NewConnector(cfg)
	if err != nil {
		return nil, err
	}
	return sql.OpenDB(c), nil
}

// sqliteFile is the database file in a SQLite server's directory.
const sqliteFile = "lab.db"

// sqliteBusyTimeout is how long a SQLite writer waits for the write lock
// before SQLITE_BUSY (retryable).
const sqliteBusyTimeout = 5 * time.Second

// connectSQLite opens the database file in WAL mode (readers do not block
// the writer) with synchronous=NORMAL, the usual setting with WAL; every
// transaction the application begins is IMMEDIATE (sqlcas's own are
// anyway). Several connections: readers in parallel, one writer at a
// time (SQLite's lock), the others wait in the busy timeout.
func connectSQLite(s *Server, opts ClientOptions) (*sqlDriver, error) {
	dsn := fmt.Sprintf("file:%s?_pragma=busy_timeout(%d)&_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)&_txlock=immediate",
		filepath.Join(s.URL, sqliteFile), sqliteBusyTimeout.Milliseconds())
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, err
	}
	if opts.Conns > 0 {
		db.SetMaxOpenConns(opts.Conns)
		db.SetMaxIdleConns(opts.Conns)
	}
	return &sqlDriver{db: db, dialect: sqlcas.SQLite}, nil
}

// quote quotes an identifier (lower-case letters, digits and '_').
func (d *sqlDriver) quote(name string) string {
	if d.dialect == sqlcas.MySQL {
		return "`" + name + "`"
	}
	return `"` + name + `"`
}

// Table returns the quoted name of namespace ns's table (in the client's
// scope) on a PostgreSQL, MySQL or SQLite client, for statements the
// adapter does not offer; "" on the systems without tables.
func (c *Client) Table(ns string) string {
	switch d := c.d.(type) {
	case *sqlDriver:
		return d.quote(ns)
	case *pgDriver:
		return d.ident(ns)
	case *pgReplicaDriver:
		return d.ident(ns)
	}
	return ""
}

func (d *sqlDriver) store(ns string) (cas.Store, error) {
	return sqlcas.New(d.db, sqlcas.Config{Dialect: d.dialect, Table: ns})
}

func (d *sqlDriver) create(ctx context.Context, ns string) error {
	s, err := sqlcas.New(d.db, sqlcas.Config{Dialect: d.dialect, Table: ns})
	if err != nil {
		return err
	}
	return s.CreateTable(ctx)
}

func (d *sqlDriver) drop(ctx context.Context, ns string) error {
	_, err := d.db.ExecContext(ctx, "DROP TABLE IF EXISTS "+d.quote(ns))
	if d.dialect != sqlcas.MySQL {
		return err
	}
	_, terr := d.db.ExecContext(ctx, "DROP TABLE IF EXISTS "+d.quote(ns+"_lock_tokens"))
	return errors.Join(err, terr)
}

// locker: GET_LOCK on MySQL; on SQLite, which has no lock service,
// hybrid.NewLocalLocker.
func (d *sqlDriver) locker(ctx context.Context, cfg LockerConfig) (hybrid.Locker, func() error, error) {
	if d.dialect != sqlcas.MySQL {
		return localLocker(cfg)
	}
	l, err := sqlcas.NewLocker(d.db, sqlcas.LockerConfig{TokenCounter: cfg.Name + "_lock_tokens"})
	if err != nil {
		return nil, nil, err
	}
	if err := l.CreateTokenCounter(ctx); err != nil {
		_ = l.Close()
		return nil, nil, err
	}
	return l, l.Close, nil
}

func (d *sqlDriver) describe(ctx context.Context) (string, string, error) {
	if d.dialect == sqlcas.MySQL {
		var version, flush, syncBinlog string
		if err := d.db.QueryRowContext(ctx, `SELECT VERSION(), @@innodb_flush_log_at_trx_commit, @@sync_binlog`).Scan(&version, &flush, &syncBinlog); err != nil {
			return "", "", err
		}
		durable := fmt.Sprintf("innodb_flush_log_at_trx_commit=%s, sync_binlog=%s", flush, syncBinlog)
		if flush != "1" {
			durable += " (commits are not flushed to disk one by one)"
		}
		return "MySQL/MariaDB " + version, durable, nil
	}
	var version, journal string
	var sync int
	if err := d.db.QueryRowContext(ctx, `SELECT sqlite_version()`).Scan(&version); err != nil {
		return "", "", err
	}
	if err := d.db.QueryRowContext(ctx, `PRAGMA journal_mode`).Scan(&journal); err != nil {
		return "", "", err
	}
	if err := d.db.QueryRowContext(ctx, `PRAGMA synchronous`).Scan(&sync); err != nil {
		return "", "", err
	}
	return "SQLite " + version + " in process (modernc.org/sqlite)", fmt.Sprintf("journal_mode=%s, synchronous=%s (a commit is in the WAL file; fsync at checkpoints), busy_timeout=%v",
		journal, map[int]string{0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}[sync], sqliteBusyTimeout), nil
}

func (d *sqlDriver) dropScope(ctx context.Context) error {
	if d.scope == "" {
		return nil
	}
	_, err := d.db.ExecContext(ctx, "DROP DATABASE IF EXISTS `"+d.scope+"`")
	return err
}

func (d *sqlDriver) close() error     { return d.db.Close() }
func (d *sqlDriver) native(c *Client) { c.db = d.db }
