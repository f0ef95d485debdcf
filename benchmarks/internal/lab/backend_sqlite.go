package lab

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	_ "modernc.org/sqlite" // the "sqlite" database/sql driver, pure Go

	"github.com/occkit/occkit/adapters/sqlcas"
	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/hybrid"
)

// envLabSQLiteDir passes the lab's SQLite directory to its --procs
// children, which open the same database file.
const envLabSQLiteDir = "OCCKIT_LAB_SQLITE_DIR"

var sqliteSpecs = []backendSpec{
	{
		Name:  "sqlite",
		About: "sqlcas (dialect SQLite, modernc.org/sqlite) on a file database in WAL mode in a temporary directory, several connections: always available",
		Open:  openSQLite,
	},
}

type sqliteBackend struct {
	db      *sql.DB
	dir     string
	server  string
	durable string
	// attached is set in a --procs child, which opens its parent's
	// database and leaves it.
	attached bool
}

// childEnv implements childEnver.
func (b *sqliteBackend) childEnv() []string { return []string{envLabSQLiteDir + "=" + b.dir} }

// sqliteBusyTimeout is how long a writer waits for SQLite's write lock
// before SQLITE_BUSY (retryable).
const sqliteBusyTimeout = 5 * time.Second

func openSQLite(ctx context.Context, env *Env) (_ service, err error) {
	b := &sqliteBackend{}
	defer func() {
		if err != nil {
			_ = b.close()
		}
	}()
	if d := env.getenv(envLabSQLiteDir); d != "" {
		b.dir, b.attached = d, true
	} else if b.dir, err = os.MkdirTemp("", "occbench-sqlite-"); err != nil {
		return nil, fmt.Errorf("%w: %w", errUnavailable, err)
	}
	path := filepath.Join(b.dir, "lab.db")
	// WAL: readers do not block the writer; synchronous=NORMAL, the usual
	// setting with WAL; every transaction the application begins is
	// IMMEDIATE (sqlcas's own are anyway).
	dsn := fmt.Sprintf("file:%s?_pragma=busy_timeout(%d)&_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)&_txlock=immediate",
		path, sqliteBusyTimeout.Milliseconds())
	if b.db, err = sql.Open("sqlite", dsn); err != nil {
		return nil, fmt.Errorf("%w: %w", errUnavailable, err)
	}
	// Several connections: readers in parallel, one writer at a time
	// (SQLite's lock), the others wait in the busy timeout.
	conns := max(env.MaxWorkers, DefaultWorkers) + 2
	b.db.SetMaxOpenConns(conns)
	b.db.SetMaxIdleConns(conns)
	octx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var version, journal string
	var sync int
	if err := b.db.QueryRowContext(octx, `SELECT sqlite_version()`).Scan(&version); err != nil {
		return nil, fmt.Errorf("%w: %w", errUnavailable, err)
	}
	if err := b.db.QueryRowContext(octx, `PRAGMA journal_mode`).Scan(&journal); err != nil {
		return nil, fmt.Errorf("%w: %w", errUnavailable, err)
	}
	if err := b.db.QueryRowContext(octx, `PRAGMA synchronous`).Scan(&sync); err != nil {
		return nil, fmt.Errorf("%w: %w", errUnavailable, err)
	}
	b.server = fmt.Sprintf("SQLite %s in process (modernc.org/sqlite), file %s, pool of %d connections", version, path, conns)
	b.durable = fmt.Sprintf("journal_mode=%s, synchronous=%s (a commit is in the WAL file; fsync at checkpoints), busy_timeout=%v",
		journal, map[int]string{0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}[sync], sqliteBusyTimeout)
	env.logf("sqlite: %s; %s", b.server, b.durable)
	return b, nil
}

var sqliteTuning = retryTuning{Retryable: sqlcas.Retryable}

func (b *sqliteBackend) Info() backendInfo {
	return backendInfo{
		Name:       "sqlite",
		Server:     b.server,
		Durability: b.durable,
		// SQLite has no lock service: the database is a file of this
		// process, and so is the lock.
		Locker:  "hybrid.NewLocalLocker (in process, 10 s TTL): SQLite has no lock service, and one process writes the database (hybrid and adaptive are not applicable with --procs)",
		BackOff: describeBackOff(sqliteTuning),
	}
}

func (b *sqliteBackend) tuning() retryTuning { return sqliteTuning }

func (b *sqliteBackend) NewStore(ctx context.Context, ns string) (cas.Store, func(context.Context) error, error) {
	s, err := sqlcas.New(b.db, sqlcas.Config{Dialect: sqlcas.SQLite, Table: ns})
	if err != nil {
		return nil, nil, err
	}
	if err := s.CreateTable(ctx); err != nil {
		return nil, nil, err
	}
	drop := func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		_, err := b.db.ExecContext(ctx, `DROP TABLE IF EXISTS "`+ns+`"`)
		return err
	}
	return s, drop, nil
}

func (b *sqliteBackend) openStore(_ context.Context, ns string) (cas.Store, error) {
	return sqlcas.New(b.db, sqlcas.Config{Dialect: sqlcas.SQLite, Table: ns})
}

// processLocalLocker implements processLocker: the local locker does not
// reach other processes.
func (b *sqliteBackend) processLocalLocker() {}

func (b *sqliteBackend) NewLocker(context.Context, string) (hybrid.Locker, func(context.Context) error, error) {
	return hybrid.NewLocalLocker(10 * time.Second), func(context.Context) error { return nil }, nil
}

func (b *sqliteBackend) Close(context.Context) error { return b.close() }

func (b *sqliteBackend) close() error {
	var errs []error
	if b.db != nil {
		errs = append(errs, b.db.Close())
		b.db = nil
	}
	if b.dir != "" && !b.attached {
		errs = append(errs, os.RemoveAll(b.dir))
		b.dir = ""
	}
	return errors.Join(errs...)
}
