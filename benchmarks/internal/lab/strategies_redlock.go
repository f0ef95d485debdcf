package lab

import (
	"context"
	"errors"
	"fmt"

	"github.com/occkit/occkit/benchmarks/internal/backends"
	"github.com/occkit/occkit/benchmarks/internal/locks"
)

var redlockStrategies = []strategySpec{
	{
		Name: "lock-redlock",
		Kind: kindLock,
		About: fmt.Sprintf("Redlock over %d independent Redis servers (github.com/go-redsync/redsync/v4 with its go-redis v9 pool, "+
			"its defaults: 8 s expiry, up to 32 tries 50–250 ms apart, a quorum of 3) around read, work and write; no fencing; "+
			"the data may live on any backend", backends.RedlockServers),
		SingleKey: true, MultiKey: true,
		DefaultOn: defaultOnRedisLocks,
		New:       newRedlock,
	},
}

// newRedlock locks on Redlock's servers (backends.Redlock: OCCKIT_REDLOCK_URLS,
// or five throwaway servers), opened by the first cell that needs them
// and stopped with the lab.
func newRedlock(ctx context.Context, h *harness) (cellStrategy, error) {
	rl, err := h.lab.openOnDemand(ctx, backends.Redlock)
	if err != nil {
		return nil, fmt.Errorf("no Redis servers for Redlock (%v): %w", err, errNotApplicable)
	}
	clients := rl.Redlock()
	h.OnClose(func(ctx context.Context) error {
		var errs []error
		for _, c := range clients {
			errs = append(errs, backends.DeleteRedisPrefix(ctx, c, "lab-redlock:"+h.NS+"/"))
		}
		return errors.Join(errs...)
	})
	return lockedDo(h, "lab-redlock:"+h.NS+"/", locks.NewRedlock(clients)), nil
}
