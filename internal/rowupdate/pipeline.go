package rowupdate

import (
	"context"
	"errors"

	"github.com/occkit/occkit/cas"
)

// Pipeline is a table's part in a commit sent in one round trip: where
// every write of a Txn commit updates a row it read (a transfer's shape:
// no inserts, no checks of absent rows) and every table of it has a
// Pipeline, the first table's Pipe sends BEGIN and the conditional updates
// together, and COMMIT (or ROLLBACK) in a second round trip, instead of
// one round trip per statement.
type Pipeline[T any] struct {
	// Queue adds to batch (of Pipe's) the update of row (its key field
	// set) conditional on version expected, as the table's Update would
	// send it.
	Queue func(batch any, expected cas.Version, row T) error
	// Scan reads from results (Pipe's) the outcome of the next update
	// queued: the row as stored; on a *cas.ConflictError with HasCurrent,
	// the current row (Version 0: absent).
	Scan func(results any) (stored, current Row[T], err error)
	// Pipe runs one pipelined transaction: queue fills the batch, which
	// is sent after BEGIN; scan reads the results in order; COMMIT
	// follows when scan returns nil, ROLLBACK otherwise (a conflict of
	// scan's is returned as is). Pipe may run the transaction again,
	// calling queue and scan anew (PostgreSQL: an update refused by a
	// stale snapshot).
	Pipe func(ctx context.Context, queue func(batch any) error, scan func(results any) error) error
}

// SetPipeline gives m the pipelined commit p.
func (m *Member[T]) SetPipeline(p Pipeline[T]) { m.pipeline = &p }

func (m *Member[T]) pipelined() bool { return m.pipeline != nil }

func (m *Member[T]) pipe(ctx context.Context, queue func(batch any) error, scan func(results any) error) error {
	return m.pipeline.Pipe(ctx, queue, scan)
}

// queueWrite adds the update of the row value is a handle of, at version
// expected, to batch.
func (m *Member[T]) queueWrite(batch any, expected cas.Version, value []byte) error {
	p, _, err := m.rows.held.load(value)
	if err != nil {
		return err
	}
	return m.pipeline.Queue(batch, expected, *p)
}

// scanWrite reads the outcome of the update queueWrite queued for value:
// its new version and keep, which makes the handle hold the row as stored
// (to call once the transaction committed), or on a conflict the current
// row.
func (m *Member[T]) scanWrite(results any, value []byte) (cas.Version, func(), Row[[]byte], error) {
	_, id, err := m.rows.held.load(value)
	if err != nil {
		return 0, nil, Row[[]byte]{}, err
	}
	stored, cur, err := m.pipeline.Scan(results)
	if err != nil {
		var ce *cas.ConflictError
		if errors.As(err, &ce) && ce.HasCurrent {
			return 0, nil, m.held(cur), err
		}
		return 0, nil, Row[[]byte]{}, err
	}
	return stored.Version, func() { m.rows.held.replace(id, &stored.Value) }, Row[[]byte]{}, nil
}

// commitPipelined is Commit in one round trip plus COMMIT, when every op
// updates a row read and every member has a Pipeline; ok is false
// otherwise (nothing sent).
func commitPipelined(ctx context.Context, ops []cas.Op, rs []ref, order []int) (vs []cas.Version, conflict *cas.ConflictError, ok bool, err error) {
	for i, op := range ops {
		if op.Kind != cas.OpPut || op.Expected == 0 || !rs[i].m.pipelined() {
			return nil, nil, false, nil
		}
	}
	vs = make([]cas.Version, len(ops))
	var keep []func()
	err = rs[order[0]].m.pipe(ctx, func(batch any) error {
		for _, i := range order {
			if err := rs[i].m.queueWrite(batch, ops[i].Expected, ops[i].Value); err != nil {
				return err
			}
		}
		return nil
	}, func(results any) error {
		keep, conflict = keep[:0], nil // a run again (Pipe's) scans anew
		for _, i := range order {
			v, done, cur, err := rs[i].m.scanWrite(results, ops[i].Value)
			var ce *cas.ConflictError
			if errors.As(err, &ce) {
				hint := *ce
				hint.Key, hint.Expected = ops[i].Key, ops[i].Expected
				hint.Current = cas.Item{Key: ops[i].Key, Value: cur.Value, Version: cur.Version}
				conflict = &hint
				return conflict
			}
			if err != nil {
				return err
			}
			vs[i] = v
			keep = append(keep, done)
		}
		return nil
	})
	if conflict != nil && errors.Is(err, conflict) {
		return nil, conflict, true, nil
	}
	if err != nil {
		return nil, nil, true, err
	}
	// Committed: the handles hold the rows as stored.
	for _, done := range keep {
		done()
	}
	return vs, nil, true, nil
}
