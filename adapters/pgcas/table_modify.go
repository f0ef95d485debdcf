package pgcas

import (
	"context"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/internal/rowupdate"
	"github.com/occkit/occkit/internal/sqlrows"
	"github.com/occkit/occkit/occ"
)

// Modify is the optimistic read-modify-write of the row with key, run by
// occ.Update's loop (see docs/tables.md): it reads the row (exists false
// and cur the zero T with only its key field set when there is none),
// calls mutate, and writes the result as Update does (as Insert does when
// the row was absent), retrying on a conflict: at once from the current
// row the conflict carried, then after a backoff wait from a fresh read.
// A row absent under the key field's zero value is not inserted (a
// cas.ErrInvalidKey: insert rows whose key the database generates with
// Insert); one that exists is updated. mutate must keep the key; it may run several times and must depend only
// on its arguments; an error from it ends the loop and is returned as is.
// Modify returns the row its own mutate returned, with the version the
// write gave it. Calls of one process take turns at a hot row, share one
// write with occ.WithCombiner and skip the read with a cache from
// NewCache; a call that keeps losing to writers in other processes holds
// the row's lock for one attempt (occ.WithExclusiveAfter). mutate must not
// modify what cur refers to (maps, slices) in place: a cache or a combined
// write hands one row to several calls. See docs/tables.md.
// opts are occ's; pass
// occ.WithRetryable(pgcas.Retryable) to retry transient failures that
// certainly applied nothing.
//
//	acct, err := accounts.Modify(ctx, id, func(a Account, exists bool) (Account, error) {
//		if !exists {
//			return a, ErrNoAccount // returned as is
//		}
//		a.Balance -= 10
//		return a, nil
//	})
func (t *Table[T]) Modify(ctx context.Context, key any, mutate func(cur T, exists bool) (T, error), opts ...occ.Option) (T, error) {
	return t.rows.Modify(ctx, key, mutate, opts...)
}

// ModifyMany is Modify over several rows at once, as one optimistic
// transaction: it reads the rows with keys (in one transaction's worth
// of reads; cur[i] is the absent row with only its key set, exists[i]
// false, for a key with no row), calls mutate, and writes every row
// mutate returned (each must keep its key) in one transaction of the
// table, inserting the absent ones, if none of them changed since it was
// read; otherwise it runs mutate again from the rows as they are, as
// occ.Txn does (calls of one process take turns at hot rows; opts are
// occ's). The rows are written in key order, so concurrent ModifyMany
// calls lock them in one order. It returns the rows as stored, with their
// new versions. The keys must be distinct. A transfer:
//
//	_, err := accounts.ModifyMany(ctx, []any{from, to}, func(a []Account, exists []bool) ([]Account, error) {
//		if !exists[0] || !exists[1] {
//			return nil, ErrNoAccount
//		}
//		if a[0].Balance < amount {
//			return nil, ErrInsufficientFunds // returned as is, nothing written
//		}
//		a[0].Balance -= amount
//		a[1].Balance += amount
//		return a, nil
//	})
func (t *Table[T]) ModifyMany(ctx context.Context, keys []any, mutate func(cur []T, exists []bool) ([]T, error), opts ...occ.Option) ([]T, error) {
	return t.rows.ModifyMany(ctx, keys, mutate, opts...)
}

// NewCache returns a version cache of at most maxEntries rows of t, for
// occ.WithCache: a Modify of a row whose version this process already
// knows skips the read and costs one statement.
func (t *Table[T]) NewCache(maxEntries int) *occ.Cache { return t.rows.NewCache(maxEntries) }

// newRows returns t's bridge onto occ.
func (t *Table[T]) newRows() *rowupdate.TableRows[T] { return rowupdate.NewTable(t.rowTable()) }

// rowTable is t as the bridge drives it.
func (t *Table[T]) rowTable() rowupdate.Table[T] {
	return rowupdate.Table[T]{
		KeyIndex:       t.layout.KeyColumn().Index,
		Get:            t.getBound,
		Insert:         t.Insert,
		Update:         t.Update,
		VersionOf:      t.layout.VersionOf,
		SetVersion:     t.layout.SetVersion,
		Exclusive:      t.exclusive,
		ExclusiveAfter: exclusiveAfter,
		RunTx:          t.runTx,
		GetMany:        t.getMany,
		CommitMany:     t.commitMany,
		LockRow:        t.lockRow,
		LockAbsent:     t.lockAbsent,
	}
}

// VersionOf returns the version in row's version field (0 for a row never
// written).
func (t *Table[T]) VersionOf(row T) cas.Version { return t.layout.VersionOf(&row) }

// Pool returns the pool the Table was made with, which it writes
// through.
func (t *Table[T]) Pool() *pgxpool.Pool { return t.pool }

// ReadPool returns TableConfig.ReadPool, or nil when the Table reads from
// Pool.
func (t *Table[T]) ReadPool() *pgxpool.Pool {
	if p, ok := t.rq.(*pgxpool.Pool); ok && p != t.pool {
		return p
	}
	return nil
}

// getMany reads the rows of keys in one statement (in any order; absent
// keys have none).
func (t *Table[T]) getMany(ctx context.Context, keys []any) ([]T, error) {
	rows, err := t.rq.Query(ctx, `SELECT `+t.selCols+` FROM `+t.name+` WHERE `+t.layout.KeyColumn().Quoted+` IN (`+params(1, len(keys))+`)`, keys...)
	if err != nil {
		return nil, t.opError("get", keys[0], err)
	}
	defer rows.Close()
	out, err := sqlrows.All(rows, t.layout.Targets)
	if err != nil {
		return nil, t.opError("get", keys[0], err)
	}
	return out, nil
}
