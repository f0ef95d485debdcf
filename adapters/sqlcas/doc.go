// Package sqlcas is occkit over database/sql, for MySQL 8 and MariaDB 10.6+
// (github.com/go-sql-driver/mysql), SQLite (modernc.org/sqlite, pure Go)
// and PostgreSQL (pgx's stdlib): a versioned key-value [Store] (a
// [cas.Store], [cas.FencedStore] and [cas.Committer]), [Table], a
// version-checked repository over the application's own tables, and
// [Locker], MySQL's GET_LOCK as a hybrid.Locker with fencing tokens.
//
//	db, _ := sql.Open("sqlite", "file:app.db?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)&_txlock=immediate")
//	store, _ := sqlcas.New(db, sqlcas.Config{Dialect: sqlcas.SQLite}) // table "occkit_cas"
//	_ = store.CreateTable(ctx)
//	stock := cas.NewTyped(store, cas.JSON[int]())
//	n, _, err := occ.Update(ctx, stock, "sku-42", func(n int, _ bool) (int, error) {
//		if n == 0 {
//			return 0, ErrSoldOut
//		}
//		return n - 1, nil
//	}, occ.WithRetryable(sqlcas.Retryable))
//
// docs/sql.md is the guide: dialects, layouts, round trips, the caller's
// transaction, sqlx and sqlc.
//
// # Opening the database
//
// MySQL: set interpolateParams=true in the DSN. Without it the driver
// prepares, executes and closes every statement that has parameters: three
// round trips instead of one. The store does not depend on clientFoundRows
// (see below).
//
// SQLite: a file database in WAL mode, with a busy timeout, and
// _txlock=immediate for the transactions the application begins itself:
//
//	file:app.db?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)&_txlock=immediate
//
// The store's own transactions (Commit, Table's Insert and Delete) run
// BEGIN IMMEDIATE on a connection of their own whatever the DSN says: a
// deferred transaction that reads and then writes fails with SQLITE_BUSY
// at once when another connection wrote in between, without waiting for
// the busy timeout. A write that waited out the busy timeout fails with
// SQLITE_BUSY too; [Retryable] accepts both.
//
// PostgreSQL: stdlib.OpenDB or sql.Open("pgx", url).
//
// # Table layout
//
// A Store keeps every key in one row of its table ([Store.DDL] per dialect;
// [Store.CreateTable] creates it). On MySQL:
//
//	CREATE TABLE IF NOT EXISTS `occkit_cas` (
//	    k           VARBINARY(1024) NOT NULL PRIMARY KEY, -- MaxKeyBytes; compared as bytes
//	    value       LONGBLOB NULL,             -- NULL: deleted (a tombstone, invisible to Get)
//	    version     BIGINT NOT NULL,           -- 1 on first create, +1 with every write
//	    fence_token BIGINT NOT NULL DEFAULT 0, -- largest fencing token that has written the key
//	    write_id    BINARY(16) NOT NULL        -- the last write's id, to resolve lost replies
//	) ENGINE=InnoDB
//
// SQLite and PostgreSQL have the same columns (TEXT/BLOB/INTEGER, and
// text COLLATE "C"/bytea/bigint). Names are always quoted, never spliced
// into SQL.
//
// # How versions are made
//
// A key's row is never removed: a delete leaves a tombstone (value NULL)
// that keeps the version and the fencing token. The first create of a key
// writes version 1; every write after it, including a create over a
// tombstone, writes the row's version plus 1. So a key's versions strictly
// increase over its whole history and are never reused, also across
// delete and re-create, without a counter shared by all keys (no hot row,
// no sequence). Do not delete tombstone rows by hand: a key created again
// after its row was removed would start over at version 1. Tombstones
// cost one small row per deleted key.
//
// A Commit that expects a key absent inserts a version-0 tombstone for it
// first (a row is the only absence every dialect can lock).
//
// # Statements and round trips
//
// Get is one SELECT. On PostgreSQL a write is one statement and one round
// trip also when it fails: a data-modifying CTE makes the write, and the
// key's current row (read FOR SHARE) when it matched nothing, as pgcas
// does. MySQL has no UPDATE ... RETURNING: a swap or a delete is one
// UPDATE whose rows-affected count tells whether it applied (the new
// version is the expected one plus 1), and a create is one INSERT ... ON
// DUPLICATE KEY UPDATE that reports its new version through
// LAST_INSERT_ID(expr) in the OK packet; a refused write costs a second
// round trip, a locking read of the current row (LOCK IN SHARE MODE), so
// that the *cas.ConflictError still carries it. SQLite has RETURNING for
// the create; a refused write reads the current row with a second
// statement, in process. Every conflict carries the current item
// (HasCurrent), except when the key changed again between the refused
// write and the read three times running.
//
// MySQL counts changed rows, not matched ones, unless the DSN sets
// clientFoundRows. The store works the same either way: its swaps and
// deletes always change the row they match (the version or the value, and
// the write id), and a create reads its outcome from LAST_INSERT_ID.
//
// [Store.Commit] runs one transaction: the absence tombstones (one
// INSERT), one SELECT ... FOR UPDATE of every key in key order, the checks
// in Go, one UPDATE writing every put and delete, COMMIT: five round trips
// with BEGIN, whatever the number of keys. On MariaDB a commit whose ops
// all write keys expected live is one UPDATE in autocommit that checks
// every version and fails whole when one is stale (docs/sql.md).
//
// # Errors and lost replies
//
// Errors match the cas sentinels and keep the driver's error reachable
// with errors.As (*mysql.MySQLError, *pgconn.PgError, *sqlite.Error). A
// MySQL deadlock (1213) and a PostgreSQL serialization failure or
// deadlock (40001, 40P01) roll the transaction back and are
// *cas.ConflictError values. [Retryable] is the one classifier of what may
// be tried again: those, MySQL's lock-wait timeout (1205), SQLite's
// SQLITE_BUSY and SQLITE_LOCKED, failed reads, and writes never sent.
//
// Every write is tagged with a write id. When the connection breaks after
// a write or a COMMIT was sent, the store reads the keys back through the
// *sql.DB: its own write id in the row proves the write applied, and the
// call succeeds; otherwise it returns a *cas.AmbiguousError naming the
// write id, never a conflict, and never retries. A [Table] writes to the
// application's own table, which has no write id: a lost reply is always
// a *cas.AmbiguousError.
//
// # The caller's transaction
//
// [Store.With] and [Table.With] run the statements on a *sql.Tx (or
// sqlx.Tx, or any [Querier]) of the caller, so that occkit's writes commit
// or roll back with the application's own statements. See Store.With for
// what changes inside a transaction.
//
// # Reads from a replica
//
// [Config].ReadDB sends the Store's Get and GetMany (occ.Update's read,
// occ.Txn's reads) to a replica; everything else stays on New's *sql.DB,
// the primary, and so does everything a Store made by With runs. It is
// tested against a PostgreSQL streaming replica (a hot standby):
//
//	primary := stdlib.OpenDB(*primaryConfig)
//	replica := stdlib.OpenDB(*replicaConfig)
//	store, _ := sqlcas.New(primary, sqlcas.Config{Dialect: sqlcas.Postgres, ReadDB: replica})
//
// A replica that lags returns an older row with its older version; the
// conditional write expecting that version fails on the primary with a
// *cas.ConflictError carrying the primary's current row, from which
// occ.Update tries again at once. A key's versions only grow, on the
// primary (tombstones keep them across a delete), so a stale version never
// matches a newer row: lag costs conflicts, never lost or doubled
// writes. A caller may not read its own writes back from a replica. A
// [Table] reads from its *sql.DB only.
//
// # Limits
//
// Keys and values are checked by [cas.Limits] before anything is sent: by
// default 1 KiB keys, 1 MiB values and 100 operations per commit, set with
// Config.Limits up to [MaxKeyBytesLimit] and [MaxValueBytesLimit]. On
// MySQL the server's max_allowed_packet must hold the largest value.
// Versions and fencing tokens are signed 64-bit integers: a token above
// math.MaxInt64 fails with cas.ErrTooLarge.
//
// # Concurrency
//
// Store, Table and Locker are safe for concurrent use, as their Querier
// is: a *sql.DB is, a *sql.Tx is not. A Lease's methods may be called from
// any goroutine.
package sqlcas
