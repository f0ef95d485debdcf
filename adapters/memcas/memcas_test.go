package memcas_test

import (
	"testing"

	"github.com/occkit/occkit/adapters/memcas"
	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/cas/castest"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestConformance(t *testing.T) {
	limits := cas.Limits{MaxKeyBytes: 256, MaxValueBytes: 64 << 10, MaxCommitOps: 16}
	castest.Run(t, castest.Harness{
		NewStore: func(t *testing.T) cas.Store {
			s, err := memcas.NewWithConfig(memcas.Config{Limits: limits})
			if err != nil {
				t.Fatal(err)
			}
			return s
		},
		ReturnsCurrent: true,
		Limits:         limits,
		Workers:        8,
		OpsPerWorker:   200,
	})
}

func TestDefaultLimits(t *testing.T) {
	castest.Run(t, castest.Harness{
		NewStore:       func(t *testing.T) cas.Store { return memcas.New() },
		ReturnsCurrent: true,
	})
}

func TestConfigRefusesNegativeLimits(t *testing.T) {
	if _, err := memcas.NewWithConfig(memcas.Config{Limits: cas.Limits{MaxValueBytes: -1}}); err == nil {
		t.Fatal("a negative MaxValueBytes was accepted")
	}
}
