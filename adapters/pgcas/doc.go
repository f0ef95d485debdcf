// Package pgcas is occkit on PostgreSQL, through pgx v5. It has four
// parts:
//
//   - [Table], a version-checked repository over the application's own
//     tables: repository code that did "SELECT ... FOR UPDATE, change,
//     UPDATE" reads the row, changes it and writes it only if its version
//     is unchanged, with versions from a per-table sequence that are never
//     reused (the shape every adapter's Table shares, docs/tables.md);
//   - [Store], a versioned key-value store on a table of its own (a
//     [cas.Store], [cas.FencedStore] and [cas.Committer]) for occ.Update,
//     occ.Txn and fenced writes;
//   - [RunTx], serializable transactions retried on serialization failures;
//   - [Locker], advisory-lock leases with fencing tokens.
//
// # Table
//
// The table needs a version column whose values come from a sequence:
// a bigserial column has one, named "<table>_<column>_seq", which is
// [TableConfig].VersionSequence's default (docs/postgres.md migrates an
// existing table):
//
//	CREATE TABLE inventory (sku text PRIMARY KEY, stock integer NOT NULL, version bigserial NOT NULL)
//
// Rows map to a struct by `db` tags, the version travels in the row, and
// [Table.Modify] is occ.Update's loop over one row:
//
//	type Item struct {
//		SKU     string `db:"sku"`
//		Stock   int    `db:"stock"`
//		Version int64  `db:"version"`
//	}
//	items, _ := pgcas.NewTable[Item](pool, pgcas.TableConfig{Table: "inventory", KeyColumn: "sku"})
//	it, err := items.Modify(ctx, "sku-42", func(it Item, exists bool) (Item, error) {
//		if !exists || it.Stock == 0 {
//			return it, ErrSoldOut // not retried, returned as is
//		}
//		it.Stock--
//		return it, nil
//	})
//
// [Table.Get], [Table.Insert], [Table.Update], [Table.UpdateFenced] and
// [Table.Delete] are the single statements underneath, for code that
// holds a row. Update, UpdateFenced and Delete are one statement each
// that, when it does not apply, returns the row's current state (Update:
// the row, Delete: its version) with the *cas.ConflictError in the same
// round trip.
//
// # Store
//
// The Store keeps any value under a text key, for occ.Update, occ.Txn and
// fenced writes, with no schema of the application's:
//
//	pool, _ := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
//	store, _ := pgcas.New(pool, pgcas.Config{}) // table "occkit_cas"
//	_ = store.CreateTable(ctx)
//	stock := cas.NewTyped(store, cas.JSON[int]())
//	n, _, err := occ.Update(ctx, stock, "sku-42", func(n int, _ bool) (int, error) {
//		if n == 0 {
//			return 0, ErrSoldOut
//		}
//		return n - 1, nil
//	})
//
// # The Store's table layout
//
// A Store keeps every key in one row of its table ([Config] names it;
// [Store.CreateTable] creates it):
//
//	CREATE TABLE IF NOT EXISTS "occkit_cas" (
//	    key         text COLLATE "C" PRIMARY KEY,
//	    value       bytea,                                -- NULL: deleted (a tombstone, invisible to Get)
//	    version     bigint GENERATED ALWAYS AS IDENTITY,  -- from the table's own sequence: never reused
//	    fence_token bigint NOT NULL DEFAULT 0,            -- largest fencing token that has written the key
//	    write_id    uuid   NOT NULL                       -- the last write's id, to resolve lost replies
//	)
//
// Table and schema names are always quoted with pgx.Identifier, never
// spliced into SQL: any name is safe, and a name PostgreSQL would truncate
// (over 63 bytes) is refused.
//
// # How the Store makes versions
//
// Every write sets the version to the next value of the table's identity
// sequence (version = DEFAULT), evaluated after the row lock is taken. The
// sequence only grows and is shared by all keys, so a key's versions
// strictly increase and are never reused, also across delete and
// re-create; an update of the row by anyone else changes its version. Keep
// the identity's CACHE at 1 (the default): a larger cache hands each
// session its own range, and versions would no longer grow with time.
//
// # The Store's statements and round trips
//
// Get is one SELECT. CompareAndSwap, CompareAndSwapFenced and
// CompareAndDelete are one statement each, one round trip: a data-modifying
// CTE does the conditional UPDATE (or INSERT ... ON CONFLICT for expected
// version 0), and when it matched nothing the same statement reads the
// key's current row, so every *cas.ConflictError carries the current item
// (HasCurrent is true). That read uses FOR SHARE so that it sees the latest
// committed row, not the statement's snapshot. [Store.Commit] sends all its
// operations and a guard in one pgx batch, one implicit transaction, one
// round trip. A connection prepares each statement once, on first use (pgx's
// statement cache).
//
// A delete leaves a tombstone row: value NULL, the fencing token and the
// delete's write id kept. Tombstones cost a row each; those with
// fence_token = 0 may be removed at any time
// (DELETE FROM occkit_cas WHERE value IS NULL AND fence_token = 0), since
// versions come from the sequence, not from the row.
//
// The store expects the default READ COMMITTED isolation for its
// statements. Under a stricter default_transaction_isolation, concurrent
// writes fail with SQLSTATE 40001 instead, which the store returns as a
// conflict without the current item.
//
// # Errors and lost replies
//
// Errors match the cas sentinels with errors.Is and keep pgx's error
// reachable with errors.As (*pgconn.PgError). SQLSTATE 40001 and 40P01 are
// conflicts. A request that failed before it was sent (no connection, or
// one that broke first), a write the server answered with the end of the
// session (SQLSTATE 57P01 and the like, as a shutdown gives), and a read
// that failed applied nothing: [Retryable] says so, for occ.WithRetryable.
// When the connection breaks after a write was sent, the store reads the
// key back: its own write id in the row proves the write applied, and the
// call succeeds; otherwise it returns a *cas.AmbiguousError with the key
// and the write id (the row's write_id column names the last write), never
// a conflict, and never retries. [Table] writes to an application's own
// table, which has no write id: a lost reply to its Insert, Update,
// UpdateFenced or Delete is always a *cas.AmbiguousError, with an empty
// WriteID.
//
// # Reads from a replica
//
// [Config].ReadPool (and [TableConfig].ReadPool) sends the reads of the
// optimistic loop to a streaming replica, a hot standby, to take them off
// the primary: Get and GetMany (occ.Update's read, occ.Txn's reads), and
// a Table's Get and the reads of Modify and ModifyMany. Everything else
// goes to the primary: every write, the current row a conflict carries
// (read by the write statement itself), the read that resolves a lost
// reply, commits, deltas, exclusive updates and everything inside a
// transaction.
//
//	primary, _ := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
//	replica, _ := pgxpool.New(ctx, os.Getenv("REPLICA_URL"))
//	store, _ := pgcas.New(primary, pgcas.Config{ReadPool: replica})
//
// This is safe because every write is conditional on the version its read
// returned, and that condition is checked on the primary. A replica that
// lags returns an older row, with the version it had then: the write
// expecting that version finds another one on the primary and fails with
// a *cas.ConflictError carrying the primary's current row, from which
// occ.Update tries again at once, without reading the replica again.
// Versions are drawn from the primary's sequence and never reused, so a
// stale version can never match a newer row (no ABA). Nothing is lost and
// nothing is applied twice: replica lag costs conflicts, and so retries and
// round trips, never correctness. Conflicts rise with the lag and with
// how often a key is written: a key written again within the lag is read
// stale every time. With synchronous_commit off on the primary, the lag
// is at least the WAL writer's delay (wal_writer_delay, 200 ms by
// default).
//
// The condition protects what is written, not a decision not to write: a
// mutate that refuses on a stale row ("sold out", "not found") refuses
// wrongly, and nothing catches it. Confirm such refusals on the primary.
// A caller that reads from a replica may not see its own writes (a Get
// just after a CompareAndSwap may return the older row) and may see a key
// as absent that exists on the primary. A replica cancels a read that
// conflicts with the replay of the primary's changes (SQLSTATE 40001,
// "conflict with recovery"; hot_standby_feedback avoids most): [Retryable]
// accepts it, like any failed read. A table or schema exists on a replica
// only once the replica has replayed its creation.
//
// # Limits
//
// Keys and values are checked by [cas.Limits] before anything is sent:
// by default 1 KiB keys, 1 MiB values and 100 operations per commit, set
// with Config.Limits up to [MaxKeyBytesLimit] (a btree entry must fit a
// third of a page) and [MaxValueBytesLimit] (PostgreSQL's 1 GB field).
// Fencing tokens are bigints: a token above math.MaxInt64 fails with
// cas.ErrTooLarge.
//
// # Concurrency
//
// Store, Table and Locker are safe for concurrent use: they hold the
// pool and prepared SQL text; a Table also holds the names of the key's
// unique indexes once looked up, and the one bridge onto occ that its
// Modify calls share (turns at a hot row, combined writes, NewCache); a
// Locker also holds the leases it granted, which [Locker.Close] ends. The
// methods of a [Lease] may be
// called from any goroutine; the transaction of a transaction lease
// ([Lease.Tx]) is used by one goroutine at a time, as any pgx.Tx.
package pgcas
