package migrate

import (
	"context"
	"strconv"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// BuyEtcdMutex is the "before" for etcd: a concurrency.Mutex on a session
// lease around a Get and a Put. If the holder pauses past the session's TTL
// the lease expires and the next buyer gets the mutex, but this Put does
// not check that the mutex is still held (mu.IsOwner() is a condition it
// would have to put in its own Txn): a sale is lost.
func BuyEtcdMutex(ctx context.Context, cli *clientv3.Client, sku string) (int, error) {
	sess, err := concurrency.NewSession(cli, concurrency.WithTTL(5))
	if err != nil {
		return 0, err
	}
	defer sess.Close()
	mu := concurrency.NewMutex(sess, "/locks/"+sku)
	if err := mu.Lock(ctx); err != nil {
		return 0, err
	}
	defer mu.Unlock(context.WithoutCancel(ctx))

	resp, err := cli.Get(ctx, "/stock/"+sku)
	if err != nil {
		return 0, err
	}
	n := 0
	if len(resp.Kvs) > 0 {
		if n, err = strconv.Atoi(string(resp.Kvs[0].Value)); err != nil {
			return 0, err
		}
	}
	if n <= 0 {
		return n, ErrSoldOut
	}
	_, err = cli.Put(ctx, "/stock/"+sku, strconv.Itoa(n-1))
	return n - 1, err
}
