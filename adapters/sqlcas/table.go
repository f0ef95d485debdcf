package sqlcas

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"reflect"
	"strings"
	"sync/atomic"

	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/internal/rowupdate"
)

// DefaultCounterTable is the counter table of MySQL and SQLite Tables when
// TableConfig.Counter is empty.
const DefaultCounterTable = "occkit_versions"

// TableConfig describes a table of the application's own for Table.
type TableConfig struct {
	// Dialect is the database behind the *sql.DB. Required.
	Dialect Dialect
	// Table is the table's name (one identifier, always quoted). Required.
	Table string
	// KeyColumn is the primary key column. Empty means "id".
	KeyColumn string
	// VersionColumn is the integer version column. Empty means "version".
	VersionColumn string
	// FenceColumn is an optional integer column holding the largest
	// fencing token that has written the row, for UpdateFenced. Empty
	// means none.
	FenceColumn string
	// Counter is where versions come from. PostgreSQL: a sequence, empty
	// meaning "<Table>_<VersionColumn>_seq" (a bigserial column's). MySQL
	// and SQLite: a counter table with one row per application table,
	// empty meaning DefaultCounterTable. CreateCounter creates either.
	Counter string
}

// Table is a repository over a table of the application's own whose rows
// carry a version column: reads return the version in the row, and every
// write is conditional on it. It has the method set and the errors that
// pgcas.Table and dynamocas.Table share (docs/tables.md): Get, Insert,
// Update, UpdateFenced, Modify, Delete.
//
// Rows map to T, a struct: each exported field is a column named by its
// `db` tag (required), `db:"-"` skips a field, embedded structs are
// flattened; the key and version fields are required, the version of any
// integer type.
//
// Versions of a key strictly increase over its whole history, also across
// Delete and a later Insert (no ABA). On PostgreSQL every write draws its
// version from the table's sequence, in the writing statement. On MySQL
// and SQLite, Insert draws it from the counter table's row for this table
// (one UPDATE in the INSERT's transaction), Update adds 1 to the row's
// version (so updates never wait for the counter), and Delete raises the
// counter to at least the deleted version in its transaction. Delete rows
// of a MySQL or SQLite Table through Delete, or raise the counter yourself
// (UPDATE occkit_versions SET n = GREATEST(n, <version>) WHERE name =
// '<table>'): a row deleted behind its back could come back with a
// version it had before.
//
// A Table is safe for concurrent use (as its Querier is: see With).
type Table[T any] struct {
	d    Dialect
	db   *sql.DB
	q    Querier
	inTx bool
	// callers is whether q is the caller's transaction (With), not one
	// of the table's own: what Insert's savepoint on PostgreSQL is for.
	callers bool
	// inSavepoint marks the copy Insert runs in that savepoint: a
	// conflict's current row is read after rolling back to it.
	inSavepoint bool
	name        string              // quoted table
	raw         string              // the configured table name (the counter row's name)
	layout      rowupdate.Layout[T] // where the key, version and other columns live in T
	selCols     string

	sqlGet, sqlCur        string
	sqlUpd, sqlUpdF       string
	sqlDel                string
	sqlDraw, sqlRaise     string // MySQL, SQLite: the counter
	nextval               string // PostgreSQL
	counterDDL, counterIn string

	rows *rowupdate.TableRows[T] // Modify's bridge onto occ (turns, combiner, cache)
	txm  *rowupdate.Member[T]    // t in Txn's transactions
	prep *prepared               // SQLite: statements prepared on db
	// blocks is whether the server runs a Txn's commit (pipeBlock) and
	// Add as one compound statement, as Store.blocks.
	blocks *atomic.Int32
	// autoInc is whether MySQL's key column is AUTO_INCREMENT: 0 not
	// asked yet, 1 yes, 2 no (see autoIncrement).
	autoInc *atomic.Int32
}

// NewTable returns a Table over cfg's table, whose rows map to T. It does
// not talk to the server: create the version counter with CreateCounter.
func NewTable[T any](db *sql.DB, cfg TableConfig) (*Table[T], error) {
	d := cfg.Dialect
	switch {
	case db == nil:
		return nil, errors.New("sqlcas: NewTable: nil *sql.DB")
	case !d.valid():
		return nil, fmt.Errorf("sqlcas: NewTable: TableConfig.Dialect is %v: set MySQL, SQLite or Postgres", d)
	case cfg.Table == "":
		return nil, errors.New("sqlcas: NewTable: TableConfig.Table is empty")
	}
	name, err := d.quote(cfg.Table)
	if err != nil {
		return nil, fmt.Errorf("sqlcas: NewTable: %w", err)
	}
	t := &Table[T]{d: d, db: db, q: db, name: name, raw: cfg.Table, prep: newPrepared(d, db), blocks: new(atomic.Int32), autoInc: new(atomic.Int32)}
	t.layout, err = rowupdate.NewLayout[T](d.quote, cfg.KeyColumn, cfg.VersionColumn, cfg.FenceColumn)
	if err != nil {
		return nil, fmt.Errorf("sqlcas: NewTable[%v]: %w", reflect.TypeFor[T](), err)
	}
	counter := cfg.Counter
	if counter == "" {
		counter = DefaultCounterTable
		if d == Postgres {
			counter = cfg.Table + "_" + t.layout.VersionColumn().Name + "_seq"
		}
	}
	qc, err := d.quote(counter)
	if err != nil {
		return nil, fmt.Errorf("sqlcas: NewTable: counter: %w", err)
	}
	t.prepareSQL(qc)
	t.rows = t.newRows()
	t.txm = t.newMember()
	return t, nil
}

// prepareSQL builds the statements. Parameters, in order: for Update the
// writable columns, [the token,] the key, the expected version[, the
// token]; on PostgreSQL $1 the key, $2 the expected version, $3.. the
// writable columns, then the token.
func (t *Table[T]) prepareSQL(counter string) {
	d := t.d
	t.selCols = t.layout.SelectList()
	k, v := t.layout.KeyColumn().Quoted, t.layout.VersionColumn().Quoted
	t.sqlGet = `SELECT ` + t.selCols + ` FROM ` + t.name + ` WHERE ` + k + ` = ` + d.ph(1)
	t.sqlCur = t.sqlGet + d.lockShare()
	fence := ""
	if t.layout.Fence >= 0 {
		fence = t.layout.Columns[t.layout.Fence].Quoted
	}
	if d == Postgres {
		t.nextval = "nextval('" + strings.ReplaceAll(counter, "'", "''") + "'::regclass)"
		t.counterDDL = `CREATE SEQUENCE IF NOT EXISTS ` + counter + ` AS bigint NO CYCLE`
		// Start above the versions already in the table.
		t.counterIn = `SELECT setval('` + strings.ReplaceAll(counter, "'", "''") + `'::regclass, GREATEST((SELECT COALESCE(MAX(` + v + `), 0) FROM ` + t.name + `), (SELECT last_value FROM ` + counter + `), 1))`
		var set []string
		n := 3
		for i, c := range t.layout.Columns {
			if t.layout.Writable(i) {
				set = append(set, c.Quoted+" = "+d.ph(n))
				n++
			}
		}
		set = append(set, v+" = "+t.nextval)
		tail := `, cur AS (
    SELECT ` + v + `::bigint AS v FROM ` + t.name + ` WHERE ` + k + ` = $1 AND NOT EXISTS (SELECT FROM w) FOR SHARE)
SELECT (SELECT count(*) FROM w) > 0, c.v FROM (SELECT) one LEFT JOIN cur c ON true`
		upd := func(where, extra string) string {
			s := set
			if extra != "" {
				s = append(append([]string(nil), set...), extra)
			}
			return `WITH w AS (UPDATE ` + t.name + ` SET ` + strings.Join(s, ", ") + ` WHERE ` + k + ` = $1 AND ` + v + ` = $2` + where + ` RETURNING ` + t.selCols + `)`
		}
		// Update returns the written row from w, or the current version:
		// two statements in one would need a row type; the written row is
		// read by RETURNING in updateRow instead.
		t.sqlUpd = upd("", "")
		if t.layout.Fence >= 0 {
			t.sqlUpdF = upd(fmt.Sprintf(" AND COALESCE(%s, 0) <= $%d", fence, n), fmt.Sprintf("%s = $%d", fence, n))
		}
		t.sqlDel = `WITH w AS (DELETE FROM ` + t.name + ` WHERE ` + k + ` = $1 AND ` + v + ` = $2 RETURNING 1)` + tail
		return
	}
	var set []string
	for i, c := range t.layout.Columns {
		if t.layout.Writable(i) {
			set = append(set, c.Quoted+" = ?")
		}
	}
	set = append(set, v+" = "+v+" + 1")
	t.sqlUpd = `UPDATE ` + t.name + ` SET ` + strings.Join(set, ", ") + ` WHERE ` + k + ` = ? AND ` + v + ` = ?`
	if t.layout.Fence >= 0 {
		t.sqlUpdF = `UPDATE ` + t.name + ` SET ` + strings.Join(append(set, fence+" = ?"), ", ") +
			` WHERE ` + k + ` = ? AND ` + v + ` = ? AND COALESCE(` + fence + `, 0) <= ?`
	}
	t.sqlDel = `DELETE FROM ` + t.name + ` WHERE ` + k + ` = ? AND ` + v + ` = ?`
	greatest := "GREATEST"
	if d == SQLite {
		greatest = "MAX"
		t.sqlDraw = `UPDATE ` + counter + ` SET n = n + 1 WHERE name = ? RETURNING n`
		t.counterDDL = `CREATE TABLE IF NOT EXISTS ` + counter + ` (name TEXT NOT NULL PRIMARY KEY, n INTEGER NOT NULL)`
		t.counterIn = `INSERT INTO ` + counter + ` (name, n) SELECT ?, COALESCE(MAX(` + v + `), 0) FROM ` + t.name + ` WHERE true ON CONFLICT (name) DO NOTHING`
	} else {
		t.sqlDraw = `UPDATE ` + counter + ` SET n = LAST_INSERT_ID(n + 1) WHERE name = ?`
		t.counterDDL = `CREATE TABLE IF NOT EXISTS ` + counter + ` (name VARCHAR(255) NOT NULL PRIMARY KEY, n BIGINT NOT NULL) ENGINE=InnoDB`
		t.counterIn = `INSERT IGNORE INTO ` + counter + ` (name, n) SELECT ?, COALESCE(MAX(` + v + `), 0) FROM ` + t.name
	}
	t.sqlRaise = `UPDATE ` + counter + ` SET n = ` + greatest + `(n, ?) WHERE name = ?`
}

// With returns a Table whose statements run on q, as Store.With does: in
// the caller's transaction for a *sql.Tx (Insert and Delete then update
// the counter in that transaction, which holds the counter row's lock
// until it ends), on one connection for a *sql.Conn.
func (t *Table[T]) With(q Querier) *Table[T] {
	c := *t
	c.q = q
	c.inTx = callersTx(q)
	c.callers = c.inTx
	c.rows = c.newRows() // rows of two transactions never share a write
	return &c
}

// CreateCounter creates where versions come from, if it does not exist:
// the sequence (PostgreSQL) or the counter table and this table's row in
// it (MySQL, SQLite), starting above the largest version in the table. The
// application's table must exist.
func (t *Table[T]) CreateCounter(ctx context.Context) error {
	if _, err := t.q.ExecContext(ctx, t.counterDDL); err != nil {
		return fmt.Errorf("sqlcas: create version counter for %s: %w", t.name, err)
	}
	var err error
	if t.d == Postgres {
		_, err = t.q.ExecContext(ctx, t.counterIn)
	} else {
		_, err = t.q.ExecContext(ctx, t.counterIn, t.raw)
	}
	if err != nil {
		return fmt.Errorf("sqlcas: create version counter for %s: %w", t.name, err)
	}
	return nil
}

// Get returns the row with key, its version field filled in, or an error
// matching cas.ErrNotFound.
func (t *Table[T]) Get(ctx context.Context, key any) (T, error) {
	key, err := t.layout.BindKey("get", key)
	if err != nil {
		var zero T
		return zero, err
	}
	return t.getBound(ctx, key)
}

// getBound is Get of a key already of the key field's type: the reads of
// Modify's bridge (rowupdate.Table.Get), which converted it.
func (t *Table[T]) getBound(ctx context.Context, key any) (T, error) {
	return t.get(ctx, t.q, t.sqlGet, "get", key)
}

// currentSQL reads a row after a write it refused: the latest committed
// row. Inside a caller's transaction that takes a locking read (a plain
// one would see the transaction's snapshot), and on PostgreSQL, whose new
// snapshot can briefly miss a commit a replica already shows. On MySQL a
// statement of its own sees it without a lock, which would only wait
// behind the row's other writers (measured on one hot row across
// processes: docs/benchmarks.md).
func (t *Table[T]) currentSQL() string {
	if t.inTx || t.d == Postgres {
		return t.sqlCur
	}
	return t.sqlGet
}

func (t *Table[T]) get(ctx context.Context, q Querier, query, op string, key any) (T, error) {
	var row T
	err := t.prep.queryRow(ctx, q, query, key).Scan(t.layout.Targets(&row)...)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return row, &cas.KeyError{Op: op, Key: fmt.Sprint(key), Err: cas.ErrNotFound}
	case err != nil:
		var zero T
		return zero, fmt.Errorf("sqlcas: %s %s key %v: %w", op, t.name, key, err)
	}
	return row, nil
}

// Insert writes row as a new row (its version field ignored) at a version
// above every version the key ever had, and returns it as stored (the
// columns the database filled in included). A zero key field is left out
// of the INSERT, for keys the database generates. A row that exists is a
// *cas.ConflictError with Expected 0 and, read right after, the current
// row (returned as the T, HasCurrent set).
//
// On MySQL and SQLite it is one transaction: the counter's UPDATE, the
// INSERT (and on MySQL a SELECT of the row as stored); on PostgreSQL one
// INSERT ... RETURNING; in the caller's transaction (With) there, in a
// savepoint, so that a conflict leaves that transaction usable as it does
// on MySQL and SQLite. A lost reply is a *cas.AmbiguousError.
func (t *Table[T]) Insert(ctx context.Context, row T) (T, error) {
	var zero T
	keyField := reflect.ValueOf(&row).Elem().FieldByIndex(t.layout.KeyColumn().Index)
	key, genKey := keyField.Interface(), keyField.IsZero()
	if genKey && t.d == MySQL {
		// MySQL reports a generated key only for AUTO_INCREMENT
		// (LastInsertId): of a key made otherwise (DEFAULT (UUID()))
		// the row could not be read back, nor its key returned.
		auto, err := t.autoIncrement(ctx)
		if err != nil {
			return zero, fmt.Errorf("sqlcas: insert %s: %w", t.name, err)
		}
		if !auto {
			return zero, &cas.KeyError{Op: "insert", Key: fmt.Sprint(key), Err: fmt.Errorf("%w: the row's key is zero and %s's key column %s is not AUTO_INCREMENT, the one generated key MySQL reports: set the key", cas.ErrInvalidKey, t.name, t.layout.KeyColumn().Quoted)}
		}
	}
	if t.callers && t.d == Postgres {
		// A duplicate key would abort the caller's whole transaction on
		// PostgreSQL: the insert runs in a savepoint, rolled back to on
		// failure, so that a conflict leaves the transaction usable (as
		// it does on MySQL and SQLite) and its current row readable.
		const sp = "occkit_insert"
		if _, err := t.q.ExecContext(ctx, "SAVEPOINT "+sp); err != nil {
			return zero, t.writeError("insert", key, err, false)
		}
		in := *t
		in.inTx, in.inSavepoint = false, true // one statement, no transaction of its own
		out, err := in.insert(ctx, row)
		if err != nil {
			bg := context.WithoutCancel(ctx)
			if _, rerr := t.q.ExecContext(bg, "ROLLBACK TO SAVEPOINT "+sp); rerr == nil {
				_, _ = t.q.ExecContext(bg, "RELEASE SAVEPOINT "+sp)
			}
			var ce *cas.ConflictError
			if errors.As(err, &ce) && !ce.HasCurrent {
				if cur, gerr := t.get(ctx, t.q, t.currentSQL(), "insert", key); gerr == nil {
					ce.HasCurrent, ce.Current = true, cas.Item{Key: fmt.Sprint(key), Version: t.layout.VersionOf(&cur)}
					return cur, err
				}
			}
			return out, err
		}
		if _, err := t.q.ExecContext(ctx, "RELEASE SAVEPOINT "+sp); err != nil {
			return zero, t.writeError("insert", key, err, true)
		}
		return out, nil
	}
	return t.insert(ctx, row)
}

// insert is Insert once the checks are made; on PostgreSQL inside the
// caller's transaction, within Insert's savepoint.
func (t *Table[T]) insert(ctx context.Context, row T) (T, error) {
	var zero T
	rv := reflect.ValueOf(&row).Elem()
	keyField := rv.FieldByIndex(t.layout.KeyColumn().Index)
	key := keyField.Interface()
	genKey := keyField.IsZero()
	var cols, params []string
	var args []any
	n, verArg := 1, -1
	for i, c := range t.layout.Columns {
		f := rv.FieldByIndex(c.Index)
		switch {
		case i == t.layout.Version:
			cols = append(cols, c.Quoted)
			if t.d == Postgres {
				params = append(params, t.nextval)
			} else {
				params = append(params, t.d.ph(n))
				verArg = len(args)
				args = append(args, nil) // the version drawn, set below
				n++
			}
			continue
		case i == t.layout.Key && genKey:
			continue
		}
		args = append(args, f.Interface())
		cols, params = append(cols, c.Quoted), append(params, t.d.ph(n))
		n++
	}
	query := `INSERT INTO ` + t.name + ` (` + strings.Join(cols, ", ") + `) VALUES (` + strings.Join(params, ", ") + `)`
	if t.d != MySQL {
		query += ` RETURNING ` + t.selCols
	}
	// PostgreSQL: one statement, no transaction of its own.
	tx, err := beginOn(ctx, t.d, t.q, t.inTx || t.d == Postgres)
	if err != nil {
		return zero, t.writeError("insert", key, err, false)
	}
	var out T
	err = func() error {
		if t.d != Postgres {
			v, err := t.draw(ctx, tx.q)
			if err != nil {
				return err
			}
			args[verArg] = v
		}
		if t.d != MySQL {
			return tx.q.QueryRowContext(ctx, query, args...).Scan(t.layout.Targets(&out)...)
		}
		res, err := tx.q.ExecContext(ctx, query, args...)
		if err != nil {
			return err
		}
		k := key
		if genKey {
			id, err := res.LastInsertId()
			if err != nil {
				return err
			}
			k = id
		}
		return tx.q.QueryRowContext(ctx, t.sqlGet, k).Scan(t.layout.Targets(&out)...)
	}()
	if err != nil {
		tx.rollback()
		if t.duplicate(err) {
			if t.inSavepoint {
				// The savepoint's transaction is aborted: Insert reads
				// the current row after rolling back to it.
				return zero, &cas.ConflictError{Key: fmt.Sprint(key), Err: err}
			}
			if cur, gerr := t.get(ctx, t.q, t.currentSQL(), "insert", key); gerr == nil {
				return cur, &cas.ConflictError{Key: fmt.Sprint(key), HasCurrent: true,
					Current: cas.Item{Key: fmt.Sprint(key), Version: t.layout.VersionOf(&cur)}, Err: err}
			}
			return zero, &cas.ConflictError{Key: fmt.Sprint(key), Err: err}
		}
		return zero, t.writeError("insert", key, err, t.d == Postgres)
	}
	if err := tx.commit(ctx); err != nil {
		return zero, t.writeError("insert", key, err, true)
	}
	return out, nil
}

// Update is the version-checked write of a row the caller holds: it
// writes row only if the stored version equals row's version field, gives
// it a new version, and returns the row as stored. Key, version (and
// fence) columns are not written from row. A refusal is a
// *cas.ConflictError with the current version (HasCurrent) and the
// current row as the returned T; a row that no longer exists is the same
// conflict with Current.Version 0, matching cas.ErrNotFound too.
//
// On MySQL and SQLite, the current row of a refusal costs a second
// statement (SQLite: in process; MySQL: a second round trip). On
// PostgreSQL the write and the current version come in one round trip and
// the current row in a second. A lost reply is a *cas.AmbiguousError.
func (t *Table[T]) Update(ctx context.Context, row T) (T, error) {
	return t.update(ctx, row, 0, false)
}

// UpdateFenced is Update that also requires token to be at least the
// row's fence column (NULL counts as 0) and stores token there; a smaller
// token is a *cas.FencedError, checked before the version. Without
// TableConfig.FenceColumn it fails with an error matching
// errors.ErrUnsupported.
func (t *Table[T]) UpdateFenced(ctx context.Context, row T, token uint64) (T, error) {
	var zero T
	if t.layout.Fence < 0 {
		return zero, fmt.Errorf("sqlcas: UpdateFenced on table %s without a fence column: %w", t.name, errors.ErrUnsupported)
	}
	if token > math.MaxInt64 {
		return zero, fmt.Errorf("sqlcas: fencing token %d: %w: above the largest 64-bit signed integer", token, cas.ErrTooLarge)
	}
	return t.update(ctx, row, token, true)
}
