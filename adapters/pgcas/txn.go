package pgcas

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/occkit/occkit/internal/rowupdate"
	"github.com/occkit/occkit/occ"
)

// txns is the bridge of every Txn of the process onto occ.Txn: one, so
// that the turns of Txn calls meet at hot rows.
var txns rowupdate.Tables

// Tx is one attempt of a Txn: read rows with TxGet (TxPrefetch first when
// the rows are known up front) and write them with TxPut.
type Tx struct{ in *rowupdate.TablesTx }

// Txn runs fn as one optimistic transaction over rows of one or more
// Tables of one database: a transfer between two rows of accounts, an
// order and the stock it takes, with no hand-written SQL. The rows fn
// reads (TxGet) are read at their versions without a lock; the rows it
// writes (TxPut) are written in one transaction of the database, each
// update conditional on the version read (a row read as absent is
// inserted), when none of them changed since; otherwise nothing is
// written and fn runs again from the rows as they are now, as occ.Txn
// does (calls of one process take turns at hot rows; opts are occ's, the
// attempt limit and backoff included; occ.WithCombiner does not combine
// them). fn may run several times: it must
// not have effects of its own, and its error ends Txn unchanged.
//
// A row fn reads and does not write is written back as read, so that the
// commit checks it and holds its lock until the end (its version moves);
// a row read as absent and not written is checked absent. The commit
// writes tables in name order and each table's rows in key order, so two
// transactions lock rows in one order and cannot deadlock. Rows are
// written with the tables' own statements (their version sequences
// included); the transaction begins on the pool of the first table in
// that order, so every table must be of that pool's database. A row whose
// key the database generates is inserted with Insert, not in a Txn.
func Txn(ctx context.Context, fn func(tx *Tx) error, opts ...occ.Option) error {
	return txns.Txn(ctx, func(in *rowupdate.TablesTx) error { return fn(&Tx{in: in}) }, opts...)
}

// TxGet reads the row of t with key in tx; exists is false (and row is
// the zero T with its key set) when there is none.
func TxGet[T any](tx *Tx, t *Table[T], key any) (row T, exists bool, err error) {
	return rowupdate.TxGet(tx.in, t.txm, key)
}

// TxPrefetch reads the rows of t with keys in one round trip, so that the
// TxGet calls of them that follow cost nothing.
func TxPrefetch[T any](tx *Tx, t *Table[T], keys ...any) error {
	return rowupdate.TxPrefetch(tx.in, t.txm, keys...)
}

// TxPut writes row (its key field set; its version field is ignored) to t
// when tx commits: an update at the version tx read, or an insert of a row
// tx read as absent (a row not read yet is read first).
func TxPut[T any](tx *Tx, t *Table[T], row T) error {
	return rowupdate.TxPut(tx.in, t.txm, row)
}

// newMember returns t as a member of Txn's transactions, whose commits
// of updates only go in one round trip and COMMIT (pipeline).
func (t *Table[T]) newMember() *rowupdate.Member[T] {
	m := rowupdate.NewMember(t.name, t.pool, t.rows,
		func(ctx context.Context, tx any) rowupdate.Table[T] {
			in := *t
			in.q, in.rq = tx.(pgx.Tx), tx.(pgx.Tx)
			return in.rowTable()
		},
		func(ctx context.Context, fn func(tx any) error) error {
			t.knowKeyIndexes(ctx)
			tx, err := t.pool.Begin(ctx)
			if err != nil {
				return t.opError("txn", "", err)
			}
			if err := fn(tx); err != nil {
				_ = tx.Rollback(context.WithoutCancel(ctx))
				return err
			}
			if err := tx.Commit(ctx); err != nil {
				return t.writeError(ctx, "txn", "", err)
			}
			return nil
		})
	m.SetPipeline(t.pipeline())
	return m
}

// lockRow reads the row with key on t's connection (a transaction's),
// locking it for writing until the transaction ends.
func (t *Table[T]) lockRow(ctx context.Context, key any) (T, error) {
	return t.readRow(ctx, t.q, t.sqlGet+` FOR UPDATE`, "lock", key)
}

// lockAbsent takes, in t's transaction, the advisory lock that a Txn's
// check that the row with key is absent and its insert of the row share
// (two 32-bit keys: the table's name and the key, hashed; a key space no
// bigint advisory lock, such as Locker's, shares), so that two
// transactions that each read as absent a row the other inserts cannot
// both commit. A row cannot be locked before it exists.
func (t *Table[T]) lockAbsent(ctx context.Context, key any) error {
	var ok bool
	if err := t.q.QueryRow(ctx, `SELECT pg_advisory_xact_lock(hashtext($1), hashtext($2)) IS NULL`, t.name, fmt.Sprint(key)).Scan(&ok); err != nil {
		return t.opError("lock", key, err)
	}
	return nil
}
