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

// TxBeginner starts transactions: a *pgxpool.Pool, a *pgx.Conn, or a
// pgx.Tx (which then runs fn in a savepoint).
type TxBeginner interface {
	BeginTx(ctx context.Context, txOptions pgx.TxOptions) (pgx.Tx, error)
}

// RunTx runs fn in a transaction begun with txOptions and commits it,
// running the whole function again, through occ.Retry and opts, when
// PostgreSQL refuses the transaction with SQLSTATE 40001
// (serialization_failure) or 40P01 (deadlock_detected). Both roll the
// transaction back, so running it again is safe; they are returned as
// errors matching cas.ErrConflict, with the *pgconn.PgError reachable with
// errors.As.
//
// fn must do all its reads and writes through tx, and return the error of
// a failed statement (wrapped with %w, or as is): a serialization failure
// can come from any statement, and also from the COMMIT. Any other error
// from fn, or from begin, rolls the transaction back and ends the loop; it
// is returned as is. fn may run several times: keep side effects outside
// it.
//
// A COMMIT whose reply is lost (the connection broke after it was sent)
// leaves the outcome unknown: RunTx then returns a *cas.AmbiguousError
// (errors.Is(err, cas.ErrAmbiguous)) and never runs fn again.
//
// Serializable transactions with retry, the classic write skew guard:
//
//	err := pgcas.RunTx(ctx, pool, pgx.TxOptions{IsoLevel: pgx.Serializable}, func(tx pgx.Tx) error {
//		var onCall int
//		if err := tx.QueryRow(ctx, `SELECT count(*) FROM doctors WHERE on_call`).Scan(&onCall); err != nil {
//			return err
//		}
//		if onCall < 2 {
//			return ErrLastDoctor // not retried
//		}
//		_, err := tx.Exec(ctx, `UPDATE doctors SET on_call = false WHERE name = $1`, name)
//		return err
//	}, occ.WithMaxAttempts(5))
func RunTx(ctx context.Context, db TxBeginner, txOptions pgx.TxOptions, fn func(tx pgx.Tx) error, opts ...occ.Option) error {
	return occ.Retry(ctx, func(ctx context.Context) error {
		return runTxOnce(ctx, db, txOptions, fn)
	}, opts...)
}

// runTxOnce runs one attempt of RunTx.
func runTxOnce(ctx context.Context, db TxBeginner, txOptions pgx.TxOptions, fn func(tx pgx.Tx) error) error {
	tx, err := db.BeginTx(ctx, txOptions)
	if err != nil {
		return txError("begin", err)
	}
	if err := fn(tx); err != nil {
		// Rollback's error is of no use: the transaction ends either way
		// (a broken connection rolls it back on the server).
		_ = tx.Rollback(ctx)
		return txError("transaction", err)
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
	case errors.As(err, &pgErr), errors.Is(err, pgx.ErrTxCommitRollback):
		// The server answered: the transaction was rolled back.
		return txError("commit", err)
	case closedBefore || !sent(err):
		return fmt.Errorf("pgcas: commit not sent, transaction rolled back: %w", err)
	}
	return &cas.AmbiguousError{Op: "commit", Err: err}
}

// txError marks a serialization failure or a deadlock as a conflict,
// keeping the server's error reachable with errors.As.
func txError(stage string, err error) error {
	if IsRetryable(err) {
		return fmt.Errorf("pgcas: %s: %w, rolled back: %w", stage, cas.ErrConflict, err)
	}
	return err
}
