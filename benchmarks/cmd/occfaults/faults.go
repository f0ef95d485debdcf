package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/occkit/occkit/internal/ctxwait"
)

// The faults.
const (
	faultNone       = "none"        // no fault (the memory baseline)
	faultDrop       = "drop"        // every live connection reset every period (dropEvery by default)
	faultLatency    = "latency"     // addedLatency on every forwarded chunk
	faultCut        = "cut"         // answers cut after a few bytes, every cutEvery
	faultRestart    = "restart"     // the server stopped, restartDown down, started again
	faultLeaderLoss = "leader-loss" // the leader of a 3-member etcd cluster crashes

	// The clusters' faults (clusters.go).
	faultPartition  = "partition"      // etcd3: the leader cut off from the other two members, then healed
	faultFailover   = "failover"       // redis-cluster, WaitReplicas 1: a master killed after its replica was made to lag
	faultAsync      = "failover-async" // redis-cluster, WaitReplicas 0: the same failover, asynchronous replication
	faultReplayStop = "replay-pause"   // postgres-replica: the replica's replay paused, then resumed
)

const (
	dropEvery    = 200 * time.Millisecond
	addedLatency = 2 * time.Millisecond
	// cutEvery is how often a cut is armed, for cutArmed: every connection
	// that receives at least n more bytes from the server meanwhile (n
	// between 1 and cutMaxBytes, drawn each time) is closed after the n-th
	// byte, mid-answer.
	cutEvery    = 200 * time.Millisecond
	cutArmed    = 50 * time.Millisecond
	cutMaxBytes = 256
	restartDown = time.Second
)

// heldFor is how long a partition or a replay pause lasts in a run of d:
// long enough for an election (etcd3) or a visible lag, short enough to
// leave the run time to recover.
func heldFor(d time.Duration) time.Duration { return max(d/3, 2*time.Second) }

// networkFaults go through the proxy.
var networkFaults = []string{faultDrop, faultLatency, faultCut}

// errNoFault is the error of a fault the target cannot inject.
var errNoFault = errors.New("occfaults: the target cannot inject this fault")

// injection is what inject did.
type injection struct {
	events int // connections dropped or cut, restarts, leaders stopped
	// over is when a one-shot fault's disruption ended (the server serves
	// again, a new leader is elected); zero for the others.
	over time.Time
}

// inject runs fault on tg for d from start (a one-shot fault strikes at a
// quarter of d, and the run lasts until at least recovery after it ends:
// after a partition is healed, a failover is over or the replay resumed).
// period is how often the drop fault strikes (dropEvery when 0).
func inject(ctx context.Context, fault string, tg *target, start time.Time, d, recovery, period time.Duration) (injection, error) {
	if period <= 0 {
		period = dropEvery
	}
	var inj injection
	end := start.Add(d)
	wait := func(until time.Time) bool { return ctxwait.Sleep(ctx, time.Until(until)) == nil }
	if (fault == faultDrop || fault == faultLatency || fault == faultCut) && tg.proxy == nil {
		return inj, fmt.Errorf("%w: %s needs a proxy", errNoFault, fault)
	}
	switch fault {
	case faultNone:
		wait(end)
	case faultDrop:
		for next := start.Add(period); next.Before(end) && wait(next); next = next.Add(period) {
			inj.events += tg.proxy.DropAll()
		}
		wait(end)
	case faultLatency:
		tg.proxy.SetChunkDelay(addedLatency)
		wait(end)
		tg.proxy.SetChunkDelay(0)
	case faultCut:
		before := tg.proxy.Cuts()
		for next := start.Add(cutEvery); next.Before(end) && wait(next); next = next.Add(cutEvery) {
			tg.proxy.CutAfter(1 + rand.Int64N(cutMaxBytes))
			wait(next.Add(cutArmed))
			tg.proxy.CutAfter(0)
		}
		wait(end)
		inj.events = tg.proxy.Cuts() - before
	case faultRestart, faultLeaderLoss, faultPartition, faultFailover, faultAsync, faultReplayStop:
		if tg.disrupt == nil {
			return inj, fmt.Errorf("%w: %s", errNoFault, fault)
		}
		if !wait(start.Add(d / 4)) {
			return inj, ctx.Err()
		}
		if err := tg.disrupt(ctx, heldFor(d)); err != nil {
			return inj, fmt.Errorf("%s: %w", fault, err)
		}
		inj.events, inj.over = 1, time.Now()
		wait(end)
		wait(inj.over.Add(recovery))
	default:
		return inj, fmt.Errorf("%w: unknown fault %q", errNoFault, fault)
	}
	return inj, ctx.Err()
}
