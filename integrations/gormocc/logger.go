package gormocc

import (
	"context"
	"errors"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/occkit/occkit/cas"
)

// QuietConflicts returns a GORM logger that logs through l, except that a
// statement whose error matches cas.ErrConflict (a stale write, which
// Update retries and other callers handle) is logged as if it had
// succeeded: as l logs a statement at its Info level, or as slow SQL, but
// never as an error. Every other error is logged as l logs it.
//
//	db, err := gorm.Open(dialector, &gorm.Config{Logger: gormocc.QuietConflicts(logger.Default)})
//
// The returned logger keeps quieting conflicts at every level
// (LogMode, as db.Debug() uses), and it passes parameters through l's
// filter (logger.Config.ParameterizedQueries) when l has one. It is safe
// for concurrent use when l is.
func QuietConflicts(l logger.Interface) logger.Interface { return quietConflicts{l} }

// quietConflicts is the logger of QuietConflicts.
type quietConflicts struct{ logger.Interface }

// LogMode returns the logger at level, still quiet about conflicts.
func (q quietConflicts) LogMode(level logger.LogLevel) logger.Interface {
	return quietConflicts{q.Interface.LogMode(level)}
}

// Trace logs a statement, a conflict as a success.
func (q quietConflicts) Trace(ctx context.Context, begin time.Time, fc func() (sql string, rowsAffected int64), err error) {
	if errors.Is(err, cas.ErrConflict) {
		err = nil
	}
	q.Interface.Trace(ctx, begin, fc, err)
}

// ParamsFilter is the wrapped logger's, when it has one (gorm.ParamsFilter).
func (q quietConflicts) ParamsFilter(ctx context.Context, sql string, params ...any) (string, []any) {
	if f, ok := q.Interface.(gorm.ParamsFilter); ok {
		return f.ParamsFilter(ctx, sql, params...)
	}
	return sql, params
}
