package sqlcas

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"

	"github.com/occkit/occkit/cas"
)

// checkVersion refuses a version no row can have: versions are stored as
// signed 64-bit integers.
func checkVersion(op, key string, v cas.Version) error {
	if v > math.MaxInt64 {
		return &cas.KeyError{Op: op, Key: key, Err: fmt.Errorf("%w: version %d is above the largest 64-bit signed integer", cas.ErrInvalidVersion, v)}
	}
	return nil
}

// maxWriteRuns bounds how often a write runs again when it failed and the
// row read right after does not explain why (another write changed the key
// in between).
const maxWriteRuns = 3

// current is a key's row as read after a write failed.
type current struct {
	exists  bool // a row, live or a tombstone
	dead    bool // a tombstone
	version int64
	value   []byte
	token   int64
}

// live reports whether the row holds a value.
func (c current) live() bool { return c.exists && !c.dead }

// item returns the row as the cas state: a tombstone is version 0.
func (c current) item(key string) cas.Item {
	if !c.live() {
		return cas.Item{Key: key}
	}
	v := c.value
	if v == nil {
		v = []byte{}
	}
	return cas.Item{Key: key, Value: v, Version: cas.Version(c.version)}
}

// write runs one conditional write: a create (expected 0), a swap, or a
// delete (value nil and op "compare-and-delete").
func (s *Store) write(ctx context.Context, op, key string, expected cas.Version, value []byte, token uint64, fenced bool) (cas.Version, error) {
	del := op == "compare-and-delete"
	var st stmt
	switch {
	case del:
		st = s.st.del
	case expected == 0 && fenced:
		st = s.st.createF
	case expected == 0:
		st = s.st.create
	case fenced:
		st = s.st.swapF
	default:
		st = s.st.swap
	}
	if value == nil && !del {
		value = []byte{} // nil would be NULL, a tombstone
	}
	id := s.ids.Next()
	vals := [numSlots]any{key, value, id[:], int64(expected), int64(token)}
	args := st.args(&vals)
	for run := 1; ; run++ {
		v, applied, cur, err := s.runWrite(ctx, st, args, expected == 0 && !del)
		if err != nil {
			return s.writeFailed(ctx, op, key, expected, id, err)
		}
		if applied {
			if !s.inTx {
				s.seen.note(key)
			}
			return v, nil
		}
		if cur == nil {
			c, err := s.readCurrent(ctx, key)
			if err != nil {
				// The write did not apply; why is unknown.
				return 0, &cas.ConflictError{Key: key, Expected: expected, Err: err}
			}
			cur = &c
		}
		if fenced && uint64(cur.token) > token {
			// A fencing token only grows: it was above token when the
			// write was refused too.
			return 0, &cas.FencedError{Key: key, Token: token, Highest: uint64(cur.token)}
		}
		if cas.Version(cur.item(key).Version) != expected {
			return 0, &cas.ConflictError{Key: key, Expected: expected, Current: cur.item(key), HasCurrent: true}
		}
		// The row read says the write should have applied: another write
		// changed the key between the two (or, on PostgreSQL, committed
		// after the statement's snapshot). Run it again: the same write
		// id, and at most one run can apply.
		if run >= maxWriteRuns {
			return 0, &cas.ConflictError{Key: key, Expected: expected}
		}
	}
}

// runWrite runs a write statement once. It returns the new version when
// it applied; on PostgreSQL, when it did not, the key's current row read
// by the same statement.
func (s *Store) runWrite(ctx context.Context, st stmt, args []any, create bool) (cas.Version, bool, *current, error) {
	switch {
	case s.st.oneResult:
		var (
			newV, curV, curT sql.NullInt64
			curVal           []byte
			dead             sql.NullBool
		)
		if err := s.prep.queryRow(ctx, s.q, st.text, args...).Scan(&newV, &curV, &curVal, &curT, &dead); err != nil {
			return 0, false, nil, err
		}
		if newV.Valid {
			return cas.Version(newV.Int64), true, nil, nil
		}
		return 0, false, &current{exists: curV.Valid, dead: dead.Bool, version: curV.Int64, value: curVal, token: curT.Int64}, nil
	case create && s.d == SQLite:
		var v int64
		err := s.prep.queryRow(ctx, s.q, st.text, args...).Scan(&v)
		if errors.Is(err, sql.ErrNoRows) {
			return 0, false, nil, nil
		}
		if err != nil {
			return 0, false, nil, err
		}
		return cas.Version(v), true, nil, nil
	case create: // MySQL
		res, err := s.prep.exec(ctx, s.q, st.text, args...)
		if err != nil {
			return 0, false, nil, err
		}
		v, err := res.LastInsertId()
		if err != nil {
			return 0, false, nil, err
		}
		return cas.Version(v), v > 0, nil, nil
	}
	res, err := s.prep.exec(ctx, s.q, st.text, args...)
	if err != nil {
		return 0, false, nil, err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, false, nil, err
	}
	if n == 0 {
		return 0, false, nil, nil
	}
	return cas.Version(args[expectedArg(s.d, st)].(int64) + 1), true, nil, nil
}

// expectedArg returns the index of the expected version among st's
// arguments.
func expectedArg(_ Dialect, st stmt) int {
	for i, sl := range st.slots {
		if sl == slotExpected {
			return i
		}
	}
	panic("sqlcas: statement without an expected version")
}

// readCurrent reads key's row, live or a tombstone: the latest committed
// row. Inside a caller's transaction that takes a locking read (a plain
// one would see the transaction's snapshot), and on PostgreSQL (see
// Table's currentSQL); on MySQL a statement of its own reads it without
// a lock, which would only wait behind the key's other writers.
func (s *Store) readCurrent(ctx context.Context, key string) (current, error) {
	var c current
	st := s.st.current
	if !s.inTx && s.d != Postgres {
		st = s.st.committed
	}
	err := s.prep.queryRow(ctx, s.q, st.text, key).Scan(&c.version, &c.value, &c.token, &c.dead)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return current{}, nil
	case err != nil:
		return current{}, err
	}
	c.exists = true
	return c, nil
}
