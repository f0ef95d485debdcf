package migrate

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"
)

// unlockScript deletes the lock only if it still holds this holder's
// token.
var unlockScript = redis.NewScript(`
if redis.call("GET", KEYS[1]) == ARGV[1] then
	return redis.call("DEL", KEYS[1])
end
return 0`)

// BuyRedisLocked is the "before" for Redis: a SET NX PX lock with a TTL
// around a read and a plain write. If the holder pauses between the GET and
// the SET for longer than the TTL (a GC pause, a slow call), the lock
// expires, a second buyer takes it and sells, and this SET then writes the
// stock it read before the pause: a sale is lost.
func BuyRedisLocked(ctx context.Context, rdb *redis.Client, sku string) (int, error) {
	lock, token := "lock:"+sku, newToken()
	for {
		ok, err := rdb.SetNX(ctx, lock, token, 5*time.Second).Result()
		if err != nil {
			return 0, err
		}
		if ok {
			break
		}
		select {
		case <-time.After(5 * time.Millisecond):
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
	defer unlockScript.Run(context.WithoutCancel(ctx), rdb, []string{lock}, token)

	n, err := rdb.Get(ctx, "stock:"+sku).Int()
	if err != nil && !errors.Is(err, redis.Nil) {
		return 0, err
	}
	if n <= 0 {
		return n, ErrSoldOut
	}
	return n - 1, rdb.Set(ctx, "stock:"+sku, n-1, 0).Err()
}

func newToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
