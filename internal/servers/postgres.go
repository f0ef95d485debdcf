package servers

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/occkit/occkit/internal/ctxwait"
)

// WaitReplayed waits until the replica has replayed everything the primary
// had written when it was called, or ctx ends. It writes one WAL record on
// the primary (a logical message: no table, nothing to clean up) and waits
// for the replica to replay past its end.
func WaitReplayed(ctx context.Context, primary, replica *pgxpool.Pool) error {
	var lsn string
	if err := primary.QueryRow(ctx, `SELECT pg_logical_emit_message(false, 'occkit', 'catch-up')::text`).Scan(&lsn); err != nil {
		return fmt.Errorf("write the catch-up record on the primary: %w", err)
	}
	for {
		var done bool
		err := replica.QueryRow(ctx, `SELECT pg_last_wal_replay_lsn() >= $1::pg_lsn`, lsn).Scan(&done)
		switch {
		case err != nil:
			return fmt.Errorf("the replica's replay position: %w", err)
		case done:
			return nil
		}
		if ctxwait.Sleep(ctx, 5*time.Millisecond) != nil {
			return fmt.Errorf("the replica has not replayed up to %s: %w", lsn, ctx.Err())
		}
	}
}
