package migrate

import (
	"context"
	"errors"

	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/occ"
)

// ErrSoldOut reports a SKU with no stock left.
var ErrSoldOut = errors.New("migrate: sold out")

// Buy is the occkit version of every key-value lock below: read the stock
// and its version, check, write only if the version is still the one read,
// and on a conflict read again and redo. It works on any cas.Store
// (rediscas, etcdcas, pgcas, dynamocas, memcas) and returns the units
// left.
func Buy(ctx context.Context, stock *cas.Typed[int], sku string) (int, error) {
	left, _, err := occ.Update(ctx, stock, "stock/"+sku, func(n int, _ bool) (int, error) {
		if n <= 0 {
			return n, ErrSoldOut // not retried, nothing written
		}
		return n - 1, nil
	}, occ.WithMaxAttempts(50))
	return left, err
}
