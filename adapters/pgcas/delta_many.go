package pgcas

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/internal/writeid"
)

var _ cas.ManyAdder = (*Store)(nil)

// addManySQL returns the statement of AddMany for n deltas (2 to
// maxListed). Its parameters are the keys ($1...$n), the deltas, their
// write ids, and the lowest and highest current values each accepts, each
// in the keys' order. It locks the rows of the keys in key order (so that
// two such statements cannot wait for each other), applies every delta
// its bounds allow and records it in the delta table, and returns, per
// key, the row it wrote or, for a refused delta, the row it locked. A key
// without a row has neither.
func (s *Store) addManySQL(n int) string {
	p := func(i int) string { return "$" + strconv.Itoa(i) }
	var vals strings.Builder
	for i := 1; i <= n; i++ {
		if i > 1 {
			vals.WriteString(", ")
		}
		vals.WriteString("(" + p(i) + "::text, " + p(n+i) + "::bigint, " + p(2*n+i) + "::uuid, " + p(3*n+i) + "::bigint, " + p(4*n+i) + "::bigint)")
	}
	t := s.table
	return `WITH d(key, n, id, lo, hi) AS (VALUES ` + vals.String() + `),
lk AS (
    SELECT key, version, value FROM ` + t + ` WHERE key IN (` + params(1, n) + `) ORDER BY key FOR UPDATE),
u AS (
    UPDATE ` + t + ` AS r SET value = convert_to((` + deltaNumSQL + ` + d.n)::text, 'UTF8'), version = DEFAULT, write_id = d.id
    FROM d WHERE r.key = d.key AND (SELECT count(*) FROM lk) > 0 AND ` + deltaNumSQL + ` BETWEEN d.lo AND d.hi
    RETURNING r.key, r.version, r.value, d.id),
rec AS (
    INSERT INTO ` + s.delta.table + ` (write_id, key, version, value)
    SELECT id, key, version, encode(value, 'escape')::bigint FROM u)
SELECT d.key, u.version, u.value, lk.version, lk.value
FROM d LEFT JOIN u USING (key) LEFT JOIN lk USING (key)`
}

// AddMany implements cas.ManyAdder. The deltas of up to eight keys go to
// the server as one statement, which locks their rows in key order,
// applies each delta its bounds allow, records each applied one in the
// delta table, and returns the current row of each refused one, so that
// a server that spends more on a statement than on a row applies more
// deltas per second. A delta of a key with no row is then sent on its own,
// as Add sends it. When a statement's reply is lost, each of its deltas
// is sent again on its own under its write id, until an answer comes: the
// delta table refuses a second application, as it does for Add.
func (s *Store) AddMany(ctx context.Context, deltas []cas.Delta) []cas.DeltaResult {
	out := make([]cas.DeltaResult, len(deltas))
	lo, hi, errs, all := s.limits.AddMany(ctx, deltas)
	if all == nil && s.delta.err != nil {
		all = s.delta.err
	}
	if all != nil {
		for i := range out {
			out[i].Err = all
		}
		return out
	}
	var batch []int // the deltas still to send, by index
	for i, err := range errs {
		if err != nil {
			out[i].Err = err
			continue
		}
		batch = append(batch, i)
	}
	for len(batch) > 0 {
		m := min(len(batch), maxListed)
		s.addBatch(ctx, deltas, lo, hi, batch[:m], out)
		batch = batch[m:]
	}
	return out
}

// addBatch sends the deltas of idx (at most maxListed) and sets their
// outcomes in out.
func (s *Store) addBatch(ctx context.Context, deltas []cas.Delta, lo, hi []int64, idx []int, out []cas.DeltaResult) {
	start := time.Now()
	ids := make([]writeid.ID, len(idx))
	for j := range idx {
		ids[j] = writeid.Timed(start)
	}
	alone := func(j int, lost error) {
		i := idx[j]
		d := deltas[i]
		out[i].Value, out[i].Version, out[i].Err = s.addID(ctx, d.Key, d.N, d.Bounds, lo[i], hi[i], ids[j], start, lost)
	}
	if len(idx) == 1 {
		alone(0, nil)
		return
	}
	n := len(idx)
	args := make([]any, 5*n)
	at := make(map[string]int, n)
	for j, i := range idx {
		args[j], args[n+j], args[2*n+j], args[3*n+j], args[4*n+j] = deltas[i].Key, deltas[i].N, ids[j], lo[i], hi[i]
		at[deltas[i].Key] = j
	}
	type row struct {
		newVer, curVer *int64
		newVal, curVal []byte
		seen           bool
	}
	rows := make([]row, n)
	res, err := s.pool.Query(ctx, s.delta.sqlAddMany[n], args...)
	if err == nil {
		for res.Next() {
			var (
				key string
				r   row
			)
			if err = res.Scan(&key, &r.newVer, &r.newVal, &r.curVer, &r.curVal); err != nil {
				break
			}
			if j, ok := at[key]; ok {
				r.seen = true
				rows[j] = r
			}
		}
		res.Close()
		if err == nil {
			err = res.Err()
		}
	}
	if err != nil {
		var pgErr *pgconn.PgError
		switch {
		case errors.As(err, &pgErr) && pgErr.Code == codeUndefinedTable:
			for _, i := range idx {
				out[i].Err = &cas.KeyError{Op: "add", Key: deltas[i].Key, Err: fmt.Errorf(
					"the delta table %s is missing (create it with Store.CreateTable, or the DDL of Store.DDL): %w", s.delta.table, err)}
			}
			return
		case errors.As(err, &pgErr) || !sent(err):
			// An answer from the server, or a send that never left:
			// the statement applied nothing. Each delta on its own.
			for j := range idx {
				alone(j, nil)
			}
			return
		}
		// The reply was lost: the statement applied all of its deltas
		// or none. Each is sent again under its id, which the delta
		// table lets apply once; at once ambiguous if the caller had
		// given up, as Add is.
		if ctx.Err() != nil {
			for j, i := range idx {
				out[i].Err = &cas.AmbiguousError{Op: "add", Key: deltas[i].Key, WriteID: ids[j].UUID(), Err: err}
			}
			return
		}
		for j := range idx {
			alone(j, err)
		}
		return
	}
	s.pruneDeltas(ctx, start, uint64(n))
	for j, i := range idx {
		r := rows[j]
		d := deltas[i]
		switch {
		case r.newVer != nil:
			v, perr := cas.ParseInt(d.Key, r.newVal)
			if perr != nil {
				out[i].Err = perr
				continue
			}
			out[i].Value, out[i].Version = v, cas.Version(*r.newVer)
		case r.curVer != nil:
			// Refused: the bounds, or a value that is not an integer.
			var cur int64
			if r.curVal != nil {
				var perr error
				if cur, perr = cas.ParseInt(d.Key, r.curVal); perr != nil {
					out[i].Err = perr
					continue
				}
			}
			out[i].Err = &cas.BoundError{Key: d.Key, Add: d.N, Bounds: d.Bounds, Current: cur, HasCurrent: true}
		default:
			// No row: Add inserts it (under a new id: this one applied
			// nothing).
			out[i].Value, out[i].Version, out[i].Err = s.Add(ctx, d.Key, d.N, d.Bounds)
		}
	}
}
