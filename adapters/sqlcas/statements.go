package sqlcas

import (
	"strconv"
	"strings"
)

// A statement's parameters are named in its template (@k, @v, @id, @exp,
// @tok) and bound by slot, so that one template serves the positional
// placeholders of MySQL and SQLite (?, in order of appearance) and the
// numbered ones of PostgreSQL ($1..$5, each slot one number). The table's
// name is put in ({T}) after the parameters are compiled, so a name is
// never scanned for markers.
type slot uint8

const (
	slotKey slot = iota
	slotValue
	slotID
	slotExpected
	slotToken
	slotN   // a delta's n
	slotLo  // the lowest current value a delta accepts
	slotHi  // the highest
	slotVer // a version recorded
	slotVal // an integer value recorded
	numSlots
)

var slotNames = [numSlots]string{"@k", "@v", "@id", "@exp", "@tok", "@n", "@lo", "@hi", "@ver", "@val"}

// stmt is a compiled statement: its text and, for each placeholder in
// order, the slot it takes its value from.
type stmt struct {
	text  string
	slots []slot
}

// args returns the statement's arguments from the slot values.
func (s stmt) args(vals *[numSlots]any) []any {
	out := make([]any, len(s.slots))
	for i, sl := range s.slots {
		out[i] = vals[sl]
	}
	return out
}

// compile turns a template into a statement of dialect d on table.
func compile(d Dialect, template, table string) stmt {
	var b strings.Builder
	var slots []slot
	var pgNum [numSlots]int // PostgreSQL: the $n given to each slot
	for {
		i := strings.IndexByte(template, '@')
		if i < 0 {
			b.WriteString(template)
			break
		}
		b.WriteString(template[:i])
		template = template[i:]
		found := false
		for sl, name := range slotNames {
			if strings.HasPrefix(template, name) && !isNameByte(template, len(name)) {
				template = template[len(name):]
				found = true
				if d != Postgres {
					slots = append(slots, slot(sl))
					b.WriteString("?")
					break
				}
				if pgNum[sl] == 0 {
					slots = append(slots, slot(sl))
					pgNum[sl] = len(slots)
				}
				b.WriteString(d.ph(pgNum[sl]))
				break
			}
		}
		if !found {
			panic("sqlcas: unknown parameter in template: " + template)
		}
	}
	return stmt{text: strings.ReplaceAll(b.String(), "{T}", table), slots: slots}
}

func isNameByte(s string, i int) bool {
	if i >= len(s) {
		return false
	}
	c := s[i]
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// statements are a Store's compiled SQL.
type statements struct {
	get       stmt // value, version of a live key
	current   stmt // version, value, fence_token, value IS NULL: the row, tombstone or not
	committed stmt // current without a lock: the latest committed row, outside a transaction
	lockRow   stmt // current, locked for writing (UpdateExclusive)
	resolve   stmt // version, value IS NULL, write_id
	create    stmt // expected 0
	createF   stmt
	swap      stmt // expected > 0
	swapF     stmt
	del       stmt
	// swapCommit (MariaDB) is swap and, when it wrote the row, COMMIT of
	// the transaction it runs in, as one compound statement answering 1;
	// it answers 0 and leaves the transaction open when it wrote nothing.
	swapCommit stmt
	oneResult  bool // PostgreSQL: each write returns one row with the current state
}

func newStatements(d Dialect, table string) *statements {
	c := func(t string) stmt { return compile(d, t, table) }
	s := &statements{
		get:       c(`SELECT value, version FROM {T} WHERE k = @k AND value IS NOT NULL`),
		current:   c(`SELECT version, value, fence_token, value IS NULL FROM {T} WHERE k = @k` + d.lockShare()),
		committed: c(`SELECT version, value, fence_token, value IS NULL FROM {T} WHERE k = @k`),
		lockRow:   c(`SELECT version, value, fence_token, value IS NULL FROM {T} WHERE k = @k` + d.forUpdate()),
		resolve:   c(`SELECT version, value IS NULL, write_id FROM {T} WHERE k = @k`),
	}
	switch d {
	case MySQL:
		// MySQL has no RETURNING: the new version of a swap is the
		// expected one plus 1, and a create reports its version through
		// LAST_INSERT_ID(expr), which sets the insert id of the OK
		// packet: 1 for a new row, the new version of a revived
		// tombstone, 0 when nothing changed. The assignments of ON
		// DUPLICATE KEY UPDATE run left to right and see the columns
		// already assigned, so value, the column every condition reads,
		// comes last.
		const revive = `value IS NULL`
		const reviveF = `value IS NULL AND fence_token <= VALUES(fence_token)`
		create := func(cond string, fenced bool) string {
			fence := ""
			if fenced {
				fence = `
    fence_token = IF(` + cond + `, VALUES(fence_token), fence_token),`
			}
			return `INSERT INTO {T} (k, value, version, write_id, fence_token) VALUES (@k, @v, LAST_INSERT_ID(1), @id, @tok)
ON DUPLICATE KEY UPDATE
    version = IF(` + cond + `, LAST_INSERT_ID(version + 1), version + LAST_INSERT_ID(0)),
    write_id = IF(` + cond + `, VALUES(write_id), write_id),` + fence + `
    value = IF(` + cond + `, VALUES(value), value)`
		}
		s.create = c(create(revive, false))
		s.createF = c(create(reviveF, true))
	case SQLite:
		s.create = c(`INSERT INTO {T} (k, value, version, write_id, fence_token) VALUES (@k, @v, 1, @id, @tok)
ON CONFLICT (k) DO UPDATE SET value = excluded.value, version = version + 1, write_id = excluded.write_id
WHERE value IS NULL
RETURNING version`)
		s.createF = c(`INSERT INTO {T} (k, value, version, write_id, fence_token) VALUES (@k, @v, 1, @id, @tok)
ON CONFLICT (k) DO UPDATE SET value = excluded.value, version = version + 1, write_id = excluded.write_id,
    fence_token = excluded.fence_token
WHERE value IS NULL AND fence_token <= excluded.fence_token
RETURNING version`)
	case Postgres:
		s.oneResult = true
		// As in pgcas: the write, and when it matched nothing, the key's
		// current row read in the same statement, FOR SHARE so that it
		// is the latest committed row and not the statement's snapshot.
		tail := `, cur AS (
    SELECT version, value, fence_token FROM {T} WHERE k = @k AND NOT EXISTS (SELECT FROM w) FOR SHARE)
SELECT w.version, c.version, c.value, c.fence_token, c.value IS NULL
FROM (SELECT) one LEFT JOIN w ON true LEFT JOIN cur c ON true`
		s.create = c(`WITH w AS (
    INSERT INTO {T} AS r (k, value, version, write_id, fence_token) VALUES (@k, @v, 1, @id, @tok)
    ON CONFLICT (k) DO UPDATE SET value = EXCLUDED.value, version = r.version + 1, write_id = EXCLUDED.write_id
    WHERE r.value IS NULL
    RETURNING version)` + tail)
		s.createF = c(`WITH w AS (
    INSERT INTO {T} AS r (k, value, version, write_id, fence_token) VALUES (@k, @v, 1, @id, @tok)
    ON CONFLICT (k) DO UPDATE SET value = EXCLUDED.value, version = r.version + 1, write_id = EXCLUDED.write_id,
        fence_token = EXCLUDED.fence_token
    WHERE r.value IS NULL AND r.fence_token <= EXCLUDED.fence_token
    RETURNING version)` + tail)
		s.swap = c(`WITH w AS (
    UPDATE {T} SET value = @v, version = version + 1, write_id = @id
    WHERE k = @k AND version = @exp AND value IS NOT NULL
    RETURNING version)` + tail)
		s.swapF = c(`WITH w AS (
    UPDATE {T} SET value = @v, version = version + 1, write_id = @id, fence_token = @tok
    WHERE k = @k AND version = @exp AND value IS NOT NULL AND fence_token <= @tok
    RETURNING version)` + tail)
		s.del = c(`WITH w AS (
    UPDATE {T} SET value = NULL, write_id = @id
    WHERE k = @k AND version = @exp AND value IS NOT NULL
    RETURNING version)` + tail)
		return s
	}
	// MySQL and SQLite: a swap or a delete matches at most one row and
	// always changes it (the version or the value, and the write id), so
	// the rows affected tell whether it applied, whether the driver counts
	// rows matched or rows changed (MySQL's clientFoundRows).
	s.swap = c(`UPDATE {T} SET value = @v, version = version + 1, write_id = @id
WHERE k = @k AND version = @exp AND value IS NOT NULL`)
	s.swapF = c(`UPDATE {T} SET value = @v, version = version + 1, write_id = @id, fence_token = @tok
WHERE k = @k AND version = @exp AND value IS NOT NULL AND fence_token <= @tok`)
	s.del = c(`UPDATE {T} SET value = NULL, write_id = @id
WHERE k = @k AND version = @exp AND value IS NOT NULL`)
	if d == MySQL {
		s.swapCommit = c(writeAndCommit(`UPDATE {T} SET value = @v, version = version + 1, write_id = @id
WHERE k = @k AND version = @exp AND value IS NOT NULL`, 1))
	}
	return s
}

// writeAndCommit wraps write, a statement of rows rows inside a
// transaction that holds their locks, in a compound statement (MariaDB's
// BEGIN NOT ATOMIC) that commits the transaction when write changed that
// many rows and answers 1, or answers 0 and leaves the transaction open.
// A server error inside rolls the transaction back and is raised as it
// was.
func writeAndCommit(write string, rows int) string {
	return "BEGIN NOT ATOMIC\n" + heldHandler +
		write + ";\nIF ROW_COUNT() = " + strconv.Itoa(rows) + " THEN COMMIT; SELECT 1; ELSE SELECT 0; END IF;\nEND"
}
