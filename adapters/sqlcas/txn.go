package sqlcas

import (
	"context"
	"errors"
	"fmt"

	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/internal/rowupdate"
	"github.com/occkit/occkit/occ"
)

// txns is the bridge of every Txn of the process onto occ.Txn: one, so
// that the turns of Txn calls meet at hot rows.
var txns rowupdate.Tables

// errCallersTx refuses a table bound to the caller's transaction in Txn,
// which begins and commits transactions of its own.
var errCallersTx = errors.New("sqlcas: a Table bound to the caller's transaction (With) cannot take part in Txn, which commits transactions of its own: use the Table it was made from")

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
// written with the tables' own statements (their version counters
// included); the transaction begins on the database of the first table in
// that order (on SQLite, BEGIN IMMEDIATE), so every table must be of that
// database. A row whose key the database generates is inserted with
// Insert, not in a Txn; a Table bound to the caller's transaction (With)
// cannot take part.
func Txn(ctx context.Context, fn func(tx *Tx) error, opts ...occ.Option) error {
	return txns.Txn(ctx, func(in *rowupdate.TablesTx) error { return fn(&Tx{in: in}) }, opts...)
}

// TxGet reads the row of t with key in tx; exists is false (and row is
// the zero T with its key set) when there is none.
func TxGet[T any](tx *Tx, t *Table[T], key any) (row T, exists bool, err error) {
	if t.inTx {
		return row, false, occ.Permanent(&cas.KeyError{Op: "txn-get", Key: t.name, Err: errCallersTx})
	}
	return rowupdate.TxGet(tx.in, t.txm, key)
}

// TxPrefetch reads the rows of t with keys in one round trip, so that the
// TxGet calls of them that follow cost nothing.
func TxPrefetch[T any](tx *Tx, t *Table[T], keys ...any) error {
	if t.inTx {
		return occ.Permanent(&cas.KeyError{Op: "txn-prefetch", Key: t.name, Err: errCallersTx})
	}
	return rowupdate.TxPrefetch(tx.in, t.txm, keys...)
}

// TxPut writes row (its key field set; its version field is ignored) to t
// when tx commits: an update at the version tx read, or an insert of a row
// tx read as absent (a row not read yet is read first).
func TxPut[T any](tx *Tx, t *Table[T], row T) error {
	if t.inTx {
		return occ.Permanent(&cas.KeyError{Op: "txn-put", Key: t.name, Err: errCallersTx})
	}
	return rowupdate.TxPut(tx.in, t.txm, row)
}

// newMember returns t as a member of Txn's transactions; on MySQL with an
// integer key (oneUpdate), a commit of updates sends one UPDATE per table
// (txnPipeline).
func (t *Table[T]) newMember() *rowupdate.Member[T] {
	m := rowupdate.NewMember(t.name, t.q, t.rows,
		func(_ context.Context, tx any) rowupdate.Table[T] {
			in := *t
			in.q, in.inTx = tx.(*txn).q, true // Insert draws its version in this transaction
			return in.rowTable()
		},
		func(ctx context.Context, fn func(tx any) error) error {
			tx, err := beginOn(ctx, t.d, t.q, false)
			if err != nil {
				return t.writeError("txn", "", err, false)
			}
			if err := fn(tx); err != nil {
				tx.rollback()
				return err
			}
			if err := tx.commit(ctx); err != nil {
				return t.writeError("txn", "", err, true)
			}
			return nil
		})
	if t.oneUpdate() {
		m.SetPipeline(t.txnPipeline())
	}
	return m
}

// lockRow reads the row with key on t's connection (a transaction's),
// locking it for writing until the transaction ends (on SQLite the
// transaction, begun IMMEDIATE, already holds the database's write lock).
func (t *Table[T]) lockRow(ctx context.Context, key any) (T, error) {
	return t.get(ctx, t.q, t.sqlGet+t.d.forUpdate(), "lock", key)
}

// lockAbsent takes, in t's transaction on PostgreSQL, the advisory lock
// that a Txn's check that the row with key is absent and its insert of
// the row share (two 32-bit keys: the table's name and the key, hashed),
// so that two transactions that each read as absent a row the other
// inserts cannot both commit. MySQL needs none: the locking read of a
// missing row takes a gap lock (REPEATABLE READ, InnoDB's default); nor
// does SQLite, whose write transactions are serial.
func (t *Table[T]) lockAbsent(ctx context.Context, key any) error {
	if _, err := t.q.ExecContext(ctx, `SELECT pg_advisory_xact_lock(hashtext($1), hashtext($2))`, t.name, fmt.Sprint(key)); err != nil {
		return fmt.Errorf("sqlcas: lock %s key %v: %w", t.name, key, err)
	}
	return nil
}
