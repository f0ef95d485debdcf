package sqlcas

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"

	"github.com/occkit/occkit/cas"
)

// MySQL has no UPDATE ... RETURNING and no data-modifying CTE, so a delta
// and its record cannot be one statement; as a transaction sent statement
// by statement they are four round trips, and the key's row stays locked
// across three of them. A stored procedure runs the same transaction on
// the server in one round trip: CreateTable creates it beside the tables
// (<table>_add_v1), and Add calls it. Where it is missing (a database the
// store's user may not create routines in, or a table created before it
// existed), Add runs the transaction statement by statement.

// mysqlNoProcedure is ER_SP_DOES_NOT_EXIST, mysqlProcedureExists
// ER_SP_ALREADY_EXISTS; the access errors leave the procedure to a user
// who may create it.
const (
	mysqlNoProcedure     = 1305
	mysqlProcedureExists = 1304
)

// mysqlProcedure is the delta procedure of a MySQL store.
type mysqlProcedure struct {
	name    string // quoted
	ddl     string
	call    string
	missing atomic.Bool // the server said it does not exist
}

// newMySQLProcedure returns the procedure of table (quoted) and its delta
// table, or nil when its name cannot be made.
func newMySQLProcedure(name, table, deltas string, maxKey int) *mysqlProcedure {
	quoted, err := MySQL.quote(name + "_add_v1")
	if err != nil {
		return nil
	}
	num := deltaNum(MySQL)
	p := &mysqlProcedure{name: quoted}
	// The update leaves the new version in LAST_INSERT_ID and the new
	// value in a session variable, as the statement-by-statement
	// transaction's does, instead of a read of the row after it (a
	// procedure created with that read, before 2026-12-06, answers
	// alike: drop it and run CreateTable again to have this one).
	//
	// Replies, one row: ('ok', version, value) applied; ('done', version,
	// value) applied before, by a run under the same write id;
	// ('refused', version, value) the key's row (NULLs: none), when the
	// bounds refused the delta or the key is absent.
	p.ddl = fmt.Sprintf(`CREATE PROCEDURE %[1]s(IN p_k VARBINARY(%[2]d), IN p_n BIGINT, IN p_id BINARY(16), IN p_lo BIGINT, IN p_hi BIGINT)
    MODIFIES SQL DATA
BEGIN
    DECLARE EXIT HANDLER FOR 1062
    BEGIN
        ROLLBACK;
        SELECT 'done', version, value FROM %[4]s WHERE write_id = p_id;
    END;
    DECLARE EXIT HANDLER FOR SQLEXCEPTION
    BEGIN
        ROLLBACK;
        RESIGNAL;
    END;
    START TRANSACTION;
    UPDATE %[3]s SET value = CAST(@occkit_delta := (%[5]s + p_n) AS CHAR), version = LAST_INSERT_ID(version + 1), write_id = p_id
        WHERE k = p_k AND %[5]s BETWEEN p_lo AND p_hi;
    IF ROW_COUNT() = 0 THEN
        ROLLBACK;
        SELECT 'refused', version, value FROM %[3]s WHERE k = p_k;
    ELSE
        INSERT INTO %[4]s (write_id, k, version, value) VALUES (p_id, p_k, LAST_INSERT_ID(), @occkit_delta);
        COMMIT;
        SELECT 'ok', LAST_INSERT_ID(), @occkit_delta;
    END IF;
END`, quoted, maxKey, table, deltas, num)
	p.call = `CALL ` + quoted + `(?, ?, ?, ?, ?)`
	return p
}

// create creates the procedure unless it exists. A user who may not
// create routines leaves it missing: Add then runs its transaction
// statement by statement.
func (p *mysqlProcedure) create(ctx context.Context, q Querier) error {
	_, err := q.ExecContext(ctx, p.ddl)
	me, ok := asMySQL(err)
	switch {
	case err == nil, ok && me.Number == mysqlProcedureExists:
		return nil
	case ok && (me.Number == 1044 || me.Number == 1142 || me.Number == 1370): // access denied
		return nil
	}
	return fmt.Errorf("sqlcas: create procedure %s: %w", p.name, err)
}

// errNoProcedure: the procedure does not exist; run the transaction.
var errNoProcedure = errors.New("sqlcas: no delta procedure")

// addViaProcedure is a delta by the procedure, or by the transaction
// where the procedure does not exist or the key is absent.
func (s *Store) addViaProcedure(ctx context.Context, ds *deltaStatements, key string, n int64, b cas.Bounds, vals *[numSlots]any) (int64, cas.Version, error) {
	v, ver, err := s.addProcedure(ctx, ds, key, n, b, vals)
	if errors.Is(err, errNoProcedure) {
		return s.addOnce(ctx, ds, key, n, b, vals)
	}
	return v, ver, err
}

// addProcedure runs a delta as one CALL. It returns errNoProcedure when
// the server has no such procedure, and the errors of addOnce otherwise
// (errDeltaDone is answered here, with the recorded outcome).
func (s *Store) addProcedure(ctx context.Context, ds *deltaStatements, key string, n int64, b cas.Bounds, vals *[numSlots]any) (int64, cas.Version, error) {
	p := ds.proc
	if p == nil || p.missing.Load() {
		return 0, 0, errNoProcedure
	}
	var (
		status string
		ver    sql.NullInt64
		val    []byte
	)
	id := vals[slotID]
	err := s.q.QueryRowContext(ctx, p.call, key, n, id, vals[slotLo], vals[slotHi]).Scan(&status, &ver, &val)
	if me, ok := asMySQL(err); ok && me.Number == mysqlNoProcedure {
		p.missing.Store(true)
		return 0, 0, errNoProcedure
	}
	if errors.Is(err, sql.ErrNoRows) {
		// Refused, and the key has no row: the transaction inserts it.
		return 0, 0, errNoProcedure
	}
	if err != nil {
		return 0, 0, err
	}
	switch status {
	case "ok", "done":
		v, err := cas.ParseInt(key, val)
		if err != nil || !ver.Valid {
			return 0, 0, fmt.Errorf("sqlcas: add %q: the procedure answered %s %v %q", key, status, ver, val)
		}
		return v, cas.Version(ver.Int64), nil
	case "refused":
		var cur int64
		if val != nil {
			var err error
			if cur, err = cas.ParseInt(key, val); err != nil {
				return 0, 0, err
			}
		}
		if b.Allows(cur, n) {
			return 0, 0, errDeltaRace // changed since the update: again
		}
		return 0, 0, &cas.BoundError{Key: key, Add: n, Bounds: b, Current: cur, HasCurrent: true}
	}
	return 0, 0, fmt.Errorf("sqlcas: add %q: the procedure answered %q", key, strings.ToValidUTF8(status, "?"))
}
