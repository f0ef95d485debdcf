package lab

import (
	"context"
	"errors"
	"time"

	"github.com/occkit/occkit/adapters/memcas"
	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/hybrid"
)

var memorySpecs = []backendSpec{
	{
		Name:  "memory",
		About: "memcas, the in-process store: the cost of coordination without a network",
		Open: func(context.Context, *Env) (service, error) {
			return memoryBackend{}, nil
		},
	},
}

type memoryBackend struct{}

// memoryTuning: an in-process attempt takes about a microsecond, so occ's
// default first wait of 1 ms would idle the workers for a thousand
// attempts' time (docs/benchmarks.md measured 11–13× fewer operations).
// The lab follows the docs' advice and scales the backoff down.
var memoryTuning = retryTuning{BackOffInitial: 10 * time.Microsecond, BackOffMax: time.Millisecond}

func (memoryBackend) Info() backendInfo {
	return backendInfo{
		Name:       "memory",
		Server:     "in-process (adapters/memcas)",
		Durability: "none (process memory)",
		Locker:     "hybrid.NewLocalLocker (in process, 10 s TTL)",
		BackOff:    describeBackOff(memoryTuning),
	}
}

func (memoryBackend) tuning() retryTuning { return memoryTuning }

func (memoryBackend) NewStore(context.Context, string) (cas.Store, func(context.Context) error, error) {
	return memcas.New(), func(context.Context) error { return nil }, nil
}

func (memoryBackend) openStore(context.Context, string) (cas.Store, error) {
	return nil, errors.New("memory: the in-process store cannot be shared with another process")
}

func (memoryBackend) NewLocker(context.Context, string) (hybrid.Locker, func(context.Context) error, error) {
	return hybrid.NewLocalLocker(10 * time.Second), func(context.Context) error { return nil }, nil
}

func (memoryBackend) Close(context.Context) error { return nil }
