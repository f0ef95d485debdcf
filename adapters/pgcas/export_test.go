package pgcas

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"

	"github.com/occkit/occkit/cas"
)

// Test hooks: exported to the package's own tests only.

// IsSerializationFailure exposes isSerializationFailure to the tests.
var IsSerializationFailure = isSerializationFailure

// UpdateLocked is the pessimistic read-modify-write the optimistic path
// replaces, for the package's comparison benchmark and tests (the lab
// writes its own FOR UPDATE baseline): in one transaction it
// locks the key's row with SELECT ... FOR UPDATE, calls mutate with the
// current value (exists is false when the key is absent), writes the result
// and commits. It costs four round trips (BEGIN, SELECT, write, COMMIT) and
// holds the row lock across all of them. An absent key cannot be locked, so
// two concurrent creates may conflict: the loser gets a *cas.ConflictError.
// If mutate panics, the transaction is rolled back and the panic goes on.
func (s *Store) UpdateLocked(ctx context.Context, key string, mutate func(cur []byte, exists bool) ([]byte, error)) (cas.Version, error) {
	if err := s.limits.Get(ctx, key); err != nil {
		return 0, err
	}
	var version cas.Version
	err := RunTx(ctx, s.pool, pgx.TxOptions{}, func(tx pgx.Tx) error {
		var (
			cur []byte
			v   int64
		)
		err := tx.QueryRow(ctx, s.sqlLockRead, key).Scan(&cur, &v)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		next, err := mutate(cur, v != 0)
		if err != nil {
			return err
		}
		if err := s.limits.Put(ctx, key, next); err != nil {
			return err
		}
		if next == nil {
			next = []byte{}
		}
		id := s.ids.Next()
		var r result
		sql, args := s.writeSQL("compare-and-swap", key, cas.Version(v), next, 0, false, id)
		if err := tx.QueryRow(ctx, sql, args...).Scan(&r.newVersion, &r.curVersion, &r.curValue, &r.curToken); err != nil {
			return err
		}
		if r.newVersion == nil {
			return r.conflict(key, cas.Version(v), true)
		}
		version = cas.Version(*r.newVersion)
		return nil
	}, maxAttemptsOne...)
	return version, err
}
