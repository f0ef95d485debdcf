package sqlcas

import (
	"context"
	"fmt"

	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/internal/rowupdate"
)

// Txn's commit of updates on MySQL/MariaDB (rowupdate.Pipeline): when
// every row a Txn writes is one it read, the rows of each table go in
// one UPDATE (updateMany), so the commit is BEGIN, one statement per
// table and COMMIT, whatever the number of rows: on MariaDB all of it in
// one block (pipeBlock), one round trip.

// txnBatch is such a commit: the writes of each table, grouped, tables
// in the order the commit queues them (by name).
type txnBatch struct {
	groups  []txnGroup
	byTable map[any]txnGroup
}

// txnGroup is the writes of one table of a txnBatch.
type txnGroup interface {
	// run sends the table's UPDATE on q; short reports a row not at its
	// version.
	run(ctx context.Context, q Querier) (short bool, err error)
	// stmts returns run's statements, unsent (for a block).
	stmts() []blockStmt
	// findMoved reads, after the rollback, which row moved; an error
	// when neither the row nor the reason is known (a failed read, or
	// every row back at its version: read stale, the retry reads again).
	findMoved(ctx context.Context) error
}

// tableGroup is a txnGroup of a Table[T]: its writes in key order, and
// after a short run the first moved row.
type tableGroup[T any] struct {
	t      *Table[T]
	writes []rowupdate.Write[T]
	next   int // the next write Scan reports
	moved  int // the first moved write after findMoved, or -1
	cur    rowupdate.Row[T]
	err    error
}

func (g *tableGroup[T]) run(ctx context.Context, q Querier) (bool, error) {
	n, err := g.t.updateMany(ctx, q, g.writes, g.t.writeKeys(g.writes))
	return err == nil && n != int64(len(g.writes)), err
}

func (g *tableGroup[T]) stmts() []blockStmt {
	return g.t.updateManyStmts(g.writes, g.t.writeKeys(g.writes))
}

func (g *tableGroup[T]) findMoved(ctx context.Context) error {
	g.moved, g.cur, g.err = g.t.movedRow(ctx, g.writes, g.t.writeKeys(g.writes))
	if g.moved < 0 {
		return g.err
	}
	return nil
}

// txnPipeline is t's part in such a commit.
func (t *Table[T]) txnPipeline() rowupdate.Pipeline[T] {
	return rowupdate.Pipeline[T]{
		Queue: func(b any, expected cas.Version, row T) error {
			tb := b.(*txnBatch)
			g, ok := tb.byTable[t].(*tableGroup[T])
			if !ok {
				g = &tableGroup[T]{t: t, moved: -1}
				tb.byTable[t] = g
				tb.groups = append(tb.groups, g)
			}
			g.writes = append(g.writes, rowupdate.Write[T]{Expected: expected, Row: row})
			return nil
		},
		Scan: func(r any) (rowupdate.Row[T], rowupdate.Row[T], error) {
			g := r.(*txnBatch).byTable[t].(*tableGroup[T])
			i := g.next
			g.next++
			if i == g.moved {
				return rowupdate.Row[T]{}, g.cur, g.err
			}
			return t.updated(g.writes[i]), rowupdate.Row[T]{}, nil
		},
		Pipe: func(ctx context.Context, queue func(any) error, scan func(any) error) error {
			tb := &txnBatch{byTable: map[any]txnGroup{}}
			if err := queue(tb); err != nil {
				return err
			}
			if err, done := t.pipeBlock(ctx, tb, scan); done {
				return err
			}
			tx, err := beginOn(ctx, t.d, t.q, false)
			if err != nil {
				return t.writeError("txn", "", err, false)
			}
			for _, g := range tb.groups {
				short, err := g.run(ctx, tx.q)
				if err != nil {
					tx.rollback()
					return t.writeError("txn", "", err, false) // never committed
				}
				if !short {
					continue
				}
				// A row of this table moved: roll back and find it (the
				// tables after it are not sent).
				tx.rollback()
				if err := g.findMoved(ctx); err != nil {
					return err
				}
				if err := scan(tb); err != nil {
					return err
				}
				return &cas.ConflictError{Err: fmt.Errorf("sqlcas: txn: a row moved and was read at its old version again")}
			}
			if err := scan(tb); err != nil {
				tx.rollback()
				return err
			}
			if err := tx.commit(ctx); err != nil {
				return t.writeError("txn", "", err, true)
			}
			return nil
		},
	}
}

// pipeBlock is Pipe's transaction in one round trip on MariaDB: every
// group's statements in one block (sendBlock). done is false when the
// server does not run blocks (MySQL: nothing ran).
func (t *Table[T]) pipeBlock(ctx context.Context, tb *txnBatch, scan func(any) error) (err error, done bool) {
	var stmts []blockStmt
	var group []int // the group of each statement
	for i, g := range tb.groups {
		for _, st := range g.stmts() {
			stmts = append(stmts, st)
			group = append(group, i)
		}
	}
	short, ran, err := sendBlock(ctx, t.q, t.blocks, stmts)
	switch {
	case !ran:
		return nil, false
	case err != nil:
		return t.writeError("txn", "", err, !notSent(err)), true
	}
	if short >= 0 {
		// A row of this group moved: the block rolled back.
		if err := tb.groups[group[short]].findMoved(ctx); err != nil {
			return err, true
		}
		if err := scan(tb); err != nil {
			return err, true
		}
		return &cas.ConflictError{Err: fmt.Errorf("sqlcas: txn: a row moved and was read at its old version again")}, true
	}
	return scan(tb), true
}
