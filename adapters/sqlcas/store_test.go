package sqlcas_test

import (
	"testing"

	"github.com/occkit/occkit/adapters/sqlcas"
	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/cas/castest"
)

func TestConformance(t *testing.T) {
	limits := cas.Limits{MaxKeyBytes: 256, MaxValueBytes: 64 << 10, MaxCommitOps: 16}
	eachDialect(t, func(t *testing.T, d sqlcas.Dialect) {
		castest.Run(t, castest.Harness{
			NewStore:       func(t *testing.T) cas.Store { return newStore(t, d, sqlcas.Config{Limits: limits}) },
			ReturnsCurrent: true,
			Limits:         limits,
			Workers:        8,
			OpsPerWorker:   40,
		})
	})
}

func TestConformanceDefaultLimits(t *testing.T) {
	eachDialect(t, func(t *testing.T, d sqlcas.Dialect) {
		castest.Run(t, castest.Harness{
			NewStore:       func(t *testing.T) cas.Store { return newStore(t, d, sqlcas.Config{}) },
			ReturnsCurrent: true,
		})
	})
}
