package sqlcas_test

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"sync"
	"testing"

	"github.com/go-sql-driver/mysql"

	"github.com/occkit/occkit/adapters/sqlcas"
	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/internal/mysqltest"
	"github.com/occkit/occkit/occ"
)

func mysqlNumber(err error) uint16 {
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		return me.Number
	}
	return 0
}

// TestMySQLNoUpdateReturning shows the fact the MySQL statements are built
// around: the server refuses UPDATE ... RETURNING, so a swap's new version
// is computed (expected + 1) and a create's comes back through
// LAST_INSERT_ID(expr) in the OK packet.
func TestMySQLNoUpdateReturning(t *testing.T) {
	ctx := context.Background()
	db := mysqltest.DB(t)
	if _, err := db.ExecContext(ctx, `CREATE TABLE t (id INT PRIMARY KEY, n INT)`); err != nil {
		t.Fatal(err)
	}
	_, err := db.ExecContext(ctx, `UPDATE t SET n = n + 1 WHERE id = 1 RETURNING n`)
	if n := mysqlNumber(err); n != 1064 { // ER_PARSE_ERROR
		t.Fatalf("UPDATE ... RETURNING: %v, want syntax error 1064", err)
	}
	if _, err := db.ExecContext(ctx, `INSERT INTO t VALUES (1, 5)`); err != nil {
		t.Fatal(err)
	}
	res, err := db.ExecContext(ctx, `UPDATE t SET n = LAST_INSERT_ID(n + 1) WHERE id = 1`)
	if err != nil {
		t.Fatal(err)
	}
	if id, _ := res.LastInsertId(); id != 6 {
		t.Fatalf("LAST_INSERT_ID(n + 1) reported %d in the OK packet, want 6", id)
	}
}

// TestMySQLClientFoundRows shows that MySQL counts changed rows, not
// matched ones, unless the DSN sets clientFoundRows, and that the store
// gives the same answers either way: its writes always change the row they
// match (the version or the value, and the write id), and a create reads
// its outcome from LAST_INSERT_ID, not from the rows affected.
func TestMySQLClientFoundRows(t *testing.T) {
	for _, found := range []bool{false, true} {
		t.Run(map[bool]string{false: "changed", true: "clientFoundRows"}[found], func(t *testing.T) {
			ctx := context.Background()
			db := mysqltest.DB(t, func(c *mysql.Config) { c.ClientFoundRows = found })
			if _, err := db.ExecContext(ctx, `CREATE TABLE t (id INT PRIMARY KEY, n INT)`); err != nil {
				t.Fatal(err)
			}
			if _, err := db.ExecContext(ctx, `INSERT INTO t VALUES (1, 5)`); err != nil {
				t.Fatal(err)
			}
			res, err := db.ExecContext(ctx, `UPDATE t SET n = 5 WHERE id = 1`) // matches, changes nothing
			if err != nil {
				t.Fatal(err)
			}
			want := int64(0)
			if found {
				want = 1
			}
			if n, _ := res.RowsAffected(); n != want {
				t.Fatalf("rows affected by an UPDATE that changes nothing = %d, want %d", n, want)
			}

			s := storeOn(t, db, sqlcas.Config{Dialect: sqlcas.MySQL})
			v1, err := s.CompareAndSwap(ctx, "k", 0, []byte("a"))
			if err != nil || v1 != 1 {
				t.Fatalf("create = v%d, %v", v1, err)
			}
			// The same value again: the write still changes the row.
			v2, err := s.CompareAndSwap(ctx, "k", v1, []byte("a"))
			if err != nil || v2 != 2 {
				t.Fatalf("swap to the same value = v%d, %v", v2, err)
			}
			// A create of an existing key changes nothing: a conflict,
			// although the row was matched.
			_, err = s.CompareAndSwap(ctx, "k", 0, []byte("a"))
			var ce *cas.ConflictError
			if !errors.As(err, &ce) || !ce.HasCurrent || ce.Current.Version != v2 {
				t.Fatalf("create of an existing key: %v, want a conflict at v%d", err, v2)
			}
			if err := s.CompareAndDelete(ctx, "k", v2); err != nil {
				t.Fatal(err)
			}
			// A create over the tombstone revives the row above its
			// versions.
			v3, err := s.CompareAndSwap(ctx, "k", 0, []byte("b"))
			if err != nil || v3 <= v2 {
				t.Fatalf("create over a tombstone = v%d, %v; want above v%d", v3, err, v2)
			}
			if _, err := s.CompareAndSwap(ctx, "k", v2, []byte("c")); !errors.Is(err, cas.ErrConflict) {
				t.Fatalf("write with the deleted row's version: %v", err)
			}
		})
	}
}

// TestMySQLDeadlockRetryable makes two transactions lock two keys in
// opposite orders through the store (inside the callers' transactions):
// InnoDB kills one with error 1213, which the store returns as a
// *cas.ConflictError keeping the *mysql.MySQLError, and Retryable accepts.
func TestMySQLDeadlockRetryable(t *testing.T) {
	ctx := context.Background()
	s := newStore(t, sqlcas.MySQL, sqlcas.Config{})
	va, _ := s.CompareAndSwap(ctx, "a", 0, []byte("0"))
	vb, _ := s.CompareAndSwap(ctx, "b", 0, []byte("0"))
	tx1, err := s.DB().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx1.Rollback()
	tx2, err := s.DB().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx2.Rollback()
	if _, err := s.With(tx1).CompareAndSwap(ctx, "a", va, []byte("1")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.With(tx2).CompareAndSwap(ctx, "b", vb, []byte("2")); err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 2)
	go func() {
		_, err := s.With(tx1).CompareAndSwap(ctx, "b", vb, []byte("1")) // waits for tx2
		errs <- err
	}()
	go func() {
		_, err := s.With(tx2).CompareAndSwap(ctx, "a", va, []byte("2")) // waits for tx1: a cycle
		errs <- err
	}()
	var deadlock error
	for range 2 {
		err := <-errs
		if mysqlNumber(err) == 1213 {
			deadlock = err
			// The victim's transaction is rolled back: the other goes on.
		}
	}
	if deadlock == nil {
		t.Fatal("no transaction got error 1213")
	}
	var me *mysql.MySQLError
	if !errors.Is(deadlock, cas.ErrConflict) || !sqlcas.Retryable(deadlock) || !errors.As(deadlock, &me) {
		t.Fatalf("deadlock %v: want a conflict that Retryable accepts", deadlock)
	}
}

// TestMySQLLockWaitTimeoutRetryable holds a row lock in one transaction
// while the store writes the row on a session whose lock wait is 1 s:
// the write fails with error 1205, applied nothing, and Retryable accepts
// it; it is neither a conflict nor ambiguous.
func TestMySQLLockWaitTimeoutRetryable(t *testing.T) {
	ctx := context.Background()
	s := newStore(t, sqlcas.MySQL, sqlcas.Config{})
	v, _ := s.CompareAndSwap(ctx, "k", 0, []byte("0"))
	holder, err := s.DB().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Rollback()
	if _, err := s.With(holder).CompareAndSwap(ctx, "k", v, []byte("held")); err != nil {
		t.Fatal(err)
	}
	conn, err := s.DB().Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, `SET SESSION innodb_lock_wait_timeout = 1`); err != nil {
		t.Fatal(err)
	}
	_, err = s.With(conn).CompareAndSwap(ctx, "k", v, []byte("waiter"))
	if mysqlNumber(err) != 1205 {
		t.Fatalf("write on a locked row: %v, want error 1205", err)
	}
	if !sqlcas.Retryable(err) || errors.Is(err, cas.ErrConflict) || errors.Is(err, cas.ErrAmbiguous) {
		t.Fatalf("lock wait timeout %v: want retryable, not a conflict, not ambiguous", err)
	}
	_ = holder.Rollback()
	it, _ := s.Get(ctx, "k")
	if string(it.Value) != "0" || it.Version != v {
		t.Fatalf("row = %+v, want it untouched", it)
	}
}

// openSQLiteDSN opens a SQLite file database with the given query string.
func openSQLiteDSN(t *testing.T, query string) (*sql.DB, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "test.db")
	db, err := sql.Open("sqlite", "file:"+path+"?"+query)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db, path
}

// TestSQLiteDeferredUpgradeBusy shows why the store begins its
// transactions with BEGIN IMMEDIATE: a deferred transaction (database/sql's
// BeginTx on a DSN without _txlock=immediate) that read before another
// connection committed cannot become the writer, and fails with
// SQLITE_BUSY without waiting for the busy timeout; Retryable accepts it.
// The store's Commit on the same database, from several goroutines, never
// meets it: it takes the write lock at BEGIN, waiting for it.
func TestSQLiteDeferredUpgradeBusy(t *testing.T) {
	ctx := context.Background()
	db, _ := openSQLiteDSN(t, "_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)") // deferred transactions
	s := storeOn(t, db, sqlcas.Config{Dialect: sqlcas.SQLite})
	v, _ := s.CompareAndSwap(ctx, "k", 0, []byte("0"))

	tx, err := db.BeginTx(ctx, nil) // BEGIN (deferred)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if _, err := s.With(tx).Get(ctx, "k"); err != nil { // starts the read snapshot
		t.Fatal(err)
	}
	if _, err := s.CompareAndSwap(ctx, "k", v, []byte("other")); err != nil { // another connection commits
		t.Fatal(err)
	}
	_, err = tx.ExecContext(ctx, `UPDATE occkit_cas SET value = x'00' WHERE k = 'k'`)
	if err == nil {
		t.Fatal("a deferred transaction with a stale snapshot became the writer")
	}
	if !sqlcas.Retryable(err) {
		t.Fatalf("upgrade failure %v: want SQLITE_BUSY, retryable", err)
	}
	_ = tx.Rollback()

	// The store's own transactions on the same DSN: BEGIN IMMEDIATE.
	const workers, each = 6, 20
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				err := occ.Txn(ctx, s, func(tx *occ.Tx) error {
					for _, k := range []string{"x", "y"} {
						v, _, err := tx.Get(k)
						if err != nil {
							return err
						}
						tx.Put(k, bump(v))
					}
					return nil
				}, occ.WithMaxAttempts(1000)) // conflicts only: no SQLITE_BUSY expected
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("commit on a deferred-transaction DSN: %v", err)
	}
}

// TestSQLiteBusyTimeoutRetryable holds the write lock on one connection
// while the store writes on another with a short busy timeout: the write
// waits, then fails with SQLITE_BUSY, applied nothing, and Retryable
// accepts it.
func TestSQLiteBusyTimeoutRetryable(t *testing.T) {
	ctx := context.Background()
	db, _ := openSQLiteDSN(t, "_pragma=busy_timeout(100)&_pragma=journal_mode(WAL)")
	s := storeOn(t, db, sqlcas.Config{Dialect: sqlcas.SQLite})
	v, _ := s.CompareAndSwap(ctx, "k", 0, []byte("0"))
	holder, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	if _, err := holder.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		t.Fatal(err)
	}
	_, err = s.CompareAndSwap(ctx, "k", v, []byte("1"))
	if !sqlcas.Retryable(err) || errors.Is(err, cas.ErrConflict) || errors.Is(err, cas.ErrAmbiguous) {
		t.Fatalf("write while another connection holds the write lock: %v, want SQLITE_BUSY, retryable", err)
	}
	_, err = s.Commit(ctx, []cas.Op{cas.Put("k", v, []byte("1"))})
	if !sqlcas.Retryable(err) {
		t.Fatalf("commit while another connection holds the write lock: %v, want SQLITE_BUSY, retryable", err)
	}
	if _, err := holder.ExecContext(ctx, "ROLLBACK"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CompareAndSwap(ctx, "k", v, []byte("1")); err != nil {
		t.Fatalf("write after the lock was released: %v", err)
	}
}
