package hybrid

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/occ"
)

// Txn runs fn as an optimistic transaction (occ.Txn) over s while holding
// leases on keys, taken in key order so that two calls on overlapping
// keys cannot wait for each other, and released when the attempt ends.
// The leases keep this caller's rivals on those keys from racing it, so
// that on hot keys few commits are lost; the commit's version checks
// (cas.Committer) keep the write safe if a lease is lost meanwhile (a
// fencing token covers one key; a commit of several is safe by its
// versions). fn should read and write only keys: others are committed
// optimistically, without a lease.
//
// A lost commit or lease is retried with fresh leases under opts (occ's
// options: attempt limit, backoff, observer), unless the error matches
// ErrLockerClosed (a closed locker grants no fresh lease); fn's error
// ends the call and is returned as is. s must be a cas.Committer to write
// several keys (see occ.Txn).
//
//	err := hybrid.Txn(ctx, locker, store, []string{from, to}, func(tx *occ.Tx) error {
//		... tx.Get(from), tx.Get(to), tx.Put(from, ...), tx.Put(to, ...)
//	})
func Txn(ctx context.Context, l Locker, s cas.Store, keys []string, fn func(tx *occ.Tx) error, opts ...occ.Option) error {
	if len(keys) == 0 {
		return fmt.Errorf("hybrid: txn: %w: no keys to lease", cas.ErrInvalidCommit)
	}
	sorted := slices.Compact(slices.Sorted(slices.Values(keys)))
	opts = append(opts[:len(opts):len(opts)], occ.WithRetryable(retryWithNewLease), occ.WithOp(OpTxn, ""))
	return occ.Retry(ctx, func(ctx context.Context) error {
		leases := make([]Lease, 0, len(sorted))
		defer func() { releaseAll(ctx, leases) }()
		for _, k := range sorted {
			lease, err := l.Acquire(ctx, k)
			if err != nil {
				return err
			}
			leases = append(leases, lease)
		}
		// One attempt per set of leases, out of the process's turns (the
		// leases order the callers); a conflict comes back to this loop
		// and is retried with fresh leases.
		return occ.Txn(ctx, s, fn, occ.WithMaxAttempts(1), occ.WithTurns(false))
	}, opts...)
}

// releaseAll releases leases at once, each on a goroutine of its own but
// the last, and returns when all are released: a waiter for the first key
// does not wait for the release of the others too. A release that fails
// leaves its lease to expire; one that panics panics on the caller's
// goroutine, once all have returned.
func releaseAll(ctx context.Context, leases []Lease) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var panicked any
	for i, l := range leases {
		if i == len(leases)-1 {
			_ = l.Release(rctx)
			break
		}
		wg.Go(func() {
			defer func() {
				if p := recover(); p != nil {
					mu.Lock()
					panicked = p
					mu.Unlock()
				}
			}()
			_ = l.Release(rctx)
		})
	}
	wg.Wait()
	if panicked != nil {
		panic(panicked)
	}
}
