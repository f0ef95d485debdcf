package locks

import (
	"context"
	"time"

	"github.com/go-redsync/redsync/v4"
	redsyncredis "github.com/go-redsync/redsync/v4/redis"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"
)

// Redlock is Redlock over independent Redis servers, as
// github.com/go-redsync/redsync/v4 implements it with its go-redis v9
// pools: a lock is held when a majority of the servers granted it. No
// fencing token, no renewal.
type Redlock struct {
	rs   *redsync.Redsync
	opts []redsync.Option
}

// NewRedlock returns a Redlock over the servers of clients (an odd number,
// usually five), taking every lock with opts (none: redsync's defaults).
func NewRedlock(clients []*redis.Client, opts ...redsync.Option) *Redlock {
	pools := make([]redsyncredis.Pool, len(clients))
	for i, c := range clients {
		pools[i] = goredis.NewPool(c)
	}
	return &Redlock{rs: redsync.New(pools...), opts: opts}
}

// Acquire takes the lock at the key name on a majority of the servers.
// The grant's Ref is the value of its keys. Its Release deletes the keys
// where they still hold that value, and returns nil although servers it
// cannot reach fail their part: their keys expire.
func (l *Redlock) Acquire(ctx context.Context, name string) (*Grant, error) {
	m := l.rs.NewMutex(name, l.opts...)
	if err := m.LockContext(ctx); err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, err
	}
	return &Grant{
		Ref:     m.Value(),
		expires: func() (time.Time, bool) { return m.Until(), false },
		release: func(ctx context.Context) error {
			_, _ = m.UnlockContext(ctx)
			return nil
		},
	}, nil
}
