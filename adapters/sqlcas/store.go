package sqlcas

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"sync/atomic"
	"time"

	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/internal/sqlrows"
	"github.com/occkit/occkit/internal/writeid"
)

// DefaultTable is the table a Store uses when Config.Table is empty.
const DefaultTable = "occkit_cas"

// Config configures a Store. Dialect is required; every other zero field
// means its default.
type Config struct {
	// Dialect is the database behind the *sql.DB. Required.
	Dialect Dialect
	// Table is the table's name, one identifier, always quoted (never
	// parsed: "a.b" is a table named a.b). Empty means DefaultTable.
	Table string
	// Limits are the key, value and commit limits (zero fields: the cas
	// defaults, 1 KiB keys, 1 MiB values, 100 ops per commit).
	// MaxKeyBytes may not exceed MaxKeyBytesLimit, nor MaxValueBytes
	// MaxValueBytesLimit. On MySQL the key column is
	// VARBINARY(MaxKeyBytes): create the table with the limits it will be
	// used with.
	Limits cas.Limits
	// ExclusiveTimeout bounds, on PostgreSQL, how long an exclusive update
	// (UpdateExclusive, the escalation of occ.Update for a call that keeps
	// losing) may hold a key's row while its holder does not answer: the
	// server ends a session idle in its transaction for longer. Zero
	// means DefaultExclusiveTimeout. MySQL and SQLite have no such bound.
	ExclusiveTimeout time.Duration
	// DeltaTable is the table that records the ids of applied deltas (see
	// Store.Add). Empty means Table + "_deltas".
	DeltaTable string
	// DeltaRetention is how long an applied delta's record is kept: a
	// delta sent again after a lost reply within it is refused as a
	// duplicate. Zero means DefaultDeltaRetention; it is never below 40
	// seconds. Records are pruned by the age their ids carry, taken from
	// the writers' clocks.
	DeltaRetention time.Duration
	// ReadDB, if set, is where Get and GetMany read when the store runs
	// on New's *sql.DB (not on what With was given): a database on a
	// replica of db's server, such as a PostgreSQL streaming replica (a
	// hot standby), with the same table. Every write, the current row a
	// conflict carries, the read that resolves a lost reply, commits,
	// deltas and exclusive updates go to db, the primary. A version read
	// on a replica that lags only makes the write that follows it
	// conflict (see "Reads from a replica" in the package documentation).
	// Nil means db.
	ReadDB *sql.DB
}

// Querier runs statements: a *sql.DB, a *sql.Conn, a *sql.Tx, and sqlx's
// DB, Conn and Tx all satisfy it. [Store.With] runs a store's statements
// on one.
type Querier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// pooled is a Querier that hands out connections: *sql.DB, sqlx.DB.
type pooled interface {
	Conn(ctx context.Context) (*sql.Conn, error)
	BeginTx(ctx context.Context, opts *sql.TxOptions) (*sql.Tx, error)
}

// connLike is one connection outside a transaction: *sql.Conn, sqlx.Conn.
type connLike interface {
	Querier
	BeginTx(ctx context.Context, opts *sql.TxOptions) (*sql.Tx, error)
	Raw(f func(driverConn any) error) error
}

// callersTx reports whether q is the caller's transaction: neither a pool
// nor a connection.
func callersTx(q Querier) bool {
	switch q.(type) {
	case pooled, connLike:
		return false
	}
	return true
}

// Store is a cas.Store on a table reached through database/sql. It
// implements cas.Store, cas.FencedStore and cas.Committer. The zero value
// is not usable; call New. A Store is safe for concurrent use (as its
// Querier is: a *sql.Tx given to With is not).
type Store struct {
	d      Dialect
	db     *sql.DB // New's: own transactions and the resolution of lost replies
	q      Querier // where statements run: db, or what With was given
	rdb    *sql.DB // Config.ReadDB: where Get and GetMany read while q is db; nil: q
	inTx   bool    // q is the caller's transaction
	limits cas.Limits
	table  string // quoted
	name   string // as configured, for messages
	st     *statements
	cm     *commitStatements
	prep   *prepared // SQLite: statements prepared on db
	ids    *writeid.Source
	deltas *deltaStatements
	// blocks is whether the server runs MariaDB's compound statements:
	// MariaDB does, MySQL refuses them (shared by With's copies).
	blocks *atomic.Int32
	// strict is the same for commitStrict's SET STATEMENT (which
	// Percona Server runs without compound statements), and seen the
	// keys known to have a row.
	strict *atomic.Int32
	seen   *rowsSeen

	exclusiveTimeout time.Duration
}

var (
	_ cas.Store       = (*Store)(nil)
	_ cas.FencedStore = (*Store)(nil)
	_ cas.Committer   = (*Store)(nil)
	_ cas.BatchGetter = (*Store)(nil)
	_ cas.Adder       = (*Store)(nil)
)

// New returns a Store on cfg's table, reached through db. It does not talk
// to the server: create the table first with CreateTable, or with the
// statement DDL returns.
func New(db *sql.DB, cfg Config) (*Store, error) {
	if db == nil {
		return nil, errors.New("sqlcas: New: nil *sql.DB")
	}
	if !cfg.Dialect.valid() {
		return nil, fmt.Errorf("sqlcas: New: Config.Dialect is %v: set MySQL, SQLite or Postgres", cfg.Dialect)
	}
	name := cfg.Table
	if name == "" {
		name = DefaultTable
	}
	table, err := cfg.Dialect.quote(name)
	if err != nil {
		return nil, fmt.Errorf("sqlcas: New: %w", err)
	}
	if cfg.Limits.MaxKeyBytes > MaxKeyBytesLimit {
		return nil, fmt.Errorf("sqlcas: New: MaxKeyBytes %d over the limit of %d", cfg.Limits.MaxKeyBytes, MaxKeyBytesLimit)
	}
	if cfg.Limits.MaxValueBytes > MaxValueBytesLimit {
		return nil, fmt.Errorf("sqlcas: New: MaxValueBytes %d over the limit of %d", cfg.Limits.MaxValueBytes, MaxValueBytesLimit)
	}
	s := &Store{
		d: cfg.Dialect, db: db, q: db, rdb: cfg.ReadDB, limits: cfg.Limits.WithDefaults(),
		table: table, name: name, ids: writeid.NewSource(),
		exclusiveTimeout: cfg.ExclusiveTimeout, blocks: new(atomic.Int32),
		strict: new(atomic.Int32), seen: new(rowsSeen),
	}
	if s.exclusiveTimeout <= 0 {
		s.exclusiveTimeout = DefaultExclusiveTimeout
	}
	s.prep = newPrepared(s.d, db)
	s.st = newStatements(s.d, table)
	s.cm = newCommitStatements(s.d, table)
	s.deltas = newDeltaStatements(s.d, table, name, cfg, s.limits.MaxKeyBytes)
	return s, nil
}

// With returns a Store on the same table whose statements run on q: a
// *sql.Tx (or sqlx.Tx) of the caller, so that occkit's writes commit or
// roll back with the caller's own statements, or a *sql.Conn (or
// sqlx.Conn), on which the store begins its own transactions. A q that
// is neither a pool (a Conn method) nor a connection (BeginTx and Raw
// methods) counts as the caller's transaction. The
// returned Store shares everything else with s and is as safe for
// concurrent use as q is.
//
// Inside the caller's transaction (q is neither a pool nor a *sql.Conn)
// the store begins and commits nothing: Commit runs its statements in
// that transaction, and its writes take effect when the caller commits,
// or never. The caller's isolation level applies; the store's reads that
// decide a conflict are locking reads (FOR SHARE, LOCK IN SHARE MODE), so
// they see the latest committed rows also under REPEATABLE READ, and the
// rows they lock stay locked until the caller's transaction ends. A
// connection lost inside the caller's transaction loses the transaction:
// the error is returned as it is, never resolved as applied, and the
// caller's COMMIT decides. A deadlock (MySQL 1213, PostgreSQL 40P01) or a
// serialization failure (40001) is a *cas.ConflictError, and it has rolled
// back the caller's whole transaction (PostgreSQL: the transaction is
// aborted): run the transaction again from its start.
//
// On SQLite, begin the caller's transaction as IMMEDIATE (open the
// database with _txlock=immediate): a deferred transaction that reads
// first fails with SQLITE_BUSY when it later writes.
func (s *Store) With(q Querier) *Store {
	c := *s
	c.q = q
	c.inTx = callersTx(q)
	return &c
}

// Dialect returns the store's dialect.
func (s *Store) Dialect() Dialect { return s.d }

// Limits returns the limits the store enforces.
func (s *Store) Limits() cas.Limits { return s.limits }

// DB returns the *sql.DB the store was made with.
func (s *Store) DB() *sql.DB { return s.db }

// ReadDB returns Config.ReadDB, or nil when the store reads from DB.
func (s *Store) ReadDB() *sql.DB { return s.rdb }

// reader is where Get and GetMany read: Config.ReadDB, unless the store
// runs on what With was given (a transaction, a connection), which reads
// and writes alike.
func (s *Store) reader() Querier {
	if s.rdb != nil && s.q == Querier(s.db) {
		return s.rdb
	}
	return s.q
}

// String returns "sqlcas:", the dialect and the table's quoted name.
func (s *Store) String() string { return "sqlcas:" + s.d.String() + ":" + s.table }

// DDL returns the statements CreateTable runs, for a migration tool: the
// store's table and its delta table, separated by ";".
func (s *Store) DDL() string {
	ddl := s.d.ddl(s.table, s.limits.MaxKeyBytes)
	if s.deltas.ddl != "" {
		ddl += ";\n" + s.deltas.ddl
	}
	if s.deltas.proc != nil {
		ddl += ";\n" + s.deltas.proc.ddl
	}
	return ddl
}

// CreateTable creates the store's table and its delta table if they do
// not exist (see DDL), one statement at a time. It does not change an
// existing table.
func (s *Store) CreateTable(ctx context.Context) error {
	if _, err := s.q.ExecContext(ctx, s.d.ddl(s.table, s.limits.MaxKeyBytes)); err != nil {
		return fmt.Errorf("sqlcas: create table %s: %w", s.table, err)
	}
	if s.deltas.ddl != "" {
		if _, err := s.q.ExecContext(ctx, s.deltas.ddl); err != nil {
			return fmt.Errorf("sqlcas: create table %s: %w", s.deltas.table, err)
		}
	}
	if s.deltas.proc != nil {
		return s.deltas.proc.create(ctx, s.q)
	}
	return nil
}

// Get returns the key's current item, or an error matching cas.ErrNotFound.
// It reads on Config.ReadDB when set.
func (s *Store) Get(ctx context.Context, key string) (cas.Item, error) {
	if err := s.limits.Get(ctx, key); err != nil {
		return cas.Item{}, err
	}
	it, err := sqlrows.Item(key, s.prep.queryRow(ctx, s.reader(), s.st.get.text, key), func(err error) error { return s.readError("get", key, err) })
	if err == nil && !s.inTx {
		s.seen.note(key)
	}
	return it, err
}

// GetMany implements cas.BatchGetter with one SELECT ... WHERE k IN (...):
// one round trip, one statement snapshot, on Config.ReadDB when set.
func (s *Store) GetMany(ctx context.Context, keys []string) ([]cas.Item, error) {
	if err := s.limits.GetMany(ctx, keys); err != nil {
		return nil, err
	}
	if len(keys) == 0 {
		return []cas.Item{}, nil
	}
	args := make([]any, len(keys))
	for i, k := range keys {
		args[i] = k
	}
	rows, err := s.prep.query(ctx, s.reader(), s.cm.getMany(len(keys)), args...)
	if err != nil {
		return nil, s.readError("get-many", keys[0], err)
	}
	defer rows.Close()
	out, err := sqlrows.Items(keys, rows)
	if err != nil {
		return nil, s.readError("get-many", keys[0], err)
	}
	if !s.inTx {
		for _, it := range out {
			if it.Version != 0 {
				s.seen.note(it.Key)
			}
		}
	}
	return out, nil
}

// CompareAndSwap writes value if key's version is expected (0: only if the
// key does not exist) and returns the new version.
func (s *Store) CompareAndSwap(ctx context.Context, key string, expected cas.Version, value []byte) (cas.Version, error) {
	if err := s.limits.Put(ctx, key, value); err != nil {
		return 0, err
	}
	if err := checkVersion("compare-and-swap", key, expected); err != nil {
		return 0, err
	}
	return s.write(ctx, "compare-and-swap", key, expected, value, 0, false)
}

// CompareAndSwapFenced is CompareAndSwap that also requires token to be at
// least the largest fencing token that has written key, and records it.
// Tokens are stored as signed 64-bit integers: a token above
// math.MaxInt64 fails with cas.ErrTooLarge.
func (s *Store) CompareAndSwapFenced(ctx context.Context, key string, expected cas.Version, token uint64, value []byte) (cas.Version, error) {
	if err := s.limits.Put(ctx, key, value); err != nil {
		return 0, err
	}
	if err := checkVersion("compare-and-swap", key, expected); err != nil {
		return 0, err
	}
	if token > math.MaxInt64 {
		return 0, &cas.KeyError{Op: "compare-and-swap", Key: key, Err: fmt.Errorf("%w: fencing token %d is above the largest 64-bit signed integer", cas.ErrTooLarge, token)}
	}
	return s.write(ctx, "compare-and-swap", key, expected, value, token, true)
}

// CompareAndDelete deletes key if its version is expected. The row stays,
// as a tombstone (see the package documentation).
func (s *Store) CompareAndDelete(ctx context.Context, key string, expected cas.Version) error {
	if err := s.limits.Delete(ctx, key, expected); err != nil {
		return err
	}
	if err := checkVersion("compare-and-delete", key, expected); err != nil {
		return err
	}
	_, err := s.write(ctx, "compare-and-delete", key, expected, nil, 0, false)
	return err
}
