package pgcas

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/internal/writeid"
)

// DefaultDeltaRetention is how long a Store keeps the ids of applied deltas
// when Config.DeltaRetention is zero.
const DefaultDeltaRetention = 10 * time.Minute

// deltaPruneEvery is how many deltas of a Store run between two prunes of
// its delta table: each prune removes what aged out since the last.
const deltaPruneEvery = 256

// deltaResolveFor bounds how long Add keeps trying to learn the outcome of
// a delta whose reply was lost (a restarting server included), past the
// caller's deadline if need be, before it returns a *cas.AmbiguousError.
// It stays far below the retention, so the delta's id is still there to
// refuse a second application.
const deltaResolveFor = 10 * time.Second

// deltaState is a Store's delta machinery, set up by New.
type deltaState struct {
	table     string // the delta table, quoted; "" when err is set
	rawName   string // its name, as the server's errors give it
	err       error  // why the store has no delta table name
	retention time.Duration
	sqlAdd    string // the delta of an existing row
	sqlApply  string // the delta of a row it applies to, and nothing else
	sqlAddNew string // the delta that creates an absent key
	sqlPrune  string // the records that aged out
	sqlDone   string // the recorded outcome of a delta id
	runs      atomic.Uint64
}

// deltaTableName returns the quoted delta table of a store on table.
func deltaTableName(cfg Config) (string, error) {
	name := cfg.DeltaTable
	if name == "" {
		t := cfg.Table
		if t == "" {
			t = DefaultTable
		}
		name = t + "_deltas"
	}
	return quoteTable(cfg.Schema, name, "")
}

// deltaDDL returns the delta table's DDL.
func (s *Store) deltaDDL() string {
	if s.delta.table == "" {
		return ""
	}
	return fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s (
    write_id uuid PRIMARY KEY,                     -- a delta's id, time-ordered: applied at most once
    key      text COLLATE "C" NOT NULL,
    version  bigint NOT NULL,                      -- the version and value the delta made
    value    bigint NOT NULL,
    at       timestamptz NOT NULL DEFAULT now()    -- pruned after Config.DeltaRetention
)`, s.delta.table)
}

// prepareDelta builds the delta statements.
//
// $1 key, $2 n, $3 write id, $4 lowest and $5 highest current value the
// delta accepts (sqlApply takes these five; sqlAdd $6 and $7 too, below;
// sqlAddNew the first three).
//
// The update's condition is evaluated on the latest committed row after
// waiting for its lock (READ COMMITTED re-checks it), so concurrent deltas
// of one key queue on the row and never conflict. Only a value that is the
// canonical decimal text of an integer takes part: anything else matches
// no branch of the CASE, is NULL, and leaves the row alone. The insert of
// the delta's id into the delta table makes the statement fail with a
// unique violation, rolling the whole statement back, when the same delta
// was already applied: that is how a delta sent again after a lost reply
// is applied at most once.
func (s *Store) prepareDelta() {
	d := &s.delta
	if d.table == "" {
		return
	}
	t := s.table
	num := `(CASE WHEN r.value IS NULL THEN 0
          WHEN octet_length(r.value) <= 20 AND encode(r.value, 'escape') ~ '^(0|-?[1-9][0-9]{0,18})$'
          THEN encode(r.value, 'escape')::numeric END)`
	// The update of an existing row, its record, and the current row when
	// the bounds refused it; on a send made again after a lost reply ($6),
	// a refusal is recorded too (version 0; value 1 when the value was
	// not an integer), so that the first send, held up on its way and
	// arriving after the value moved, fails on the record instead of
	// applying a delta its caller was told was refused. $7 records the
	// refusal of an absent key that the delta may not create (a resend
	// whose bounds exclude 0), so that a first send arriving after the
	// key was created fails alike; a delta that may create one goes on to
	// sqlAddNew under the same id instead, whose record does that.
	d.sqlAdd = `WITH u AS (
    UPDATE ` + t + ` AS r SET value = convert_to((` + num + ` + $2::bigint)::text, 'UTF8'), version = DEFAULT, write_id = $3::uuid
    WHERE r.key = $1 AND ` + num + ` BETWEEN $4::bigint AND $5::bigint
    RETURNING r.version, r.value),
rec AS (
    INSERT INTO ` + d.table + ` (write_id, key, version, value)
    SELECT $3::uuid, $1, version, encode(value, 'escape')::bigint FROM u),
cur AS (
    SELECT version, value FROM ` + t + ` WHERE key = $1 AND NOT EXISTS (SELECT FROM u) FOR SHARE),
ref AS (
    INSERT INTO ` + d.table + ` (write_id, key, version, value)
    SELECT $3::uuid, $1, 0, CASE WHEN r.version IS NOT NULL AND ` + num + ` IS NULL THEN 1 ELSE 0 END
    FROM (SELECT) one LEFT JOIN cur AS r ON true
    WHERE NOT EXISTS (SELECT FROM u) AND (($6::boolean AND r.version IS NOT NULL) OR ($7::boolean AND r.version IS NULL)))
SELECT u.version, u.value, c.version, c.value
FROM (SELECT) one LEFT JOIN u ON true LEFT JOIN cur c ON true`
	// The first send of a delta: the update and its record, with no work
	// for the other cases. The value is read as an int64 only when its
	// text is one's canonical form; when nothing comes back (a refusal,
	// an absent key or tombstone, a value that is not a canonical
	// integer) or the server cannot read the value as one (a data
	// exception), Add sends sqlAdd, which says why. A refusal is not
	// recorded here: only a send made again after a lost reply records
	// one, and this is never one.
	v := `convert_from(r.value, 'UTF8')`
	d.sqlApply = `WITH u AS (
    UPDATE ` + t + ` AS r SET value = convert_to((` + v + `::bigint + $2::bigint)::text, 'UTF8'), version = DEFAULT, write_id = $3::uuid
    WHERE r.key = $1 AND ` + v + `::bigint BETWEEN $4::bigint AND $5::bigint AND ` + v + `::bigint::text = ` + v + `
    RETURNING r.version, r.value)
INSERT INTO ` + d.table + ` (write_id, key, version, value)
SELECT $3::uuid, $1, version, convert_from(value, 'UTF8')::bigint FROM u
RETURNING version, value`
	// The insert of an absent key (sent when sqlAdd found no row), its
	// record, and the current row when a create won the race.
	d.sqlAddNew = `WITH i AS (
    INSERT INTO ` + t + ` (key, value, write_id) VALUES ($1, convert_to($2::bigint::text, 'UTF8'), $3::uuid)
    ON CONFLICT (key) DO NOTHING
    RETURNING version, value),
rec AS (
    INSERT INTO ` + d.table + ` (write_id, key, version, value)
    SELECT $3::uuid, $1, version, $2::bigint FROM i)
SELECT i.version, i.value, NULL::bigint, NULL::bytea FROM (SELECT) one LEFT JOIN i ON true`
	d.sqlPrune = `DELETE FROM ` + d.table + ` WHERE write_id < $1::uuid AND at < now() - make_interval(secs => $2::float8)`
	d.sqlDone = `SELECT version, value FROM ` + d.table + ` WHERE write_id = $1`
}

// Add implements cas.Adder with one statement when the delta applies:
// the row is updated in place by the server and the delta's id is
// recorded in the delta table. When it does not (the bounds refuse it,
// the key is absent, the value is not an integer), a second statement
// says which and returns the key's current row with a refusal; a third
// inserts an absent key the bounds let the delta create. Concurrent
// deltas of one key wait for each other on the row and never conflict.
//
// When the reply is lost, Add sends the same delta again, with the same
// id, until it gets an answer (for up to 10 seconds, past ctx's deadline
// if need be; at once ambiguous if ctx had ended): the delta table
// refuses a second application of an id, so the answer is either the
// delta applied now or the record of its first application. Only when no
// answer comes does Add return a *cas.AmbiguousError naming the id. The
// delta table (Config.DeltaTable) must exist: CreateTable makes it.
func (s *Store) Add(ctx context.Context, key string, n int64, b cas.Bounds) (int64, cas.Version, error) {
	lo, hi, err := s.limits.Add(ctx, key, n, b)
	if err != nil {
		return 0, 0, err
	}
	if s.delta.err != nil {
		return 0, 0, &cas.KeyError{Op: "add", Key: key, Err: s.delta.err}
	}
	create := lo <= 0 && 0 <= hi
	start := time.Now()
	id := writeid.Timed(start) // sorts by time, for the prune
	var lost error             // the error that lost the first reply, while resolving
	insert := false
	for run := 1; ; run++ {
		var (
			newVer, curVer *int64
			newVal, curVal []byte
			err            error
		)
		switch {
		case run == 1:
			// The common case first: the delta applies (sqlApply).
			var ver, v int64
			err = s.pool.QueryRow(ctx, s.delta.sqlApply, key, n, id, lo, hi).Scan(&ver, &v)
			switch {
			case err == nil:
				s.pruneDeltas(ctx, start)
				return v, cas.Version(ver), nil
			case errors.Is(err, pgx.ErrNoRows) || dataException(err):
				continue // sqlAdd says why
			}
		case insert:
			err = s.pool.QueryRow(ctx, s.delta.sqlAddNew, key, n, id).Scan(&newVer, &newVal, &curVer, &curVal)
		default:
			err = s.pool.QueryRow(ctx, s.delta.sqlAdd, key, n, id, lo, hi, lost != nil, lost != nil && !create).Scan(&newVer, &newVal, &curVer, &curVal)
		}
		switch {
		case err == nil && newVer != nil:
			v, perr := cas.ParseInt(key, newVal)
			if perr != nil {
				return 0, 0, fmt.Errorf("pgcas: add %q: the server wrote %q: %w", key, newVal, perr)
			}
			s.pruneDeltas(ctx, start)
			return v, cas.Version(*newVer), nil
		case err == nil && (insert || curVer == nil && create) && run <= 2*maxWriteRuns:
			// No row: insert it. Or the insert found one (created
			// meanwhile, or by this delta's first run, whose record
			// then refuses the update): update it.
			insert = !insert
			continue
		case err == nil:
			var cur int64
			if curVer != nil && curVal != nil {
				var perr error
				if cur, perr = cas.ParseInt(key, curVal); perr != nil {
					return 0, 0, perr
				}
			}
			return 0, 0, &cas.BoundError{Key: key, Add: n, Bounds: b, Current: cur, HasCurrent: true}
		}
		var pgErr *pgconn.PgError
		switch {
		case errors.As(err, &pgErr) && pgErr.Code == codeUniqueViolation && pgErr.TableName == s.delta.rawName:
			// An earlier run of this delta was applied, or refused when
			// sent again: its record says how.
			var ver, v int64
			if err = s.pool.QueryRow(ctx, s.delta.sqlDone, id).Scan(&ver, &v); err == nil {
				if ver == 0 {
					return 0, 0, cas.RefusedOnResend(key, n, b, v == 1)
				}
				return v, cas.Version(ver), nil
			}
		case errors.As(err, &pgErr) && pgErr.Code == codeUndefinedTable && lost == nil:
			return 0, 0, &cas.KeyError{Op: "add", Key: key, Err: fmt.Errorf(
				"the delta table %s is missing (create it with Store.CreateTable, or the DDL of Store.DDL): %w", s.delta.table, err)}
		case errors.As(err, &pgErr) && lost == nil:
			if transientCodes[pgErr.Code] {
				return 0, 0, &transientError{op: "add", key: key, why: "not applied", err: err}
			}
			return 0, 0, fmt.Errorf("pgcas: add %q: %w", key, err)
		case lost == nil && !sent(err):
			return 0, 0, &transientError{op: "add", key: key, why: "not sent", err: err}
		}
		// The reply was lost (or a resolving run failed): send the delta
		// again under the same id until an answer comes, also past the
		// caller's deadline (for up to deltaResolveFor), unless the caller
		// had given up before the reply was lost.
		if lost == nil {
			if ctx.Err() != nil {
				return 0, 0, &cas.AmbiguousError{Op: "add", Key: key, WriteID: id.UUID(), Err: err}
			}
			lost = err
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), deltaResolveFor)
			defer cancel()
		}
		if ctx.Err() != nil {
			return 0, 0, &cas.AmbiguousError{Op: "add", Key: key, WriteID: id.UUID(), Err: lost}
		}
		wait := time.NewTimer(min(time.Duration(run)*20*time.Millisecond, time.Second))
		select {
		case <-ctx.Done():
			wait.Stop()
			return 0, 0, &cas.AmbiguousError{Op: "add", Key: key, WriteID: id.UUID(), Err: lost}
		case <-wait.C:
		}
	}
}

// pruneDeltas removes, every deltaPruneEvery deltas of s, the records
// older than the retention (counted back from start, the delta's own
// start, to which its id's time belongs).
func (s *Store) pruneDeltas(ctx context.Context, start time.Time) {
	if s.delta.runs.Add(1)%deltaPruneEvery == 0 {
		cut := writeid.Before(start.Add(-s.delta.retention))
		_, _ = s.pool.Exec(ctx, s.delta.sqlPrune, cut, s.delta.retention.Seconds())
	}
}

// dataException reports a statement refused for a value it could not
// convert (SQLSTATE class 22: not a number, out of range, not UTF-8):
// nothing was written.
func dataException(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && strings.HasPrefix(pgErr.Code, "22")
}

// deltaRetention is the retention a Config asks for.
func deltaRetention(cfg Config) time.Duration {
	if cfg.DeltaRetention > 0 {
		return max(cfg.DeltaRetention, 2*deltaResolveFor)
	}
	return DefaultDeltaRetention
}
