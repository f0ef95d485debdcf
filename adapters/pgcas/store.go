package pgcas

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/internal/sqlrows"
	"github.com/occkit/occkit/internal/writeid"
)

// DefaultTable is the table a Store uses when Config.Table is empty.
const DefaultTable = "occkit_cas"

// Largest limits a Store accepts: a btree index entry must fit in a third of
// a page (keys), and a bytea value in PostgreSQL's 1 GB field limit.
const (
	MaxKeyBytesLimit   = 2048
	MaxValueBytesLimit = 1<<30 - 1
)

// Config configures a Store. The zero value is ready to use: table
// "occkit_cas" on the connection's search_path, the default cas.Limits.
type Config struct {
	// Table is the table's name, used as one identifier (always quoted,
	// never parsed: "a.b" is a table named a.b, not table b in schema a).
	// Empty means DefaultTable.
	Table string
	// Schema is the schema holding the table. Empty means the first schema
	// of the connection's search_path.
	Schema string
	// Limits are the key, value and commit limits (zero fields: the
	// cas defaults, 1 KiB keys, 1 MiB values, 100 ops per commit).
	// MaxKeyBytes may not exceed MaxKeyBytesLimit, nor MaxValueBytes
	// MaxValueBytesLimit.
	Limits cas.Limits
	// ExclusiveTimeout bounds how long an exclusive update (UpdateExclusive,
	// the escalation of occ.Update for a call that keeps losing) may hold
	// a key's row while its holder does not answer: the server ends a
	// session idle in its transaction for longer, which frees the row.
	// Zero means DefaultExclusiveTimeout.
	ExclusiveTimeout time.Duration
	// DeltaTable is the table that records the ids of applied deltas (see
	// Store.Add), in Schema. Empty means Table + "_deltas".
	DeltaTable string
	// DeltaRetention is how long an applied delta's id is kept: a delta
	// sent again after a lost reply within it is refused as a duplicate.
	// Zero means DefaultDeltaRetention; it is never below 40 seconds.
	DeltaRetention time.Duration
	// ReadPool, if set, is where Get and GetMany read: a pool on a
	// streaming replica of the pool's server (a hot standby), with the
	// same table on its search_path. Everything else goes to New's pool,
	// the primary: every write, the read that resolves a lost reply, the
	// current row a conflict carries, commits, deltas and exclusive
	// updates. A replica's state may lag the primary's: a version read
	// there that is no longer current only makes the conditional write
	// that follows it conflict, and that conflict carries the primary's
	// current row (see "Reads from a replica" in the package
	// documentation). Nil means New's pool.
	ReadPool *pgxpool.Pool
}

// Store is a cas.Store on a PostgreSQL table. It implements cas.Store,
// cas.FencedStore and cas.Committer. The zero value is not usable; call New.
// A Store is safe for concurrent use; it holds no connection of its own and
// borrows one from the pool for each call.
type Store struct {
	pool   *pgxpool.Pool
	read   *pgxpool.Pool // Get and GetMany: Config.ReadPool, or pool
	limits cas.Limits
	table  string // quoted, schema-qualified when Config.Schema is set
	name   string // the configuration's table name, for messages
	ids    *writeid.Source

	sqlGet     string
	sqlGetMany string
	sqlGetList [maxListed + 1]string // GetMany of 1 to maxListed keys: key IN ($1, ...)
	sqlCreate  string                // expected 0, plain
	sqlCreateF string                // expected 0, fenced
	sqlSwap    string                // expected > 0, plain
	sqlSwapF   string                // expected > 0, fenced
	sqlDelete  string

	commitCreate    string
	commitSwap      string
	commitDelete    string
	commitCheck     string // check a version
	commitCheckNone string // check absence
	commitGuard     string
	sqlRowsCommit   [maxListed + 1]string // commitRows's statement for 1 to maxListed puts

	sqlResolve     string
	sqlResolveMany string
	sqlLockRead    string
	sqlLockRow     string                // UpdateExclusive's read
	sqlLockMany    string                // CommitExclusive's read
	sqlLockList    [maxListed + 1]string // sqlLockMany of 1 to maxListed keys

	exclusiveTimeout time.Duration
	delta            deltaState
}

var (
	_ cas.Store       = (*Store)(nil)
	_ cas.FencedStore = (*Store)(nil)
	_ cas.Committer   = (*Store)(nil)
	_ cas.BatchGetter = (*Store)(nil)
	_ cas.Adder       = (*Store)(nil)
)

// New returns a Store on cfg's table, reached through pool. It does not
// talk to the server: create the table first with CreateTable or the DDL in
// the package documentation.
func New(pool *pgxpool.Pool, cfg Config) (*Store, error) {
	if pool == nil {
		return nil, errors.New("pgcas: New: nil pool")
	}
	table, err := quoteTable(cfg.Schema, cfg.Table, DefaultTable)
	if err != nil {
		return nil, fmt.Errorf("pgcas: New: %w", err)
	}
	if err := cfg.Limits.Within(cas.Limits{MaxKeyBytes: MaxKeyBytesLimit, MaxValueBytes: MaxValueBytesLimit}); err != nil {
		return nil, fmt.Errorf("pgcas: New: %w", err)
	}
	name := cfg.Table
	if name == "" {
		name = DefaultTable
	}
	s := &Store{pool: pool, read: pool, limits: cfg.Limits.WithDefaults(), table: table, name: name, ids: writeid.NewSource(), exclusiveTimeout: cfg.ExclusiveTimeout}
	if cfg.ReadPool != nil {
		s.read = cfg.ReadPool
	}
	if s.exclusiveTimeout <= 0 {
		s.exclusiveTimeout = DefaultExclusiveTimeout
	}
	s.prepareSQL()
	s.delta.retention = deltaRetention(cfg)
	if s.delta.table, s.delta.err = deltaTableName(cfg); s.delta.err == nil {
		s.delta.rawName = cfg.DeltaTable
		if s.delta.rawName == "" {
			s.delta.rawName = name + "_deltas"
		}
		s.prepareDelta()
	} else {
		s.delta.table = ""
		s.delta.err = fmt.Errorf("no delta table: %w (set Config.DeltaTable)", s.delta.err)
	}
	return s, nil
}

// quoteTable returns the quoted, optionally schema-qualified name of a
// table. Names are quoted with pgx.Identifier, never spliced in raw: any
// name is safe, and one PostgreSQL would truncate or cannot hold is refused.
func quoteTable(schema, table, def string) (string, error) {
	if table == "" {
		table = def
	}
	id := pgx.Identifier{table}
	if schema != "" {
		id = pgx.Identifier{schema, table}
	}
	for _, part := range id {
		if err := checkIdentifier(part); err != nil {
			return "", err
		}
	}
	return id.Sanitize(), nil
}

// checkIdentifier refuses names PostgreSQL would silently change: longer
// than 63 bytes (truncated) or containing NUL (dropped by Sanitize).
func checkIdentifier(name string) error {
	switch {
	case name == "":
		return errors.New("empty identifier")
	case len(name) > 63:
		return fmt.Errorf("identifier %q is %d bytes, PostgreSQL's limit is 63", name, len(name))
	case strings.IndexByte(name, 0) >= 0:
		return fmt.Errorf("identifier %q contains a NUL byte", name)
	}
	return nil
}

// Limits returns the limits the store enforces.
func (s *Store) Limits() cas.Limits { return s.limits }

// String returns "pgcas:" and the table's quoted name.
func (s *Store) String() string { return "pgcas:" + s.table }

// Pool returns the pool the store writes through (New's).
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

// ReadPool returns Config.ReadPool, the pool Get and GetMany read from,
// or nil when they read from Pool.
func (s *Store) ReadPool() *pgxpool.Pool {
	if s.read == s.pool {
		return nil
	}
	return s.read
}

// DDL returns the statements CreateTable runs, for a migration tool.
func (s *Store) DDL() string {
	return fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s (
    key         text COLLATE "C" PRIMARY KEY,
    value       bytea,                                -- NULL: deleted (a tombstone, invisible to Get)
    version     bigint GENERATED ALWAYS AS IDENTITY,  -- from the table's own sequence: never reused
    fence_token bigint NOT NULL DEFAULT 0,            -- largest fencing token that has written the key
    write_id    uuid   NOT NULL                       -- the last write's id, to resolve lost replies
)`, s.table) + s.deltaDDLTail()
}

// deltaDDLTail returns the delta table's DDL after a statement separator,
// or nothing when the store has no delta table.
func (s *Store) deltaDDLTail() string {
	if ddl := s.deltaDDL(); ddl != "" {
		return ";\n" + ddl
	}
	return ""
}

// CreateTable creates the store's table if it does not exist (see DDL).
// It does not change an existing table.
func (s *Store) CreateTable(ctx context.Context) error {
	if _, err := s.pool.Exec(ctx, s.DDL()); err != nil {
		return fmt.Errorf("pgcas: create table %s: %w", s.table, err)
	}
	return nil
}

// The statements. Every write is one statement that returns exactly one
// row: the new version when the write applied, otherwise the key's current
// row, read in the same statement.
//
// The current row is read with FOR SHARE: a plain read in the same
// statement would see the statement's snapshot, which misses a write that
// committed while this statement waited for the row lock (the very write
// that made it fail). A locking read waits for a writer in progress and
// follows the row to its latest committed version. (FOR KEY SHARE is not
// enough: it does not conflict with updates that keep the key, so it locks
// and returns the old version of a row updated since the snapshot.) The
// read runs only when the write did not apply.
func (s *Store) prepareSQL() {
	t := s.table
	// tail reads the current row when w wrote nothing and selects the one
	// result row; extra is appended to its columns (Commit's failure
	// flag).
	tail := func(extra string) string {
		return `, cur AS (
    SELECT version, value, fence_token FROM ` + t + `
    WHERE key = $1 AND NOT EXISTS (SELECT FROM w) FOR SHARE)
SELECT w.version, c.version, c.value, c.fence_token` + extra + `
FROM (SELECT) one LEFT JOIN w ON true LEFT JOIN cur c ON true`
	}
	cur := tail("")
	// In a Commit, an operation that fails marks the transaction so that
	// the guard statement at its end rolls it all back.
	const failed = `, CASE WHEN w.version IS NULL THEN set_config('occkit.commit', '` + commitMark + `', true) END`

	s.sqlGet = `SELECT value, version FROM ` + t + ` WHERE key = $1 AND value IS NOT NULL`
	s.sqlGetMany = `SELECT key, value, version FROM ` + t + ` WHERE key = ANY($1::text[]) AND value IS NOT NULL`
	s.sqlLockRow = `SELECT value, version FROM ` + t + ` WHERE key = $1 FOR UPDATE`
	s.sqlLockMany = `SELECT key, value, version FROM ` + t + ` WHERE key = ANY($1::text[]) ORDER BY key FOR UPDATE`
	for n := 1; n <= maxListed; n++ {
		s.sqlGetList[n] = `SELECT key, value, version FROM ` + t + ` WHERE key IN (` + params(1, n) + `) AND value IS NOT NULL`
		s.sqlLockList[n] = `SELECT key, value, version FROM ` + t + ` WHERE key IN (` + params(1, n) + `) ORDER BY key FOR UPDATE`
		s.sqlRowsCommit[n] = rowsSQL(t, n)
	}

	// $1 key, $2 value, $3 write id, $4 token. A create may replace a
	// tombstone (keeping or, fenced, raising its token).
	create := `WITH w AS (
    INSERT INTO ` + t + ` AS r (key, value, write_id) VALUES ($1, $2, $3)
    ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value, version = DEFAULT, write_id = EXCLUDED.write_id
    WHERE r.value IS NULL
    RETURNING version)`
	s.sqlCreate = create + cur
	s.commitCreate = create + tail(failed)
	s.sqlCreateF = `WITH w AS (
    INSERT INTO ` + t + ` AS r (key, value, write_id, fence_token) VALUES ($1, $2, $3, $4)
    ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value, version = DEFAULT, write_id = EXCLUDED.write_id,
        fence_token = EXCLUDED.fence_token
    WHERE r.value IS NULL AND r.fence_token <= EXCLUDED.fence_token
    RETURNING version)` + cur

	// $1 key, $2 value, $3 write id, $4 expected version, $5 token.
	swap := `WITH w AS (
    UPDATE ` + t + ` SET value = $2, version = DEFAULT, write_id = $3
    WHERE key = $1 AND version = $4 AND value IS NOT NULL
    RETURNING version)`
	s.sqlSwap = swap + cur
	s.commitSwap = swap + tail(failed)
	s.sqlSwapF = `WITH w AS (
    UPDATE ` + t + ` SET value = $2, version = DEFAULT, write_id = $3, fence_token = $5
    WHERE key = $1 AND version = $4 AND value IS NOT NULL AND fence_token <= $5
    RETURNING version)` + cur

	// $1 key, $2 write id, $3 expected version. A delete leaves a
	// tombstone: it keeps the key's fencing token and the write id that
	// resolves a lost reply.
	del := `WITH w AS (
    UPDATE ` + t + ` SET value = NULL, write_id = $2
    WHERE key = $1 AND version = $3 AND value IS NOT NULL
    RETURNING version)`
	s.sqlDelete = del + cur
	s.commitDelete = del + tail(failed)

	// Commit checks lock what they checked (FOR SHARE) until the commit
	// ends. $1 key, $2 expected version.
	s.commitCheck = `WITH w AS (SELECT NULL::bigint AS version WHERE false)` + tail(
		`, CASE WHEN c.value IS NULL OR c.version <> $2 THEN set_config('occkit.commit', '`+commitMark+`', true) END`)
	// Absence cannot be locked: checking it inserts a tombstone (or locks
	// the existing row). It passes when it inserted, or found a tombstone;
	// a row it neither inserted nor could read (committed after the
	// statement's snapshot) fails it, and the commit runs again.
	// $1 key, $2 write id.
	s.commitCheckNone = `WITH w AS (
    INSERT INTO ` + t + ` AS r (key, value, write_id) VALUES ($1, NULL, $2)
    ON CONFLICT (key) DO UPDATE SET write_id = r.write_id WHERE false
    RETURNING version)` + tail(
		`, CASE WHEN w.version IS NULL AND (c.version IS NULL OR c.value IS NOT NULL) THEN set_config('occkit.commit', '`+commitMark+`', true) END`)
	// The guard ends every commit: when an operation failed, it fails
	// (the mark, not an integer, cast to one), which rolls back the whole
	// implicit transaction. A plain statement, not a DO block: a DO block
	// compiles its PL/pgSQL again on every commit (docs/performance.md).
	s.commitGuard = `SELECT CASE WHEN current_setting('occkit.commit', true) = '` + commitMark + `' THEN current_setting('occkit.commit', true)::int END`

	s.sqlResolve = `SELECT version, value IS NULL, write_id FROM ` + t + ` WHERE key = $1`
	s.sqlResolveMany = `SELECT key, version, value IS NULL, write_id FROM ` + t + ` WHERE key = ANY($1)`
	s.sqlLockRead = `SELECT value, version FROM ` + t + ` WHERE key = $1 AND value IS NOT NULL FOR UPDATE`
}

// commitMark is the value of the setting occkit.commit by which an
// operation of a commit that failed marks the transaction for the guard;
// the guard's error quotes it ('invalid input syntax for type integer').
const commitMark = "occkit: commit rolled back: a version check failed"

// pgVersion returns v as a bigint; a version no bigint can hold matches no
// row.
func pgVersion(v cas.Version) int64 {
	if v > math.MaxInt64 {
		return -1
	}
	return int64(v)
}

// checkToken refuses a fencing token a bigint column cannot hold.
func checkToken(key string, token uint64) error {
	if token > math.MaxInt64 {
		return &cas.KeyError{Op: "compare-and-swap", Key: key,
			Err: fmt.Errorf("%w: fencing token %d is above PostgreSQL's bigint maximum", cas.ErrTooLarge, token)}
	}
	return nil
}

// Get implements cas.Store. It is one SELECT, on Config.ReadPool when
// set.
func (s *Store) Get(ctx context.Context, key string) (cas.Item, error) {
	if err := s.limits.Get(ctx, key); err != nil {
		return cas.Item{}, err
	}
	return sqlrows.Item(key, s.read.QueryRow(ctx, s.sqlGet, key), func(err error) error { return readError("get", key, err) })
}

// GetMany implements cas.BatchGetter with one SELECT (WHERE key IN ($1,
// ...) for up to 8 keys, planned once per connection; key = ANY($1)
// beyond): one round trip, one snapshot, on Config.ReadPool when set.
func (s *Store) GetMany(ctx context.Context, keys []string) ([]cas.Item, error) {
	if err := s.limits.GetMany(ctx, keys); err != nil {
		return nil, err
	}
	if len(keys) == 0 {
		return []cas.Item{}, nil
	}
	sql, args := listed(s.sqlGetMany, &s.sqlGetList, keys)
	rows, err := s.read.Query(ctx, sql, args...)
	if err != nil {
		return nil, readError("get-many", keys[0], err)
	}
	defer rows.Close()
	out, err := sqlrows.Items(keys, rows)
	if err != nil {
		return nil, readError("get-many", keys[0], err)
	}
	return out, nil
}

// CompareAndSwap implements cas.Store. It is one statement: on a conflict
// the key's current item comes back in the same round trip
// (ConflictError.HasCurrent is always true).
func (s *Store) CompareAndSwap(ctx context.Context, key string, expected cas.Version, value []byte) (cas.Version, error) {
	if err := s.limits.Put(ctx, key, value); err != nil {
		return 0, err
	}
	return s.write(ctx, "compare-and-swap", key, expected, value, 0, false)
}

// CompareAndSwapFenced implements cas.FencedStore. Tokens are stored in a
// bigint column: a token above math.MaxInt64 fails with cas.ErrTooLarge.
func (s *Store) CompareAndSwapFenced(ctx context.Context, key string, expected cas.Version, token uint64, value []byte) (cas.Version, error) {
	if err := s.limits.Put(ctx, key, value); err != nil {
		return 0, err
	}
	if err := checkToken(key, token); err != nil {
		return 0, err
	}
	return s.write(ctx, "compare-and-swap", key, expected, value, token, true)
}

// CompareAndDelete implements cas.Store. The deleted key leaves a
// tombstone row (see the package documentation).
func (s *Store) CompareAndDelete(ctx context.Context, key string, expected cas.Version) error {
	if err := s.limits.Delete(ctx, key, expected); err != nil {
		return err
	}
	_, err := s.write(ctx, "compare-and-delete", key, expected, nil, 0, false)
	return err
}
