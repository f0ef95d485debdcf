package locks

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/occkit/occkit/internal/ctxwait"
)

// Redis is the Redis lock people write by hand: SET name token NX PX ttl
// with a random token, polled while somebody else holds it, released by a
// script that deletes the key only if it still holds the token. No
// fencing token. Without a watchdog a holder that outlives the TTL (a
// pause, a slow write) is not told; with one, a goroutine renews the key
// every TTL/3 while it still holds the token, and the grant is lost when
// it cannot. Set the fields before the first Acquire.
type Redis struct {
	// Client reaches the server holding the lock keys.
	Client redis.UniversalClient
	// TTL is the lock's expiry (PX).
	TTL time.Duration
	// PollMin and PollMax bound the wait between two tries of a
	// waiter: doubling from the first to the second, ±50% jitter, from
	// the first again for every acquisition (defaults 1 ms and 50 ms).
	PollMin, PollMax time.Duration
	// Watchdog renews a held lock every TTL/3.
	Watchdog bool
}

// compareDelete deletes the lock only if it still holds the token: a
// holder whose lock expired and went to someone else must not delete the
// new holder's lock.
var compareDelete = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
`)

// RedisCompareExpire sets the lock's TTL to ARGV[2] ms only if the key
// still holds the token ARGV[1]: the watchdog's renewal, and (PEXPIRE 1)
// a forward clock jump on the server.
var RedisCompareExpire = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
`)

// Acquire takes the lock at the key name. The grant's Ref is its token.
func (l *Redis) Acquire(ctx context.Context, name string) (*Grant, error) {
	var b [16]byte
	_, _ = crand.Read(b[:])
	tok := hex.EncodeToString(b[:])
	wait, most := l.PollMin, l.PollMax
	if wait <= 0 {
		wait = time.Millisecond
	}
	if most <= 0 {
		most = 50 * time.Millisecond
	}
	for {
		sent := time.Now()
		err := l.Client.Do(ctx, "SET", name, tok, "NX", "PX", l.TTL.Milliseconds()).Err()
		if err == nil {
			exp := new(atomic.Int64) // Unix ns
			exp.Store(sent.Add(l.TTL).UnixNano())
			g := &Grant{Ref: tok, expires: func() (time.Time, bool) { return time.Unix(0, exp.Load()), l.Watchdog }}
			g.release = func(ctx context.Context) error {
				n, err := compareDelete.Run(ctx, l.Client, []string{name}, tok).Int()
				if err == nil && n == 0 {
					err = ErrNotHeld // nothing deleted
				}
				return err
			}
			if l.Watchdog {
				g.watch(func(w *watch) { l.renew(w, name, tok, exp) })
			}
			return g, nil
		}
		if !errors.Is(err, redis.Nil) { // redis.Nil: not set, somebody holds it
			return nil, err
		}
		if err := ctxwait.Sleep(ctx, time.Duration(float64(wait)*(0.5+rand.Float64()))); err != nil {
			return nil, err
		}
		wait = min(2*wait, most)
	}
}

// renew is the watchdog of the grant tok at key: it renews the lock every
// TTL/3 while it still holds the token, and gives up (the grant is lost)
// when it finds the key gone or someone else's, or could not renew it
// before it expired.
func (l *Redis) renew(w *watch, key, tok string, exp *atomic.Int64) {
	every := l.TTL / 3
	w.tick(every, func() time.Duration {
		sent := time.Now()
		until := time.Unix(0, exp.Load())
		if !sent.Before(until) {
			// The timer fired late: the process was stopped past the
			// expiry.
			w.lose(fmt.Sprintf("its watchdog woke %v after the lock had expired (the process was stopped)", sent.Sub(until).Round(time.Millisecond)))
			return 0
		}
		ctx, cancel := context.WithDeadline(context.Background(), until)
		n, err := RedisCompareExpire.Run(ctx, l.Client, []string{key}, tok, l.TTL.Milliseconds()).Int()
		cancel()
		switch {
		case err == nil && n == 1:
			exp.Store(sent.Add(l.TTL).UnixNano())
			return every
		case err == nil:
			w.lose("its watchdog found the lock key gone or someone else's")
		case !time.Now().Before(until):
			w.lose(fmt.Sprintf("its watchdog could not renew the lock before it expired: %v", err))
		default:
			return max(min(every/4, time.Until(until)), 1) // at the expiry: lost
		}
		return 0
	})
}
