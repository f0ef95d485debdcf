package sqlcas

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/internal/ctxwait"
	"github.com/occkit/occkit/internal/writeid"
)

// DefaultDeltaRetention is how long a Store keeps the records of applied
// deltas when Config.DeltaRetention is zero.
const DefaultDeltaRetention = 10 * time.Minute

// deltaPruneEvery is how many deltas of a Store run between two prunes of
// its delta table.
const deltaPruneEvery = 256

// deltaResolveFor bounds how long Add keeps sending a delta whose reply was
// lost, past the caller's deadline if need be, before it returns a
// *cas.AmbiguousError; far below the retention.
const deltaResolveFor = 10 * time.Second

// deltaStatements are a Store's delta SQL.
type deltaStatements struct {
	table  string // the delta table, quoted; "" when err is set
	err    error
	ddl    string
	update stmt // the delta, where the current value is within bounds
	insert stmt // an absent key, created with value @n
	read   stmt // version, value of the key (in the delta's transaction)
	record stmt // the delta's record
	// proc is MySQL's delta procedure (nil: none).
	proc *mysqlProcedure
	// updateReturning and insertReturning are SQLite's delta, without a
	// record.
	updateReturning, insertReturning stmt
	// apply is PostgreSQL's first send of a delta: its update and its
	// record in one statement, for a row the delta applies to.
	apply stmt
	// recordLast is MySQL's record after its update: the version and
	// value the update left in LAST_INSERT_ID and a session variable.
	recordLast stmt
	done       stmt // version, value recorded for a delta id
	seal       stmt // the record of a refusal (version 0) under a delta id
	prune      stmt // records older than the retention
	runs       atomic.Uint64
	keepFor    time.Duration
}

// deltaNum is the SQL of the key's current integer value: 0 for a
// tombstone, NULL for a value that is not the canonical decimal text of
// an int64 (so that no bound matches it), per dialect.
func deltaNum(d Dialect) string {
	switch d {
	case MySQL:
		return `IF(value IS NULL, 0, IF(LENGTH(value) <= 20 AND CONVERT(value USING ascii) REGEXP '^(0|-?[1-9][0-9]{0,18})$', CAST(value AS DECIMAL(20,0)), NULL))`
	case SQLite:
		return `(CASE WHEN value IS NULL THEN 0 WHEN length(value) <= 20 AND CAST(CAST(CAST(value AS TEXT) AS INTEGER) AS TEXT) = CAST(value AS TEXT) THEN CAST(CAST(value AS TEXT) AS INTEGER) END)`
	}
	return `(CASE WHEN value IS NULL THEN 0 WHEN octet_length(value) <= 20 AND encode(value, 'escape') ~ '^(0|-?[1-9][0-9]{0,18})$' THEN encode(value, 'escape')::numeric END)`
}

// deltaText is the SQL of num + @n as the stored value.
func deltaText(d Dialect, num string) string {
	switch d {
	case MySQL:
		return `CAST(` + num + ` + @n AS CHAR)`
	case SQLite:
		return `CAST(CAST(` + num + ` + @n AS TEXT) AS BLOB)`
	}
	return `convert_to((` + num + ` + @n::bigint)::text, 'UTF8')`
}

func newDeltaStatements(d Dialect, data, name string, cfg Config, maxKey int) *deltaStatements {
	ds := &deltaStatements{keepFor: DefaultDeltaRetention}
	if cfg.DeltaRetention > 0 {
		ds.keepFor = max(cfg.DeltaRetention, 2*deltaResolveFor)
	}
	dname := cfg.DeltaTable
	if dname == "" {
		dname = name + "_deltas"
	}
	table, err := d.quote(dname)
	if err != nil && d != SQLite { // SQLite needs no delta table
		ds.err = fmt.Errorf("no delta table: %w (set Config.DeltaTable)", err)
		return ds
	}
	ds.table = table
	switch d {
	case MySQL:
		ds.ddl = fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s (
    write_id BINARY(16) NOT NULL PRIMARY KEY, -- a delta's id, time-ordered: applied at most once
    k        VARBINARY(%d) NOT NULL,
    version  BIGINT NOT NULL,                  -- the version and value the delta made
    value    BIGINT NOT NULL
) ENGINE=InnoDB`, table, maxKey)
	case SQLite:
		// In process, no reply is lost: no records, no table.
	default:
		ds.ddl = fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s (
    write_id bytea  PRIMARY KEY,           -- a delta's id, time-ordered: applied at most once
    k        text   COLLATE "C" NOT NULL,
    version  bigint NOT NULL,              -- the version and value the delta made
    value    bigint NOT NULL
)`, table)
	}
	num := deltaNum(d)
	lo, hi := "@lo", "@hi"
	if d == Postgres {
		lo, hi = "@lo::bigint", "@hi::bigint"
	}
	onData := func(t string) stmt { return compile(d, t, data) }
	onDeltas := func(t string) stmt { return compile(d, t, table) }
	ds.update = onData(`UPDATE {T} SET value = ` + deltaText(d, num) + `, version = version + 1, write_id = @id
WHERE k = @k AND ` + num + ` BETWEEN ` + lo + ` AND ` + hi)
	if d == MySQL {
		ds.proc = newMySQLProcedure(name, data, table, maxKey)
		// MySQL has no RETURNING: the update reports the new version
		// through LAST_INSERT_ID(expr), the insert id of its OK packet,
		// and keeps the new value in a session variable, which the
		// record's insert stores and reports the same way (insert ids
		// are unsigned 64-bit: Go's int64 reads a negative value back). Value
		// comes before version: the assignments run left to right, and
		// the condition's columns must be read before they change.
		ds.update = onData(`UPDATE {T} SET value = CAST({VAR} := (` + num + ` + @n) AS CHAR), version = LAST_INSERT_ID(version + 1), write_id = @id
WHERE k = @k AND ` + num + ` BETWEEN ` + lo + ` AND ` + hi)
		ds.recordLast = onDeltas(`INSERT INTO {T} (write_id, k, version, value) VALUES (@id, @k, IF(LAST_INSERT_ID({VAR}) IS NULL, 0, @ver), {VAR})`)
		// A session variable is not a template parameter: named after
		// compiling.
		ds.update.text = strings.ReplaceAll(ds.update.text, "{VAR}", "@occkit_delta")
		ds.recordLast.text = strings.ReplaceAll(ds.recordLast.text, "{VAR}", "@occkit_delta")
	}
	if d == Postgres {
		// The value is read as an int64 only when its text is one's
		// canonical form; when the statement updates nothing (a refusal,
		// an absent key or tombstone, a value that is not a canonical
		// integer) or the server cannot read the value (a data
		// exception: nothing written), the transaction below says why.
		v := `convert_from(r.value, 'UTF8')`
		ds.apply = compile(d, `WITH u AS (
    UPDATE {T} AS r SET value = convert_to((`+v+`::bigint + @n::bigint)::text, 'UTF8'), version = r.version + 1, write_id = @id
    WHERE r.k = @k AND `+v+`::bigint BETWEEN @lo::bigint AND @hi::bigint AND `+v+`::bigint::text = `+v+`
    RETURNING r.version, r.value)
INSERT INTO {D} (write_id, k, version, value)
SELECT @id, @k, version, convert_from(value, 'UTF8')::bigint FROM u
RETURNING version, value`, "{T}")
		// Both tables' names in one pass, so that neither can be read
		// as the other's placeholder.
		ds.apply.text = strings.NewReplacer("{T}", data, "{D}", table).Replace(ds.apply.text)
	}
	ds.insert = onData(`INSERT INTO {T} (k, value, version, write_id, fence_token) VALUES (@k, @v, 1, @id, 0)`)
	if d == SQLite {
		// In process: no reply can be lost, so no record is kept, and a
		// delta is one statement (RETURNING), an absent key's a second.
		ds.updateReturning = onData(`UPDATE {T} SET value = ` + deltaText(d, num) + `, version = version + 1, write_id = @id
WHERE k = @k AND ` + num + ` BETWEEN @lo AND @hi RETURNING version, value`)
		ds.insertReturning = onData(`INSERT INTO {T} (k, value, version, write_id, fence_token) VALUES (@k, @v, 1, @id, 0)
ON CONFLICT (k) DO NOTHING RETURNING version, value`)
	}
	ds.read = onData(`SELECT version, value FROM {T} WHERE k = @k`)
	ds.record = onDeltas(`INSERT INTO {T} (write_id, k, version, value) VALUES (@id, @k, @ver, @val)`)
	ds.done = onDeltas(`SELECT version, value FROM {T} WHERE write_id = @id`)
	ds.seal = onDeltas(`INSERT INTO {T} (write_id, k, version, value) VALUES (@id, @k, @ver, @val)`)
	ds.prune = onDeltas(`DELETE FROM {T} WHERE write_id < @id`)
	return ds
}

// Add implements cas.Adder. On MySQL and PostgreSQL a delta is an UPDATE
// that adds n on the server where the current value lies within the
// bounds (an INSERT when the key is absent), the new row (MySQL: reported
// by the UPDATE itself through LAST_INSERT_ID and a session variable;
// PostgreSQL: read back), and the delta's record in the delta table
// (Config.DeltaTable), keyed by its write id, in one transaction of the
// store's own: four round trips on MySQL, five on PostgreSQL, with BEGIN
// and COMMIT. MySQL runs that transaction as one CALL of the store's
// procedure where it exists. PostgreSQL first sends the update and the
// record as one statement, which is all a delta that applies needs, and
// runs the transaction after it only when it updated nothing or could
// not read the value (and for a send made again after a lost reply). On
// SQLite, in process, where no reply can be lost, a delta is one UPDATE
// ... RETURNING (an INSERT ... RETURNING for an absent key) and keeps no
// record. Concurrent deltas of one key wait for each other on the row and
// never conflict.
//
// When the reply is lost, Add runs the delta again, under the same write
// id, until an answer comes (for up to 10 seconds, past ctx's deadline
// if need be; at once ambiguous if ctx had ended): the record refuses a
// second application (a duplicate key), and Add returns the recorded
// outcome. Only when no answer comes does it return a *cas.AmbiguousError.
// Inside the caller's transaction (With) a lost connection loses the
// transaction, and the error is returned as it is. The delta table must
// exist (not on SQLite): CreateTable makes it.
func (s *Store) Add(ctx context.Context, key string, n int64, b cas.Bounds) (int64, cas.Version, error) {
	lo, hi, err := s.limits.Add(ctx, key, n, b)
	if err != nil {
		return 0, 0, err
	}
	ds := s.deltas
	if ds.err != nil {
		return 0, 0, &cas.KeyError{Op: "add", Key: key, Err: ds.err}
	}
	start := time.Now()
	id := writeid.Timed(start)
	vals := [numSlots]any{slotKey: key, slotValue: cas.FormatInt(n), slotID: id[:], slotN: n, slotLo: lo, slotHi: hi}
	var lost error
	var p ctxwait.Poll
	for {
		addOnce := s.addOnce
		switch {
		case s.d == SQLite:
			addOnce = s.addInProcess
		case s.d == Postgres && lost == nil && !s.inTx:
			addOnce = s.addApplied
		case s.d == MySQL && ds.proc != nil && !s.inTx:
			// Not inside the caller's transaction: the procedure's
			// START TRANSACTION would commit it.
			addOnce = s.addViaProcedure
		}
		v, ver, err := addOnce(ctx, ds, key, n, b, &vals)
		switch {
		case err == nil:
			if ds.runs.Add(1)%deltaPruneEvery == 0 && !s.inTx {
				cut := writeid.Before(time.Now().Add(-ds.keepFor))
				pv := [numSlots]any{slotID: cut[:]}
				_, _ = s.q.ExecContext(ctx, ds.prune.text, ds.prune.args(&pv)...)
			}
			return v, ver, nil
		case errors.Is(err, errDeltaDone):
			// Applied by an earlier run: its record says how.
			v, ver, rerr := s.deltaDone(ctx, ds, id)
			switch {
			case rerr == nil:
				return v, ver, nil
			case errors.Is(rerr, errDeltaSealed):
				return 0, 0, cas.RefusedOnResend(key, n, b, v == 1)
			}
			if lost == nil {
				lost = err
			}
		case errors.Is(err, cas.ErrBound), errors.Is(err, cas.ErrNotInteger), errors.Is(err, errDeltaRace):
			if errors.Is(err, errDeltaRace) {
				continue // a create raced with another: nothing applied
			}
			if lost != nil && s.d != SQLite && !s.inTx {
				return s.sealRefusal(ctx, ds, key, id, err, lost)
			}
			return 0, 0, err
		case lost == nil && answered(err):
			if s.missingTable(err) {
				return 0, 0, &cas.KeyError{Op: "add", Key: key, Err: fmt.Errorf(
					"table %s or its delta table %s does not exist (create them with CreateTable, or the DDL of Store.DDL): %w", s.table, ds.table, err)}
			}
			return 0, 0, s.serverError("add", key, 0, err)
		case lost == nil && notSent(err):
			return 0, 0, &transientError{op: "add", key: key, why: "not sent", err: err}
		case s.inTx && !errors.Is(err, errDeltaDone):
			return 0, 0, fmt.Errorf("sqlcas: add %q inside the caller's transaction: %w", key, err)
		}
		// The reply was lost: run the delta again under the same id, also
		// past the caller's deadline (for up to deltaResolveFor), unless
		// the caller had given up before the reply was lost.
		if lost == nil {
			if ctx.Err() != nil {
				return 0, 0, &cas.AmbiguousError{Op: "add", Key: key, WriteID: id.String(), Err: err}
			}
			lost = err
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), deltaResolveFor)
			defer cancel()
		}
		if p.Wait(ctx) != nil {
			return 0, 0, &cas.AmbiguousError{Op: "add", Key: key, WriteID: id.String(), Err: lost}
		}
	}
}

var (
	// errDeltaDone: the delta's id is recorded: it was applied before.
	errDeltaDone = errors.New("sqlcas: delta already applied")
	// errDeltaRace: the key's create lost to another; nothing applied.
	errDeltaRace = errors.New("sqlcas: delta's create raced")
)

// addOnce runs one transaction of a delta.
func (s *Store) addOnce(ctx context.Context, ds *deltaStatements, key string, n int64, b cas.Bounds, vals *[numSlots]any) (int64, cas.Version, error) {
	tx, err := s.begin(ctx)
	if err != nil {
		return 0, 0, err
	}
	fail := func(err error) (int64, cas.Version, error) {
		tx.rollback()
		return 0, 0, err
	}
	res, err := tx.q.ExecContext(ctx, ds.update.text, ds.update.args(vals)...)
	if err != nil {
		return fail(err)
	}
	applied, err := res.RowsAffected()
	if err != nil {
		return fail(err)
	}
	if applied == 0 {
		var c current
		err := tx.q.QueryRowContext(ctx, s.st.lockRow.text, key).Scan(&c.version, &c.value, &c.token, &c.dead)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			if !b.Allows(0, n) {
				return fail(&cas.BoundError{Key: key, Add: n, Bounds: b, HasCurrent: true})
			}
			if _, err := tx.q.ExecContext(ctx, ds.insert.text, ds.insert.args(vals)...); err != nil {
				if isDuplicate(err) || isConflict(err) {
					return fail(errDeltaRace)
				}
				return fail(err)
			}
		case err != nil:
			return fail(err)
		default:
			var cur int64
			if !c.dead {
				if cur, err = cas.ParseInt(key, c.value); err != nil {
					return fail(err)
				}
			}
			if b.Allows(cur, n) {
				// Changed between the update and the read: try again.
				return fail(errDeltaRace)
			}
			return fail(&cas.BoundError{Key: key, Add: n, Bounds: b, Current: cur, HasCurrent: true})
		}
	}
	if applied > 0 && s.d == MySQL {
		// Four round trips: BEGIN, the update, the record, COMMIT.
		ver, err := res.LastInsertId()
		if err != nil {
			return fail(err)
		}
		rv := *vals
		rv[slotVer] = ver
		rec, err := tx.q.ExecContext(ctx, ds.recordLast.text, ds.recordLast.args(&rv)...)
		if err != nil {
			if isDuplicate(err) {
				return fail(fmt.Errorf("%w: %w", errDeltaDone, err))
			}
			return fail(err)
		}
		v, err := rec.LastInsertId()
		if err != nil {
			return fail(err)
		}
		if err := tx.commit(ctx); err != nil {
			return 0, 0, err
		}
		return v, cas.Version(ver), nil
	}
	var (
		ver int64
		raw []byte
	)
	if err := tx.q.QueryRowContext(ctx, ds.read.text, ds.read.args(vals)...).Scan(&ver, &raw); err != nil {
		return fail(err)
	}
	v, err := cas.ParseInt(key, raw)
	if err != nil {
		return fail(fmt.Errorf("sqlcas: add %q: the server wrote %q: %w", key, raw, err))
	}
	rv := *vals
	rv[slotVer], rv[slotVal] = ver, v
	if _, err := tx.q.ExecContext(ctx, ds.record.text, ds.record.args(&rv)...); err != nil {
		if isDuplicate(err) {
			return fail(fmt.Errorf("%w: %w", errDeltaDone, err))
		}
		return fail(err)
	}
	if err := tx.commit(ctx); err != nil {
		return 0, 0, err
	}
	return v, cas.Version(ver), nil
}

// addInProcess is a delta on SQLite, in the database's own process: the
// update, or for an absent key the insert, each one statement that
// returns the new row. A refused delta reads the row to say why.
func (s *Store) addInProcess(ctx context.Context, ds *deltaStatements, key string, n int64, b cas.Bounds, vals *[numSlots]any) (int64, cas.Version, error) {
	var (
		ver int64
		raw []byte
	)
	err := s.prep.queryRow(ctx, s.q, ds.updateReturning.text, ds.updateReturning.args(vals)...).Scan(&ver, &raw)
	if errors.Is(err, sql.ErrNoRows) {
		c, rerr := s.readCurrent(ctx, key)
		switch {
		case rerr != nil:
			return 0, 0, rerr
		case c.exists:
			var cur int64
			if !c.dead {
				if cur, err = cas.ParseInt(key, c.value); err != nil {
					return 0, 0, err
				}
			}
			if b.Allows(cur, n) {
				return 0, 0, errDeltaRace // changed since the update: again
			}
			return 0, 0, &cas.BoundError{Key: key, Add: n, Bounds: b, Current: cur, HasCurrent: true}
		case !b.Allows(0, n):
			return 0, 0, &cas.BoundError{Key: key, Add: n, Bounds: b, HasCurrent: true}
		}
		err = s.prep.queryRow(ctx, s.q, ds.insertReturning.text, ds.insertReturning.args(vals)...).Scan(&ver, &raw)
		if errors.Is(err, sql.ErrNoRows) {
			return 0, 0, errDeltaRace // created meanwhile
		}
	}
	if err != nil {
		return 0, 0, err
	}
	v, err := cas.ParseInt(key, raw)
	if err != nil {
		return 0, 0, fmt.Errorf("sqlcas: add %q: the server wrote %q: %w", key, raw, err)
	}
	return v, cas.Version(ver), nil
}

// deltaDone reads the recorded outcome of delta id.
func (s *Store) deltaDone(ctx context.Context, ds *deltaStatements, id writeid.ID) (int64, cas.Version, error) {
	var ver, v int64
	vals := [numSlots]any{slotID: id[:]}
	if err := s.q.QueryRowContext(ctx, ds.done.text, ds.done.args(&vals)...).Scan(&ver, &v); err != nil {
		return 0, 0, err
	}
	if ver == 0 {
		return v, 0, errDeltaSealed // a refusal's record (sealRefusal), v its flag
	}
	return v, cas.Version(ver), nil
}

// errDeltaSealed: the record under a delta's id is a refusal's.
var errDeltaSealed = errors.New("sqlcas: the delta was refused when sent again")

// sealRefusal records refusal, the answer to a delta sent again after
// its reply was lost, under the delta's id (version 0; value 1 for a value
// that was not an integer), and returns it: the first send, held up on
// its way and reaching the server after the value moved, then fails on
// the record instead of applying a delta its caller was told was
// refused. A record already there is that first send's, applied
// meanwhile, and says how. Without an answer to the record's insert, the
// delta's outcome is unknown: a *cas.AmbiguousError.
func (s *Store) sealRefusal(ctx context.Context, ds *deltaStatements, key string, id writeid.ID, refusal, lost error) (int64, cas.Version, error) {
	flag := int64(0)
	if errors.Is(refusal, cas.ErrNotInteger) {
		flag = 1
	}
	vals := [numSlots]any{slotKey: key, slotID: id[:], slotVer: int64(0), slotVal: flag}
	var p ctxwait.Poll
	for {
		_, err := s.q.ExecContext(ctx, ds.seal.text, ds.seal.args(&vals)...)
		if err == nil {
			return 0, 0, refusal
		}
		if isDuplicate(err) {
			v, ver, derr := s.deltaDone(ctx, ds, id)
			switch {
			case derr == nil:
				return v, ver, nil
			case errors.Is(derr, errDeltaSealed):
				return 0, 0, refusal
			}
		}
		if p.Wait(ctx) != nil {
			return 0, 0, &cas.AmbiguousError{Op: "add", Key: key, WriteID: id.String(), Err: lost}
		}
	}
}
