package pgcas

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/occ"
)

// TxBeginner starts transactions: a *pgxpool.Pool or a *pgx.Conn.
//
// A pgx.Tx does not implement it (it has Begin, not BeginTx), and that is
// deliberate: RunTx cannot run inside another transaction, in a savepoint.
// A serialization failure (40001) or a deadlock (40P01) is a verdict on
// the whole top-level transaction, not on the statements since a
// savepoint: under SERIALIZABLE the transaction keeps its snapshot and is
// marked doomed, so running fn again after ROLLBACK TO SAVEPOINT would
// fail the same way (or read the same stale snapshot), and a failure at
// the outer COMMIT is out of the savepoint's reach. The only retry that
// can succeed begins a new top-level transaction, which is what RunTx
// does.
type TxBeginner interface {
	BeginTx(ctx context.Context, txOptions pgx.TxOptions) (pgx.Tx, error)
}

// RunTx runs fn in a transaction begun with txOptions and commits it,
// running the whole function again, through occ.Retry and opts, when
// PostgreSQL refuses the transaction with SQLSTATE 40001
// (serialization_failure) or 40P01 (deadlock_detected), from any statement
// or from the COMMIT. Both roll the transaction back; they are returned as
// a *cas.ConflictError (errors.Is(err, cas.ErrConflict)), with the
// *pgconn.PgError reachable with errors.As.
//
// fn must do all its reads and writes through tx and return the error of
// a failed statement (wrapped with %w, or as is); it may run several
// times: keep side effects outside it. Any other error from fn, or from
// begin, rolls the transaction back and is returned as is, not retried,
// even one that matches cas.ErrConflict. A COMMIT whose reply is lost is a
// *cas.AmbiguousError and never runs fn again; pass
// occ.WithRetryable(pgcas.Retryable) to run fn again after a BEGIN or
// COMMIT that certainly applied nothing. If fn panics, the transaction is
// rolled back and the panic goes on up. See
// docs/postgres.md#serializable-transactions.
//
//	err := pgcas.RunTx(ctx, pool, pgx.TxOptions{IsoLevel: pgx.Serializable}, func(tx pgx.Tx) error {
//		var on int
//		if err := tx.QueryRow(ctx, `SELECT count(*) FROM doctors WHERE on_call`).Scan(&on); err != nil {
//			return err
//		}
//		if on < 2 {
//			return ErrLastOnCall // not retried: returned as is
//		}
//		_, err := tx.Exec(ctx, `UPDATE doctors SET on_call = false WHERE id = $1`, id)
//		return err
//	})
func RunTx(ctx context.Context, db TxBeginner, txOptions pgx.TxOptions, fn func(tx pgx.Tx) error, opts ...occ.Option) error {
	return occ.Retry(ctx, func(ctx context.Context) error {
		return runTxOnce(ctx, db, txOptions, fn)
	}, opts...)
}

// runTxOnce runs one attempt of RunTx.
func runTxOnce(ctx context.Context, db TxBeginner, txOptions pgx.TxOptions, fn func(tx pgx.Tx) error) error {
	tx, err := db.BeginTx(ctx, txOptions)
	if err != nil {
		if beginPassing(err) {
			return &transientError{op: "begin", key: txConflictKey, why: "not applied", err: err}
		}
		return txError("begin", err)
	}
	// Rolls back when fn fails or panics (the panic goes on, but the
	// transaction ends and a pool's connection goes back to the pool),
	// and does nothing after a commit (pgx.ErrTxClosed). Rollback's error
	// is of no use: the transaction ends either way (a connection that
	// fails to roll back is closed, which rolls it back on the server).
	defer func() { _ = tx.Rollback(ctx) }()
	if err := fn(tx); err != nil {
		if isSerializationFailure(err) {
			return txError("transaction", err)
		}
		if errors.Is(err, cas.ErrConflict) {
			// Not this transaction's conflict: running fn again in a new
			// transaction would not help. Permanent ends the loop at once
			// and is removed before RunTx returns.
			return occ.Permanent(err)
		}
		return err // occ.WithRetryable in opts may still retry it
	}
	// A connection that broke before COMMIT (fn ignored the error) rolled
	// the transaction back: COMMIT is then not sent at all.
	closedBefore := tx.Conn().IsClosed()
	err = tx.Commit(ctx)
	if err == nil {
		return nil
	}
	var pgErr *pgconn.PgError
	switch {
	case transientServer(err):
		// The server answered the COMMIT with the end of the session (on
		// a connection that died while idle in the transaction, or
		// before the commit): the transaction was rolled back.
		return &transientError{op: "commit", key: txConflictKey, why: "transaction rolled back", err: err}
	case errors.As(err, &pgErr), errors.Is(err, pgx.ErrTxCommitRollback):
		// The server answered: the transaction was rolled back.
		return txError("commit", err)
	case closedBefore || !sent(err):
		return &transientError{op: "commit", key: txConflictKey, why: "not sent, transaction rolled back", err: err}
	}
	return &cas.AmbiguousError{Op: "commit", Err: err}
}

// beginPassing reports whether BEGIN failed for a reason that may pass: no
// connection could be made (see acquireError), or the server ended the
// session (transientCodes). Nothing was applied either way.
func beginPassing(err error) bool {
	if isSerializationFailure(err) {
		return false // txError makes it a conflict
	}
	if transientServer(err) {
		return true
	}
	var te *transientError
	return errors.As(acquireError("begin", "", err), &te)
}

// txError makes a serialization failure or a deadlock a *cas.ConflictError,
// keeping the server's error reachable with errors.As.
func txError(stage string, err error) error {
	if isSerializationFailure(err) {
		return &cas.ConflictError{Key: txConflictKey, Err: fmt.Errorf("pgcas: %s: transaction rolled back: %w", stage, err)}
	}
	return err
}

// txConflictKey is the Key of the *cas.ConflictError of a transaction:
// the conflict is the transaction's, not a key's.
const txConflictKey = "(transaction)"
