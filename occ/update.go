package occ

import (
	"context"
	"errors"

	"github.com/occkit/occkit/cas"
)

// Update is a read-modify-write of one key with retry: it reads the key,
// calls mutate with the current value (exists is false and cur the zero
// value when the key is absent), writes the result only if the key's
// version has not changed, and starts again on a conflict. It returns the
// value written and its version.
//
// A conflict that carries the key's current state (PostgreSQL, etcd,
// DynamoDB and memcas return it in the same round trip) restarts from that
// state without reading the key again, so a retry costs one round trip.
//
// mutate may run several times and must depend only on its arguments; an
// error from it ends the loop and is returned as is (unless WithRetryable
// says to retry it). The loop is Retry's: see there for giving up, contexts
// and panics.
//
// Replacing a mutex around a counter:
//
//	counters := cas.NewTyped(store, cas.JSON[int]())
//	n, _, err := occ.Update(ctx, counters, "visits", func(n int, _ bool) (int, error) {
//		return n + 1, nil
//	})
func Update[T any](ctx context.Context, s *cas.Typed[T], key string, mutate func(cur T, exists bool) (T, error), opts ...Option) (T, cas.Version, error) {
	var c config
	c.apply(opts)
	c.op, c.key = "update", key
	var (
		written  T
		version  cas.Version
		hint     cas.Item
		haveHint bool
	)
	err := c.run(ctx, func(ctx context.Context) error {
		var (
			cur T
			ver cas.Version
			err error
		)
		if haveHint {
			haveHint = false
			cur, ver, err = decodeHint(s, key, hint)
		} else {
			cur, ver, err = s.Get(ctx, key)
			if errors.Is(err, cas.ErrNotFound) {
				err = nil
			}
		}
		if err != nil {
			return err
		}
		next, err := mutate(cur, ver != 0)
		if err != nil {
			return err
		}
		nv, err := s.CompareAndSwap(ctx, key, ver, next)
		if err != nil {
			var ce *cas.ConflictError
			if errors.As(err, &ce) && ce.HasCurrent && ce.Key == key {
				hint, haveHint = ce.Current, true
			}
			return err
		}
		written, version = next, nv
		return nil
	})
	if err != nil {
		var zero T
		return zero, 0, err
	}
	return written, version, nil
}

// decodeHint decodes the current item a conflict carried.
func decodeHint[T any](s *cas.Typed[T], key string, it cas.Item) (T, cas.Version, error) {
	var v T
	if it.Version == 0 {
		return v, 0, nil
	}
	err := s.Decode(key, it.Value, &v)
	return v, it.Version, err
}
