package occ

import (
	"context"
	"reflect"

	"github.com/occkit/occkit/cas"
)

// Add adds n to the integer value of key (negative n takes), if the result
// lies within b, and returns the new value and the key's new version: a
// bounded delta, for counters, stock, quotas and balances with a floor.
//
// On a store that implements cas.Adder (memcas, pgcas, sqlcas, rediscas,
// dynamocas) the server does the arithmetic in one write: there is no read
// before it and no version to race on, so concurrent deltas of one key
// never conflict, in one process or across any number of them, and Add
// makes one round trip. Errors the options' WithRetryable accepts (a
// connection refused, a busy database) are retried; a lost reply is
// resolved by the store with the delta's write id, and an unresolved one
// (cas.ErrAmbiguous) is returned, never retried: a delta is not
// idempotent. On other stores (etcdcas: etcd has no arithmetic) Add is an
// Update of the value with cas.JSON[int64]'s encoding, with its retries.
//
// A result outside b (or outside the int64 range) fails with a
// *cas.BoundError, matched by cas.ErrBound, and writes nothing: selling the
// last item twice is impossible. An absent key counts as 0. A value that is
// not an integer fails with cas.ErrNotInteger.
//
// Selling one item:
//
//	left, _, err := occ.Add(ctx, store, "stock:sku-42", -1, cas.AtLeast(0))
//	if errors.Is(err, cas.ErrBound) {
//		return ErrSoldOut
//	}
func Add(ctx context.Context, s cas.Store, key string, n int64, b cas.Bounds, opts ...Option) (int64, cas.Version, error) {
	a, ok := s.(cas.Adder)
	if !ok {
		return Update(ctx, cas.NewTyped(s, intCodec{}), key, func(cur int64, _ bool) (int64, error) {
			if !b.Allows(cur, n) {
				return 0, &cas.BoundError{Key: key, Add: n, Bounds: b, Current: cur, HasCurrent: true}
			}
			return cur + n, nil
		}, opts...)
	}
	var c config
	c.start("add", key, opts)
	if c.noTurns || ctx == nil || !reflect.TypeOf(a).Comparable() {
		// A store whose type cannot key a map (a struct value holding a
		// map or a slice) has no line: its deltas go one by one.
		return addOnce(ctx, &c, a, key, n, b)
	}
	return addBatched(ctx, &c, a, key, n, b)
}

// addOnce is one delta, retried as the options say.
func addOnce(ctx context.Context, c *config, a cas.Adder, key string, n int64, b cas.Bounds) (int64, cas.Version, error) {
	var (
		v   int64
		ver cas.Version
	)
	err := c.run(ctx, func(ctx context.Context) error {
		var err error
		v, ver, err = a.Add(ctx, key, n, b)
		return err
	})
	return v, ver, err
}

// intCodec reads and writes the values a cas.Adder does: cas.JSON[int64]'s
// encoding, read strictly (cas.ParseInt).
type intCodec struct{}

func (intCodec) Marshal(v int64) ([]byte, error) { return cas.FormatInt(v), nil }

func (intCodec) Unmarshal(data []byte, v *int64) (err error) {
	*v, err = cas.ParseInt("", data)
	return err
}
