package sqlcas

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/occkit/occkit/cas"
)

// addApplied is a delta's first send on PostgreSQL: one statement (apply)
// that updates the row and records the delta when the delta applies;
// when it does not, or the server could not read the value, the
// transaction of addOnce runs and says why.
func (s *Store) addApplied(ctx context.Context, ds *deltaStatements, key string, n int64, b cas.Bounds, vals *[numSlots]any) (int64, cas.Version, error) {
	var ver, v int64
	err := s.q.QueryRowContext(ctx, ds.apply.text, ds.apply.args(vals)...).Scan(&ver, &v)
	pe, isPg := asPg(err)
	switch {
	case err == nil:
		return v, cas.Version(ver), nil
	case errors.Is(err, sql.ErrNoRows), isPg && strings.HasPrefix(pe.Code, "22"):
		return s.addOnce(ctx, ds, key, n, b, vals)
	case isDuplicate(err):
		return 0, 0, fmt.Errorf("%w: %w", errDeltaDone, err)
	}
	return 0, 0, err
}
