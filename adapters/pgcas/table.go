package pgcas

import (
	"context"
	"errors"
	"fmt"
	"math"
	"reflect"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/internal/rowupdate"
)

// TableConfig describes a table of the application's own for Table.
type TableConfig struct {
	// Table is the table's name (one identifier, always quoted). Required.
	Table string
	// Schema is the schema holding the table. Empty means the first
	// schema of the connection's search_path.
	Schema string
	// KeyColumn is the primary key column. Empty means "id".
	KeyColumn string
	// VersionColumn is the integer version column. Empty means
	// "version".
	VersionColumn string
	// FenceColumn is an optional integer column holding the largest
	// fencing token that has written the row, for UpdateFenced. Empty
	// means none.
	FenceColumn string
	// VersionSequence is the sequence versions are drawn from (in
	// Schema), shared by every row of the table. Empty means
	// "<Table>_<VersionColumn>_seq", the name a bigserial version column
	// gets. It must exist and must not CYCLE.
	VersionSequence string
	// ReadPool, if set, is where Get and the reads of Modify and
	// ModifyMany go: a pool on a streaming replica of the pool's server
	// (a hot standby), with the table on its search_path. Every write,
	// the current row a conflict carries, the exclusive update's locking
	// read and everything in a transaction go to NewTable's pool, the
	// primary. A version read on a replica that lags only makes the write
	// that follows it conflict; the retry starts from the current row the
	// conflict carried, read on the primary (see "Reads from a replica"
	// in the package documentation). Versions are drawn from the
	// primary's sequence. Nil means NewTable's pool.
	ReadPool *pgxpool.Pool
}

// Table is a repository over a table of the application's own whose rows
// carry a version column: reads return the version, and every write is
// conditional on it, in one statement. It replaces "SELECT ... FOR UPDATE,
// change, UPDATE" in repository code with an optimistic read-modify-write
// that occ.Retry runs again on a conflict (see the package documentation).
//
// Rows map to T, a struct, the way pgx.RowToStructByName maps them: each
// exported field is a column named by its `db` tag (required: Table
// writes SQL with these names), `db:"-"` skips a field, and embedded
// structs are flattened. T must have fields for the key and version
// columns (and the fence column, when configured); the version field is
// any integer type.
//
// The version lives in the row: Get fills the version field in, Update
// expects the version its row's field holds, and every write returns the
// row as stored with its new version. Versions are drawn with nextval()
// from TableConfig.VersionSequence in the writing statement itself, so a
// key's versions strictly increase over its whole history, also across
// Delete and a later Insert of the same key: a caller holding a version of
// a deleted row can never overwrite the row inserted after it (no ABA).
// They are not consecutive. One fine point: an INSERT evaluates nextval()
// before it checks the key's uniqueness, so an Insert racing an Update
// and a Delete of the same key can store a value drawn just before the
// deleted row's last version, lower than it; the value is still one no
// row ever had (a sequence hands each out once), so no version a caller
// holds can match it. docs/tables.md describes the shape that pgcas,
// sqlcas and dynamocas tables share.
//
// A Table is safe for concurrent use.
type Table[T any] struct {
	pool    *pgxpool.Pool
	name    string              // quoted table
	nextval string              // nextval('<sequence>'::regclass)
	layout  rowupdate.Layout[T] // where the key, version and other columns live in T
	selCols string
	sqlGet  string
	sqlUpd  string
	sqlUpdF string
	sqlDel  string
	sqlTail string // the end of a conditional write: the row read when the write matched none, the flags

	rows *rowupdate.TableRows[T] // Modify's bridge onto occ (turns, combiner, cache)
	txm  *rowupdate.Member[T]    // t in Txn's transactions

	q    querier      // where writes run: pool, or an exclusive update's connection, or a transaction
	rq   querier      // where Get and getMany read: TableConfig.ReadPool or q (always q inside a transaction)
	keys *keyIndexSet // the key's unique indexes, shared by copies of the Table
}

// NewTable returns a Table over cfg's table, whose rows map to T. It does
// not talk to the server.
func NewTable[T any](pool *pgxpool.Pool, cfg TableConfig) (*Table[T], error) {
	if pool == nil {
		return nil, errors.New("pgcas: NewTable: nil pool")
	}
	if cfg.Table == "" {
		return nil, errors.New("pgcas: NewTable: TableConfig.Table is empty")
	}
	name, err := quoteTable(cfg.Schema, cfg.Table, "")
	if err != nil {
		return nil, fmt.Errorf("pgcas: NewTable: %w", err)
	}
	t := &Table[T]{pool: pool, q: pool, rq: pool, keys: &keyIndexSet{}, name: name}
	if cfg.ReadPool != nil {
		t.rq = cfg.ReadPool
	}
	t.layout, err = rowupdate.NewLayout[T](quoteColumn, cfg.KeyColumn, cfg.VersionColumn, cfg.FenceColumn)
	if err != nil {
		return nil, fmt.Errorf("pgcas: NewTable[%v]: %w", reflect.TypeFor[T](), err)
	}
	seq := cfg.VersionSequence
	if seq == "" {
		seq = cfg.Table + "_" + t.layout.VersionColumn().Name + "_seq"
	}
	qseq, err := quoteTable(cfg.Schema, seq, "")
	if err != nil {
		return nil, fmt.Errorf("pgcas: NewTable: version sequence: %w", err)
	}
	t.nextval = "nextval('" + strings.ReplaceAll(qseq, "'", "''") + "'::regclass)"
	t.prepareSQL()
	t.rows = t.newRows()
	t.txm = t.newMember()
	return t, nil
}

// quoteColumn checks a column name and quotes it.
func quoteColumn(name string) (string, error) {
	if err := checkIdentifier(name); err != nil {
		return "", err
	}
	return pgx.Identifier{name}.Sanitize(), nil
}

// The statements. Update and Delete are one statement each that tells a
// stale version from a missing row: when the write matches no row, the
// same statement reads the row's current state (FOR SHARE, to see the
// latest committed version, as Store does).
func (t *Table[T]) prepareSQL() {
	t.selCols = t.layout.SelectList()
	k, v := t.layout.KeyColumn().Quoted, t.layout.VersionColumn().Quoted
	t.sqlGet = `SELECT ` + t.selCols + ` FROM ` + t.name + ` WHERE ` + k + ` = $1`

	// $1 key, $2 expected version, $3.. the writable columns, then the
	// token.
	var set []string
	arg := 3
	for i, c := range t.layout.Columns {
		if !t.layout.Writable(i) {
			continue
		}
		set = append(set, fmt.Sprintf("%s = $%d", c.Quoted, arg))
		arg++
	}
	set = append(set, v+" = "+t.nextval)
	fence := "NULL::bigint"
	if t.layout.Fence >= 0 {
		fence = "c." + t.layout.Columns[t.layout.Fence].Quoted + "::bigint"
	}
	// One row, the written one or else the current one (exactly one of
	// w and cur has a row, so COALESCE takes each column from it), or no
	// row when the key has none.
	both := make([]string, len(t.layout.Columns))
	for i, c := range t.layout.Columns {
		both[i] = "COALESCE(w." + c.Quoted + ", c." + c.Quoted + ")"
	}
	t.sqlTail = `, cur AS (
    SELECT ` + t.selCols + ` FROM ` + t.name + ` WHERE ` + k + ` = $1 AND NOT EXISTS (SELECT FROM w) FOR SHARE)
SELECT w.` + k + ` IS NOT NULL, c.` + v + `::bigint, ` + fence + `,
    ` + strings.Join(both, ", ") + `
FROM (SELECT) one LEFT JOIN w ON true LEFT JOIN cur c ON true
WHERE w.` + k + ` IS NOT NULL OR c.` + k + ` IS NOT NULL`
	tail := t.sqlTail
	update := func(where, extraSet string) string {
		s := set
		if extraSet != "" {
			s = append(append([]string(nil), set...), extraSet)
		}
		return `WITH w AS (
    UPDATE ` + t.name + ` SET ` + strings.Join(s, ", ") + `
    WHERE ` + k + ` = $1 AND ` + v + ` = $2` + where + `
    RETURNING ` + t.selCols + `)` + tail
	}
	t.sqlUpd = update("", "")
	if t.layout.Fence >= 0 {
		f := t.layout.Columns[t.layout.Fence].Quoted
		// A NULL token (a row no fenced write has touched, written by
		// code that does not know the column) counts as 0.
		t.sqlUpdF = update(fmt.Sprintf(" AND COALESCE(%s, 0) <= $%d", f, arg), fmt.Sprintf("%s = $%d", f, arg))
	}
	t.sqlDel = `WITH w AS (
    DELETE FROM ` + t.name + ` WHERE ` + k + ` = $1 AND ` + v + ` = $2
    RETURNING ` + t.selCols + `)` + tail
}

// Get returns the row with key, its version field filled in, or an error
// matching cas.ErrNotFound. It reads on TableConfig.ReadPool when set.
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
	return t.readRow(ctx, t.rq, t.sqlGet, "get", key)
}

// readRow reads the row with key on q with sql, a SELECT of t's columns.
func (t *Table[T]) readRow(ctx context.Context, q querier, sql, op string, key any) (T, error) {
	var row T
	rows, err := q.Query(ctx, sql, key)
	if err != nil {
		return row, t.opError(op, key, err)
	}
	defer rows.Close()
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return row, t.opError(op, key, err)
		}
		return row, &cas.KeyError{Op: op, Key: fmt.Sprint(key), Err: cas.ErrNotFound}
	}
	if err := rows.Scan(t.layout.Targets(&row)...); err != nil {
		return row, t.opError(op, key, err)
	}
	rows.Close()
	return row, rows.Err()
}

// Insert writes row as a new row (whatever its version field says) at a
// version drawn from the sequence, above every version the key ever had,
// and returns the row as stored, with the columns the database filled
// in. A zero key field is left out of the INSERT, for keys the
// database generates (identity, serial, defaults). A row that already
// exists fails with a *cas.ConflictError (expected version 0): a unique
// violation (23505) of the primary key, or of another unique index on the
// key column alone, also of a partition (looked up in pg_index on the
// first violation, then kept). A
// violation of any other unique constraint, such as a unique name, is a
// plain error wrapping the *pgconn.PgError: retrying will not help.
//
// A lost reply is a *cas.AmbiguousError (without a WriteID: an
// application's table has no write id to resolve it): the row may have
// been inserted. An INSERT sent again after it fails with a conflict if
// the first one applied, when the key is the caller's; with a key the
// database generates, it would insert a second row.
func (t *Table[T]) Insert(ctx context.Context, row T) (T, error) {
	rv := reflect.ValueOf(&row).Elem()
	var cols, params []string
	var args []any
	for i, c := range t.layout.Columns {
		f := rv.FieldByIndex(c.Index)
		switch {
		case i == t.layout.Version:
			cols, params = append(cols, c.Quoted), append(params, t.nextval)
			continue
		case i == t.layout.Key && f.IsZero():
			continue
		}
		args = append(args, f.Interface())
		cols, params = append(cols, c.Quoted), append(params, fmt.Sprintf("$%d", len(args)))
	}
	sql := `INSERT INTO ` + t.name + ` (` + strings.Join(cols, ", ") + `) VALUES (` + strings.Join(params, ", ") +
		`) RETURNING ` + t.selCols
	var out T
	key := t.layout.KeyOf(&row)
	if err := t.q.QueryRow(ctx, sql, args...).Scan(t.layout.Targets(&out)...); err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == codeUniqueViolation {
			isKey, lookupErr := t.violatesKey(ctx, pgErr)
			if lookupErr != nil {
				return out, fmt.Errorf("pgcas: insert %s key %v: %w (and finding the key's unique indexes failed: %w)", t.name, key, pgErr, lookupErr)
			}
			if isKey {
				return out, &cas.ConflictError{Key: fmt.Sprint(key), Expected: 0, Err: pgErr}
			}
		}
		return out, t.writeError(ctx, "insert", key, err)
	}
	return out, nil
}

// Update is the version-checked write of a row the caller holds: it
// writes row if the stored row's version is still row's version field,
// giving it a new version from the sequence, and returns the row as
// stored. The key, version and fence columns are not written from row; a
// version field of 0 (a row never read) is refused with
// cas.ErrInvalidVersion.
// A refusal is a *cas.ConflictError (errors.Is(err, cas.ErrConflict))
// that carries, from the same round trip, the row's current version
// (HasCurrent, Current.Version) while the returned T is the current row,
// so that a retry can start from it without reading again. A row that no
// longer exists is the same conflict with Current.Version 0, which also
// matches cas.ErrNotFound. (A serialization failure or deadlock is a
// conflict without the current row.)
//
// A lost reply is a *cas.AmbiguousError: the update may have applied.
func (t *Table[T]) Update(ctx context.Context, row T) (T, error) {
	return t.update(ctx, row, 0, false)
}

// UpdateFenced is Update with a fencing token: it writes only if token is
// at least the row's fence column (then stores token there; a NULL there
// counts as 0), and fails with a *cas.FencedError (errors.Is(err,
// cas.ErrFenced)) otherwise, checked before the version. It needs
// TableConfig.FenceColumn, and fails with an error matching
// errors.ErrUnsupported without it.
func (t *Table[T]) UpdateFenced(ctx context.Context, row T, token uint64) (T, error) {
	if t.layout.Fence < 0 {
		var zero T
		return zero, fmt.Errorf("pgcas: UpdateFenced on table %s without a fence column: %w", t.name, errors.ErrUnsupported)
	}
	if token > math.MaxInt64 {
		var zero T
		return zero, fmt.Errorf("pgcas: fencing token %d: %w: above PostgreSQL's bigint maximum", token, cas.ErrTooLarge)
	}
	return t.update(ctx, row, token, true)
}

func (t *Table[T]) update(ctx context.Context, row T, token uint64, fenced bool) (T, error) {
	var zero T
	sql, args, key, expected, err := t.updateSQL(row, token, fenced)
	if err != nil {
		return zero, err
	}
	for run := 1; ; run++ {
		out, cur, r, err := t.run(ctx, sql, args...)
		if err != nil {
			return zero, t.writeError(ctx, "update", key, err)
		}
		switch {
		case r.written:
			return out, nil
		case fenced && r.exists && r.fence != nil && token < uint64(*r.fence):
			return cur, &cas.FencedError{Key: fmt.Sprint(key), Token: token, Highest: uint64(*r.fence)}
		case r.stale(expected) && run < maxWriteRuns:
			continue
		}
		return cur, r.conflict(key, expected)
	}
}

// updateSQL is the statement and arguments of Update (UpdateFenced, with
// fenced) of row, with row's key and expected version.
func (t *Table[T]) updateSQL(row T, token uint64, fenced bool) (sql string, args []any, key any, expected cas.Version, err error) {
	rv := reflect.ValueOf(&row).Elem()
	key = t.layout.KeyOf(&row)
	ev := rv.FieldByIndex(t.layout.VersionColumn().Index)
	if expected = rowupdate.ToVersion(ev); expected == 0 {
		return "", nil, key, 0, rowupdate.ZeroVersion("update", key)
	}
	args = append([]any{key, ev.Interface()}, t.layout.WritableValues(&row)...)
	sql = t.sqlUpd
	if fenced {
		sql = t.sqlUpdF
		args = append(args, int64(token))
	}
	return sql, args, key, expected, nil
}

// Delete deletes the row with key if its version is expected (not 0). It
// fails like Update: a *cas.ConflictError with the current version for a
// stale version, also matching cas.ErrNotFound when there is no such row.
// The versions the row had are not reused by a later Insert of the key.
func (t *Table[T]) Delete(ctx context.Context, key any, expected cas.Version) error {
	if err := rowupdate.CheckDelete(key, expected); err != nil {
		return err
	}
	key, err := t.layout.BindKey("delete", key)
	if err != nil {
		return err
	}
	for run := 1; ; run++ {
		_, _, r, err := t.run(ctx, t.sqlDel, key, int64(expected))
		if err != nil {
			return t.writeError(ctx, "delete", key, err)
		}
		switch {
		case r.written:
			return nil
		case r.stale(expected) && run < maxWriteRuns:
			continue
		}
		return r.conflict(key, expected)
	}
}
