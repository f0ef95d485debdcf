package sqlcas

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/internal/opsort"
	"github.com/occkit/occkit/internal/writeid"
)

// commitExclusiveLive is CommitExclusive on MariaDB when every key has a
// row (live or a tombstone) and fn's ops write only those keys, the hot
// rows' case: BEGIN, one locking read, and the ops' write and COMMIT in
// one compound statement (writeAndCommit). The general way inserts
// placeholders first (a statement, and shared locks on the rows that
// exist), reads the rows a second time after fn, and commits a round trip
// after the write, with the rows locked all along. The held rows' versions
// are those of the locking read, so fn's ops are checked against it.
//
// done is false, with nothing written and the transaction rolled back,
// when a key has no row (its absence could not be locked without the
// placeholders): CommitExclusive's general way then runs. The ops of
// keys fn did not read, and a server that refuses blocks (MySQL), take
// the general way's statements inside this transaction (finishExclusive).
func (s *Store) commitExclusiveLive(ctx context.Context, keys, sorted []string, fn func(cur []cas.Item) ([]cas.Op, error)) (vs []cas.Version, err error, done bool) {
	const op = "exclusive commit"
	tx, err := s.beginHeld(ctx)
	if err != nil {
		return nil, s.readError(op, sorted[0], err), true
	}
	ended := false
	defer func() {
		if !ended {
			tx.rollback()
		}
	}()
	args := make([]any, len(sorted))
	for i, k := range sorted {
		args[i] = k
	}
	found, err := s.readLocked(ctx, tx.q, args)
	if err != nil {
		return nil, s.readError(op, sorted[0], err), true
	}
	if len(found) < len(sorted) {
		return nil, nil, false // a key without a row: the general way
	}
	cur := make([]cas.Item, len(keys))
	for i, k := range keys {
		cur[i] = found[k].item(k, true)
	}
	ops, err := fn(cur)
	if err != nil || len(ops) == 0 {
		return nil, err, true
	}
	if err := s.limits.Commit(ctx, ops); err != nil {
		return nil, err, true
	}
	for _, o := range ops {
		if err := checkVersion("commit", o.Key, o.Expected); err != nil {
			return nil, err, true
		}
	}
	for _, o := range ops {
		if _, held := found[o.Key]; !held {
			// A key fn did not read: the general way, in this transaction.
			return s.finishExclusive(ctx, tx, &ended, ops, s.ids.Next())
		}
	}
	plan, err := planApply(ops, found)
	if err != nil {
		return nil, err, true
	}
	if plan.writes() == 0 {
		return s.finishExclusive(ctx, tx, &ended, ops, s.ids.Next()) // checks only
	}
	id := s.ids.Next()
	text := writeAndCommit(s.cm.apply(plan.writes(), len(plan.putArgs)), plan.writes())
	if f := beforeCommit.Load(); f != nil {
		(*f)() // the block holds the COMMIT
	}
	var wrote int
	err = tx.q.QueryRowContext(ctx, text, plan.args(id)...).Scan(&wrote)
	switch {
	case err == nil && wrote == 1:
		s.blocks.Store(blocksRun)
		ended = true
		tx.ended() // the block committed it
		exclusiveBlocks.Add(1)
		return plan.out, nil, true
	case err == nil:
		// The rows are held: a short write is not a conflict anyone won.
		return nil, fmt.Errorf("sqlcas: %s: the held rows' write changed fewer rows than %d", op, plan.writes()), true
	case refusesBlocks(err, s.blocks):
		return s.finishExclusive(ctx, tx, &ended, ops, s.ids.Next())
	}
	// The deferred rollback ends the transaction (a ROLLBACK that does
	// nothing after the block's COMMIT; a broken connection is discarded)
	// and gives the connection back, whatever the outcome below.
	if !answered(err) && !notSent(err) {
		if vs, ok := s.resolveCommit(ctx, ops, id); ok {
			return vs, nil, true
		}
	}
	return nil, s.exclusiveError(op, ops[0].Key, ops[0].Expected, err), true
}

// finishExclusive applies ops as Commit does in tx, an exclusive commit's
// transaction that holds their keys' rows, and commits it.
func (s *Store) finishExclusive(ctx context.Context, tx *txn, ended *bool, ops []cas.Op, id writeid.ID) ([]cas.Version, error, bool) {
	const op = "exclusive commit"
	in := *s
	in.inTx = true // the checks and writes of Commit, in this transaction
	vs, stage, err := in.commitIn(ctx, tx.q, ops, opsort.Order(ops), id)
	if err != nil {
		if stage == "" {
			return nil, err, true
		}
		return nil, s.exclusiveError(op, ops[0].Key, ops[0].Expected, err), true
	}
	*ended = true
	if err := tx.commit(ctx); err != nil {
		if !answered(err) && !notSent(err) && !s.inTx {
			if vs, ok := s.resolveCommit(ctx, ops, id); ok {
				return vs, nil, true
			}
		}
		return nil, s.exclusiveError(op, ops[0].Key, ops[0].Expected, err), true
	}
	return vs, nil, true
}

// holdsInBlocks reports whether a store or table of dialect d (in the
// caller's transaction: inTx) runs its exclusive transactions on a
// connection of their own and commits them in a block: MariaDB, once a
// block has run there (MySQL 8 refuses them), outside a caller's
// transaction.
func holdsInBlocks(d Dialect, inTx bool, blocks *atomic.Int32) bool {
	return d == MySQL && !inTx && blocks.Load() == blocksRun
}

var _ cas.HotCommitHint = (*Store)(nil)

// hotCommitFor is the window in which two conflicts at a key make it hot
// for transactions on MariaDB (HotCommitFor).
const hotCommitFor = 100 * time.Millisecond

// HotCommitFor implements cas.HotCommitHint: on MariaDB, once the store
// has run a compound statement (an exclusive write and its COMMIT in one
// block, which MySQL 8 refuses; commitExclusiveLive is what makes holding
// keys cheap),
// a key whose commits conflicted twice within 100 ms is hot, and occ.Txn
// commits holding the keys of a transaction that touches it. There an
// optimistic commit that meets a held row waits for it and then fails,
// and an exclusive commit costs what an optimistic one does. Elsewhere
// (MySQL 8, PostgreSQL, SQLite, inside the caller's transaction) 0.
func (s *Store) HotCommitFor() time.Duration {
	if holdsInBlocks(s.d, s.inTx, s.blocks) {
		return hotCommitFor
	}
	return 0
}
