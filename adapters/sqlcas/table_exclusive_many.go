package sqlcas

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/occkit/occkit/internal/rowupdate"
)

// commitManyExclusive is ModifyMany's exclusive commit (the attempt occ.Txn
// escalates a transaction to, and on MariaDB commits hot rows with): on
// MariaDB, when every key has a row and fn updates only those rows at the
// versions read, START TRANSACTION and one locking read on a connection of
// its own, fn, and the rows' UPDATE and COMMIT in one compound statement,
// as Store.CommitExclusive does (commitExclusiveLive). Otherwise
// rowupdate.CommitExclusiveFor's: a locking read per row, then the writes
// one by one, in a transaction that commits a round trip later.
func (t *Table[T]) commitManyExclusive(ctx context.Context, keys []any, fn func(cur []rowupdate.Row[T]) ([]rowupdate.Write[T], error)) ([]rowupdate.Row[T], int, rowupdate.Row[T], error) {
	general := rowupdate.CommitExclusiveFor(t.rowTable())
	if !holdsInBlocks(t.d, t.inTx, t.blocks) || !t.oneUpdate() {
		return general(ctx, keys, fn)
	}
	var none rowupdate.Row[T]
	tx, err := beginOnConn(ctx, t.q, "START TRANSACTION", true)
	if err != nil {
		return nil, -1, none, t.writeError("modify-many", "", err, false)
	}
	ended := false
	defer func() {
		if !ended {
			tx.rollback()
		}
	}()
	sorted := slices.Clone(keys)
	slices.SortFunc(sorted, rowupdate.CmpKeys)
	k := t.layout.KeyColumn().Quoted
	rows, err := tx.q.QueryContext(ctx, `SELECT `+t.selCols+` FROM `+t.name+` WHERE `+k+` IN (`+t.d.phs(1, len(sorted), "")+`) ORDER BY `+k+t.d.forUpdate(), sorted...)
	if err != nil {
		return nil, -1, none, t.writeError("modify-many", "", err, false)
	}
	held := make(map[string]rowupdate.Row[T], len(keys))
	for rows.Next() {
		var v T
		if err := rows.Scan(t.layout.Targets(&v)...); err != nil {
			rows.Close()
			return nil, -1, none, t.writeError("modify-many", "", err, false)
		}
		held[fmt.Sprint(t.layout.KeyOf(&v))] = rowupdate.Row[T]{Value: v, Version: t.layout.VersionOf(&v)}
	}
	if err := rows.Err(); err != nil {
		return nil, -1, none, t.writeError("modify-many", "", err, false)
	}
	rows.Close()
	if len(held) < len(keys) {
		// A row is absent: its place is locked by the general way's
		// read of it (a gap lock), not by this one's.
		tx.rollback()
		ended = true
		return general(ctx, keys, fn)
	}
	cur := make([]rowupdate.Row[T], len(keys))
	for i, key := range keys {
		cur[i] = held[fmt.Sprint(key)]
	}
	writes, err := fn(cur)
	if err != nil || len(writes) == 0 {
		return nil, -1, none, err
	}
	inOrder := true
	for _, w := range writes {
		r, ok := held[fmt.Sprint(t.layout.KeyOf(&w.Row))]
		inOrder = inOrder && ok && w.Expected != 0 && w.Expected == r.Version
	}
	if !inOrder {
		// An insert, a row fn did not read, or a stale version: the
		// general way's writes, in this transaction.
		in := *t
		in.q, in.inTx = tx.q, true
		stored, at, c, err := rowupdate.CommitInOrder(ctx, in.rowTable(), writes)
		if err != nil {
			return nil, at, c, err
		}
		ended = true
		if err := tx.commit(ctx); err != nil {
			return nil, -1, none, t.writeError("modify-many", "", err, true)
		}
		return stored, -1, none, nil
	}
	order := rowupdate.KeyOrder(writes)
	byKey := make([]rowupdate.Write[T], len(writes))
	for i, j := range order {
		byKey[i] = writes[j]
	}
	text, args := blockIn(t.updateManyStmts(byKey, t.writeKeys(byKey)), false)
	if f := beforeCommit.Load(); f != nil {
		(*f)() // the block holds the COMMIT
	}
	var short int
	if err := tx.q.QueryRowContext(ctx, text, args...).Scan(&short); err != nil {
		return nil, -1, none, t.writeError("modify-many", "", err, !notSent(err))
	}
	if short >= 0 {
		// The block rolled back: the held rows' write fell short.
		return nil, -1, none, fmt.Errorf("sqlcas: modify-many: the held rows' write changed fewer rows than %d", len(writes))
	}
	ended = true
	tx.ended() // the block committed it
	exclusiveBlocks.Add(1)
	stored := make([]rowupdate.Row[T], len(writes))
	for i, w := range writes {
		stored[i] = t.updated(w)
	}
	return stored, -1, none, nil
}

// hotCommitFor is rowupdate.Table.HotCommitFor: on MariaDB, once the
// table has run a compound statement, Store.HotCommitFor's window.
func (t *Table[T]) hotCommitFor() time.Duration {
	if holdsInBlocks(t.d, t.inTx, t.blocks) {
		return hotCommitFor
	}
	return 0
}
