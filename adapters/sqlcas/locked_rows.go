package sqlcas

import (
	"context"

	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/internal/writeid"
)

// lockedRow is a key's row as a commit's locking read found it: live or
// a tombstone.
type lockedRow struct {
	version int64
	value   []byte
	dead    bool
}

// item returns the state of key with row r (found: a row was read): a
// tombstone, or no row, is version 0.
func (r lockedRow) item(key string, found bool) cas.Item {
	if !found || r.dead {
		return cas.Item{Key: key}
	}
	v := r.value
	if v == nil {
		v = []byte{}
	}
	return cas.Item{Key: key, Value: v, Version: cas.Version(r.version)}
}

// readLocked runs the locking read of keys (in key order) on q, in a
// transaction, and returns the rows it found by key.
func (s *Store) readLocked(ctx context.Context, q Querier, keys []any) (map[string]lockedRow, error) {
	rows, err := q.QueryContext(ctx, s.cm.lockRead(len(keys)), keys...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	found := make(map[string]lockedRow, len(keys))
	for rows.Next() {
		var k string
		var r lockedRow
		if err := rows.Scan(&k, &r.version, &r.value, &r.dead); err != nil {
			return nil, err
		}
		found[k] = r
	}
	return found, rows.Err()
}

// applyPlan is a commit's write, planned from the rows its keys hold.
type applyPlan struct {
	out                        []cas.Version // each op's version once committed
	writeArgs, putArgs, inArgs []any         // apply's arguments but the write id
}

// writes is how many rows the plan writes.
func (p applyPlan) writes() int { return len(p.inArgs) }

// args returns apply's arguments, with the commit's write id.
func (p applyPlan) args(id writeid.ID) []any {
	return append(append(append(p.writeArgs, p.putArgs...), id[:]), p.inArgs...)
}

// planApply checks every op's version against found, the rows its keys
// hold (a key without one is absent), and plans the write: a stale op is
// a *cas.ConflictError carrying its key's current item.
func planApply(ops []cas.Op, found map[string]lockedRow) (applyPlan, error) {
	p := applyPlan{out: make([]cas.Version, len(ops))}
	for i, op := range ops {
		r, ok := found[op.Key]
		if cur := r.item(op.Key, ok); cur.Version != op.Expected {
			return applyPlan{}, &cas.ConflictError{Key: op.Key, Expected: op.Expected, Current: cur, HasCurrent: true}
		}
		switch op.Kind {
		case cas.OpCheck:
			p.out[i] = op.Expected
		case cas.OpPut:
			v := op.Value
			if v == nil {
				v = []byte{}
			}
			p.writeArgs = append(p.writeArgs, op.Key, v)
			p.putArgs = append(p.putArgs, op.Key)
			p.inArgs = append(p.inArgs, op.Key)
			p.out[i] = cas.Version(r.version + 1) // r.version: the tombstone's for a create (0 if none); versions never repeat
		case cas.OpDelete:
			p.writeArgs = append(p.writeArgs, op.Key, nil)
			p.inArgs = append(p.inArgs, op.Key)
		}
	}
	return p, nil
}
