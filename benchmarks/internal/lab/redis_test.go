package lab

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/occkit/occkit/internal/redistest"
)

// TestRedisSmoke runs small cells on the Redis server named by
// OCCKIT_REDIS_URL (`make test` starts one): it fails, saying how to get a
// server, when the variable is unset. Every cell's keys are deleted after
// it.
func TestRedisSmoke(t *testing.T) {
	redistest.URL(t) // fails loudly without a server
	l := openLab(t, "redis")
	for _, c := range []struct{ strategy, workload string }{
		{"occ", "counter"}, {"occ-cached", "inventory"}, {"hybrid", "counter"}, {"adaptive", "inventory"},
		{"lock-local", "counter"}, {"occ-txn", "transfer"}, {"hybrid", "transfer"},
		{"lock-redis", "counter"}, {"lock-redis", "transfer"},
	} {
		t.Run(c.strategy+"/"+c.workload, func(t *testing.T) {
			r := runCell(t, l, Cell{Backend: "redis", Strategy: c.strategy, Workload: c.workload, Workers: 4, Keys: 8, Ops: 120, Seed: 7, MaxAttempts: 1000})
			if !r.InvariantOK || r.FailedOps != 0 || r.Ops+r.DeclinedOps != 120 {
				t.Errorf("invariant %v %s; %d committed, %d declined, %d failed (%s)", r.InvariantOK, r.Invariant, r.Ops, r.DeclinedOps, r.FailedOps, r.Error)
			}
		})
	}
}

// TestRedisLockOverOtherData: lock-redis over data that is not in Redis,
// with the redis backend not selected: the lab opens Redis
// (OCCKIT_REDIS_URL) when the first cell needs it, keeps it for the run
// and reports it.
func TestRedisLockOverOtherData(t *testing.T) {
	redistest.URL(t)
	l := openLab(t, "memory")
	for _, wl := range []string{"counter", "inventory", "transfer"} {
		// Two keys, four workers: the lock is contended, and any lapse
		// in its exclusion would break the invariant (the writes carry
		// the version read, so it would show as a conflict, retried).
		r := runCell(t, l, Cell{Backend: "memory", Strategy: "lock-redis", Workload: wl, Workers: 4, Keys: 2, Ops: 200, Seed: 8})
		attempts := r.AttemptsPerOp * float64(r.Ops)
		if !r.InvariantOK || r.FailedOps != 0 || r.Ops+r.DeclinedOps != 200 || attempts > float64(r.Ops+r.DeclinedOps)+0.5 {
			t.Errorf("%s: invariant %v %s; %d committed, %d declined, %d failed (%s), %.0f attempts (more than one per operation: a conflict under the lock, which did not exclude)",
				wl, r.InvariantOK, r.Invariant, r.Ops, r.DeclinedOps, r.FailedOps, r.Error, attempts)
		}
	}
	if got := l.Open(); !slices.Equal(got, []string{"memory", "redis"}) {
		t.Errorf("open services %v, want memory and redis (opened for the lock)", got)
	}
}

// TestRedisLockByHand checks the hand-written lock itself: SET NX PX
// excludes, the TTL is set, and the release deletes only its own token
// (a holder whose lock expired and went to another must not release the
// other's).
func TestRedisLockByHand(t *testing.T) {
	cli := redistest.Client(t)
	key := redistest.Prefix(t) + "lock"
	ctx := redistest.Ctx(t, 30*time.Second)
	rng := rand.New(rand.NewPCG(1, 2))

	tok, err := redisLock(ctx, cli, key, rng)
	if err != nil {
		t.Fatal(err)
	}
	if ttl := cli.PTTL(ctx, key).Val(); ttl <= 0 || ttl > redisLockTTL {
		t.Errorf("lock TTL %v, want in (0, %v]", ttl, redisLockTTL)
	}
	// Held: another acquirer polls until its context ends.
	wctx, cancel := context.WithTimeout(ctx, 30*time.Millisecond)
	_, err = redisLock(wctx, cli, key, rng)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("second acquire while held: %v, want to wait until its deadline", err)
	}
	// Released: the next acquire gets it at once.
	if err := redisUnlock(ctx, cli, key, tok); err != nil {
		t.Fatal(err)
	}
	tok2, err := redisLock(ctx, cli, key, rng)
	if err != nil || tok2 == tok {
		t.Fatalf("acquire after release: %q, %v (first token %q)", tok2, err, tok)
	}
	// A stale holder's release (its token, not the lock's) deletes
	// nothing.
	if err := redisUnlock(ctx, cli, key, tok); !errors.Is(err, errRedisLockLost) {
		t.Errorf("release with a stale token: %v, want errRedisLockLost", err)
	}
	if got := cli.Get(ctx, key).Val(); got != tok2 {
		t.Errorf("after a stale release the lock holds %q, want the holder's %q", got, tok2)
	}
	// A waiter gets it when the holder releases.
	done := make(chan error, 1)
	go func() {
		_, err := redisLock(ctx, cli, key, rand.New(rand.NewPCG(3, 4)))
		done <- err
	}()
	time.Sleep(20 * time.Millisecond)
	if err := redisUnlock(ctx, cli, key, tok2); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a waiter did not get the released lock within 5 s")
	}
}
