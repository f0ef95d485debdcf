package migrate

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/occ"
)

// ItemsDDL is the table of the PostgreSQL examples. The version column is
// all that the occkit version adds.
const ItemsDDL = `CREATE TABLE IF NOT EXISTS items (
    sku     text PRIMARY KEY,
    stock   int    NOT NULL,
    version bigint NOT NULL DEFAULT 1
)`

// BuyForUpdate is the "before" with a row lock: SELECT ... FOR UPDATE in a
// transaction. It is correct (the lock dies with the transaction), but
// every buyer of a SKU waits in line for the row, holding a connection,
// for as long as the transaction lasts.
func BuyForUpdate(ctx context.Context, pool *pgxpool.Pool, sku string) (int, error) {
	var left int
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		var n int
		if err := tx.QueryRow(ctx, `SELECT stock FROM items WHERE sku = $1 FOR UPDATE`, sku).Scan(&n); err != nil {
			return err
		}
		if n <= 0 {
			return ErrSoldOut
		}
		left = n - 1
		_, err := tx.Exec(ctx, `UPDATE items SET stock = $1 WHERE sku = $2`, left, sku)
		return err
	})
	return left, err
}

// BuyAdvisoryLocked is the "before" with a session advisory lock around
// autocommit statements. The lock belongs to the connection: if that
// connection is lost (a proxy's idle timeout, a failover) the lock is gone
// while this code goes on, and its UPDATE lands after another buyer's.
func BuyAdvisoryLocked(ctx context.Context, pool *pgxpool.Pool, sku string) (int, error) {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return 0, err
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock(hashtext($1))`, sku); err != nil {
		return 0, err
	}
	defer conn.Exec(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock(hashtext($1))`, sku)

	var n int
	if err := conn.QueryRow(ctx, `SELECT stock FROM items WHERE sku = $1`, sku).Scan(&n); err != nil {
		return 0, err
	}
	if n <= 0 {
		return n, ErrSoldOut
	}
	_, err = conn.Exec(ctx, `UPDATE items SET stock = $1 WHERE sku = $2`, n-1, sku)
	return n - 1, err
}

// BuyVersioned is the occkit version for a table of your own: read the
// row with its version, write with "AND version = $v", and treat zero rows
// updated as a conflict, which occ.Retry retries (a new read, a new
// check). No lock, no transaction held open across the read and the write.
func BuyVersioned(ctx context.Context, pool *pgxpool.Pool, sku string) (int, error) {
	var left int
	err := occ.Retry(ctx, func(ctx context.Context) error {
		var n int
		var v int64
		err := pool.QueryRow(ctx, `SELECT stock, version FROM items WHERE sku = $1`, sku).Scan(&n, &v)
		if errors.Is(err, pgx.ErrNoRows) {
			return cas.ErrNotFound
		}
		if err != nil {
			return err
		}
		if n <= 0 {
			return ErrSoldOut
		}
		tag, err := pool.Exec(ctx,
			`UPDATE items SET stock = $1, version = version + 1 WHERE sku = $2 AND version = $3`, n-1, sku, v)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return &cas.ConflictError{Key: sku, Expected: cas.Version(v)} // someone wrote since the read
		}
		left = n - 1
		return nil
	}, occ.WithMaxAttempts(50))
	return left, err
}
