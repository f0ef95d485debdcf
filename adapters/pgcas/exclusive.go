package pgcas

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/internal/opsort"
	"github.com/occkit/occkit/internal/writeid"
)

// DefaultExclusiveTimeout is Config.ExclusiveTimeout's default.
const DefaultExclusiveTimeout = 2 * time.Second

// codeIdleInTxTimeout is the FATAL error of a session the server ended
// because it sat idle in its transaction longer than
// idle_in_transaction_session_timeout.
const codeIdleInTxTimeout = "25P03"

var _ cas.ExclusiveAfterHint = (*Store)(nil)

// exclusiveAfter is how many writes in a row a call may lose before
// occ.Update escalates it to UpdateExclusive, on a Store or a Table: here
// an exclusive attempt costs the round trips of an optimistic one (two)
// and holds the row for one of them, so escalating sooner than
// occ.DefaultExclusiveAfter cuts the tail of the calls that keep losing
// to other processes for little throughput (docs/performance.md,
// "Measurements behind occ's defaults").
const exclusiveAfter = 5

// ExclusiveAfter implements cas.ExclusiveAfterHint: 5, sooner than
// occ.DefaultExclusiveAfter, since an exclusive attempt here costs what
// an optimistic one does. occ.WithExclusiveAfter overrides it per call.
func (s *Store) ExclusiveAfter() int { return exclusiveAfter }

// UpdateExclusive implements cas.Exclusive: in one transaction it reads
// the key's row FOR UPDATE (other writers of the key wait for the row
// lock, then find their expected version gone), calls fn, and writes
// what fn returns at the version read. It costs two round trips (BEGIN,
// the session's timeout and the locking read; the write and COMMIT) on
// one connection. A holder that stops answering for
// Config.ExclusiveTimeout has its session ended by the server
// (idle_in_transaction_session_timeout), which frees the row; its write,
// if it comes later, is refused with a *cas.ConflictError: nothing is
// written twice. A key with no row at all cannot be locked: its create
// can still lose to another create, as a conflict.
func (s *Store) UpdateExclusive(ctx context.Context, key string, fn func(cur cas.Item) ([]byte, bool, error)) (cas.Version, error) {
	const op = "exclusive update"
	if err := s.limits.Get(ctx, key); err != nil {
		return 0, err
	}
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return 0, acquireError(op, key, err)
	}
	// A connection left inside its transaction is closed, not reused
	// (pgxpool destroys a connection released with a transaction open).
	defer conn.Release()

	timeout := s.exclusiveTimeout.Milliseconds()
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	b.Queue("SELECT set_config('idle_in_transaction_session_timeout', $1, true)", strconv.FormatInt(max(timeout, 1), 10))
	b.Queue(s.sqlLockRow, key)
	br := conn.SendBatch(ctx, b)
	cur := cas.Item{Key: key}
	var (
		value   []byte
		version int64
	)
	_, err = br.Exec()
	if err == nil {
		_, err = br.Exec()
	}
	if err == nil {
		err = br.QueryRow().Scan(&value, &version)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			err = nil
		case err == nil && value != nil: // a tombstone (NULL) is absent
			cur.Value, cur.Version = value, cas.Version(version)
		}
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return 0, readError(op, key, err)
	}

	next, write, err := fn(cur)
	if err != nil || !write {
		_, rerr := conn.Exec(context.WithoutCancel(ctx), "ROLLBACK")
		if err == nil && rerr != nil {
			return cur.Version, s.exclusiveError(op, key, cur.Version, rerr)
		}
		return cur.Version, err
	}
	if err := s.limits.Put(ctx, key, next); err != nil {
		return 0, err
	}
	id := s.ids.Next()
	sql, args := s.writeSQL("compare-and-swap", key, cur.Version, next, 0, false, id)
	b = &pgx.Batch{}
	b.Queue(sql, args...)
	b.Queue("COMMIT")
	br = conn.SendBatch(ctx, b)
	var r result
	err = br.QueryRow().Scan(&r.newVersion, &r.curVersion, &r.curValue, &r.curToken)
	if err == nil {
		_, err = br.Exec()
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return s.exclusiveWriteFailed(ctx, op, key, cur.Version, id, err)
	}
	if r.newVersion == nil {
		// Only a create can get here: another create came first.
		return 0, r.conflict(key, cur.Version, r.curVersion != nil)
	}
	return cas.Version(*r.newVersion), nil
}

// exclusiveWriteFailed maps the failure of an exclusive update's write:
// a session the server ended for holding the row idle too long wrote
// nothing (its transaction was rolled back), a conflict for the caller to
// retry from a fresh read; anything else as a write's failure.
func (s *Store) exclusiveWriteFailed(ctx context.Context, op, key string, expected cas.Version, id writeid.ID, err error) (cas.Version, error) {
	if e := s.exclusiveError(op, key, expected, err); e != nil {
		return 0, e
	}
	return s.writeFailed(ctx, op, key, expected, id, err)
}

// exclusiveError returns the conflict of an exclusive hold the server
// ended, or nil.
func (s *Store) exclusiveError(_ string, key string, expected cas.Version, err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == codeIdleInTxTimeout {
		return &cas.ConflictError{Key: key, Expected: expected, Err: fmt.Errorf("pgcas: the exclusive hold of the row outlived Config.ExclusiveTimeout (%v) and the server ended it; nothing was written: %w", s.exclusiveTimeout, err)}
	}
	return nil
}

var _ cas.ExclusiveCommitter = (*Store)(nil)

// CommitExclusive implements cas.ExclusiveCommitter: in one transaction
// on one connection it reads the keys' rows FOR UPDATE in key order
// (BEGIN, the session's idle-in-transaction timeout and the read in one
// round trip), calls fn, sends the writes and checks of fn's ops in key
// order in one batch, and commits only if every one of them held; a key
// without a row cannot be locked, and a concurrent create of it makes the
// commit conflict. A holder that stops answering for
// Config.ExclusiveTimeout has its session ended by the server, which
// frees the rows; its late commit is refused with a *cas.ConflictError.
func (s *Store) CommitExclusive(ctx context.Context, keys []string, fn func(cur []cas.Item) ([]cas.Op, error)) ([]cas.Version, error) {
	const op = "exclusive commit"
	if err := s.limits.CommitExclusive(ctx, keys); err != nil {
		return nil, err
	}
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, acquireError(op, keys[0], err)
	}
	defer conn.Release() // a connection left in its transaction is closed
	rollback := func() { _, _ = conn.Exec(context.WithoutCancel(ctx), "ROLLBACK") }

	b := &pgx.Batch{}
	b.Queue("BEGIN")
	b.Queue("SELECT set_config('idle_in_transaction_session_timeout', $1, true)", strconv.FormatInt(max(s.exclusiveTimeout.Milliseconds(), 1), 10))
	lockSQL, lockArgs := listed(s.sqlLockMany, &s.sqlLockList, keys)
	b.Queue(lockSQL, lockArgs...)
	br := conn.SendBatch(ctx, b)
	found := map[string]cas.Item{}
	_, err = br.Exec()
	if err == nil {
		_, err = br.Exec()
	}
	if err == nil {
		var rows pgx.Rows
		if rows, err = br.Query(); err == nil {
			for rows.Next() {
				var (
					k       string
					value   []byte
					version int64
				)
				if err = rows.Scan(&k, &value, &version); err != nil {
					break
				}
				if value != nil { // a tombstone (NULL) is absent
					found[k] = cas.Item{Key: k, Value: value, Version: cas.Version(version)}
				}
			}
			rows.Close()
			if err == nil {
				err = rows.Err()
			}
		}
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		rollback()
		return nil, readError(op, keys[0], err)
	}
	cur := make([]cas.Item, len(keys))
	for i, k := range keys {
		it, ok := found[k]
		if !ok {
			it = cas.Item{Key: k}
		}
		cur[i] = it
	}
	ops, err := fn(cur)
	if err != nil || len(ops) == 0 {
		rollback()
		return nil, err
	}
	if err := s.limits.Commit(ctx, ops); err != nil {
		rollback()
		return nil, err
	}
	order := opsort.Order(ops)
	id := s.ids.Next()
	// The statements Commit sends, each marking its own failure (a check
	// locks what it checked, FOR SHARE; checking an absence inserts a
	// tombstone, the only way to lock it); in this transaction no guard
	// is needed: the results decide COMMIT or ROLLBACK.
	b = &pgx.Batch{}
	for _, i := range order {
		o := ops[i]
		value := o.Value
		if value == nil {
			value = []byte{}
		}
		switch {
		case o.Kind == cas.OpCheck && o.Expected == 0:
			b.Queue(s.commitCheckNone, o.Key, id)
		case o.Kind == cas.OpCheck:
			b.Queue(s.commitCheck, o.Key, pgVersion(o.Expected))
		case o.Kind == cas.OpDelete:
			b.Queue(s.commitDelete, o.Key, id, pgVersion(o.Expected))
		case o.Expected == 0:
			b.Queue(s.commitCreate, o.Key, value, id)
		default:
			b.Queue(s.commitSwap, o.Key, value, id, pgVersion(o.Expected))
		}
	}
	br = conn.SendBatch(ctx, b)
	results := make([]result, len(ops))
	failed := -1
	for _, i := range order {
		r := &results[i]
		var flag *string
		if err = br.QueryRow().Scan(&r.newVersion, &r.curVersion, &r.curValue, &r.curToken, &flag); err != nil {
			break
		}
		if flag != nil && (failed < 0 || i < failed) {
			failed = i
		}
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		rollback()
		if e := s.exclusiveError(op, keys[0], 0, err); e != nil {
			return nil, e
		}
		return nil, readError(op, keys[0], err)
	}
	if failed >= 0 {
		rollback()
		o, r := ops[failed], &results[failed]
		// A create that found no row to follow (one committed after its
		// snapshot) knows no current state.
		ce := &cas.ConflictError{Key: o.Key, Expected: o.Expected, Current: cas.Item{Key: o.Key}, HasCurrent: o.Expected != 0 || r.curVersion != nil}
		if r.curVersion != nil && r.curValue != nil {
			ce.Current = cas.Item{Key: o.Key, Value: r.curValue, Version: cas.Version(*r.curVersion)}
		}
		return nil, ce
	}
	if _, err := conn.Exec(ctx, "COMMIT"); err != nil {
		if e := s.exclusiveError(op, keys[0], 0, err); e != nil {
			return nil, e
		}
		return s.commitFailed(ctx, ops, id, err)
	}
	return committed(ops, results), nil
}
