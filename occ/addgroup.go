package occ

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/occkit/occkit/cas"
)

// A store that applies deltas of several keys in one round trip
// (cas.ManyAdder) gets them together: while maxGroupsInFlight statements
// of a store's deltas are on their way, the deltas of this process that
// come meanwhile wait, and when one statement returns, the first waiting
// delta sends the next, with every waiting delta of another key. On a
// server that spends more on a statement than on a row this applies more
// deltas per second; a delta that finds a statement free goes at once,
// alone, so that a delta nobody else is sending pays nothing.

// maxGroupsInFlight is how many statements of one store's deltas a
// process keeps on their way at once: two, so that the server works on
// one while the reply of the other travels.
const maxGroupsInFlight = 2

// maxGroup is the most deltas one statement carries.
const maxGroup = 8

// deltaGroups are the stores' queues: cas.ManyAdder -> *deltaGroup.
var deltaGroups sync.Map

// deltaGroup is one store's queue.
type deltaGroup struct {
	mu       sync.Mutex
	inFlight int
	waiting  []*groupCall
}

// groupCall is one delta waiting for a statement, and then its outcome.
type groupCall struct {
	ctx  context.Context
	d    cas.Delta
	wake chan []*groupCall // the group to send (the call first), or nil: done
	res  cas.DeltaResult
}

// addGrouped sends one delta through its store's queue.
func addGrouped(ctx context.Context, m cas.ManyAdder, d cas.Delta) (int64, cas.Version, error) {
	gi, ok := deltaGroups.Load(m)
	if !ok {
		gi, _ = deltaGroups.LoadOrStore(m, &deltaGroup{})
	}
	g := gi.(*deltaGroup)
	me := &groupCall{ctx: ctx, d: d}
	g.mu.Lock()
	if g.inFlight < maxGroupsInFlight {
		g.inFlight++
		g.mu.Unlock()
		g.send(m, []*groupCall{me})
		return me.res.Value, me.res.Version, me.res.Err
	}
	me.wake = make(chan []*groupCall, 1)
	g.waiting = append(g.waiting, me)
	g.mu.Unlock()
	select {
	case group := <-me.wake:
		if group != nil {
			g.send(m, group)
		}
	case <-ctx.Done():
		g.mu.Lock()
		for i, w := range g.waiting {
			if w == me {
				g.waiting = append(g.waiting[:i], g.waiting[i+1:]...)
				g.mu.Unlock()
				return 0, 0, ctx.Err()
			}
		}
		g.mu.Unlock()
		// Taken into a group already (its outcome is this call's), or
		// handed the next one to send.
		if group := <-me.wake; group != nil {
			g.send(m, group)
		}
	}
	return me.res.Value, me.res.Version, me.res.Err
}

// send sends group (its sender's call first), wakes its other calls, and
// hands the statement on: the first waiting call sends the next group,
// made of it and the waiting calls of other keys (at most maxGroup), or,
// with nobody waiting, the store has one statement fewer in flight.
func (g *deltaGroup) send(m cas.ManyAdder, group []*groupCall) {
	if len(group) == 1 {
		c := group[0]
		c.res.Value, c.res.Version, c.res.Err = m.Add(c.ctx, c.d.Key, c.d.N, c.d.Bounds)
	} else {
		ctx, stop := groupContext(group)
		ds := make([]cas.Delta, len(group))
		for i, c := range group {
			ds[i] = c.d
		}
		for i, r := range m.AddMany(ctx, ds) {
			group[i].res = r
		}
		stop()
	}
	for _, c := range group[1:] {
		c.wake <- nil
	}
	g.mu.Lock()
	if len(g.waiting) == 0 {
		g.inFlight--
		g.mu.Unlock()
		return
	}
	next := []*groupCall{g.waiting[0]}
	keys := map[string]bool{next[0].d.Key: true}
	left := g.waiting[:0]
	for _, c := range g.waiting[1:] {
		if len(next) < maxGroup && !keys[c.d.Key] {
			keys[c.d.Key] = true
			next = append(next, c)
			continue
		}
		left = append(left, c)
	}
	g.waiting = left
	g.mu.Unlock()
	next[0].wake <- next
}

// groupContext returns the context of a statement of group's deltas,
// which ends when every caller's has, and the function that releases it.
func groupContext(group []*groupCall) (context.Context, func()) {
	ctx, cancel := context.WithCancel(context.WithoutCancel(group[0].ctx))
	left := atomic.Int64{}
	left.Store(int64(len(group)))
	stops := make([]func() bool, len(group))
	for i, c := range group {
		stops[i] = context.AfterFunc(c.ctx, func() {
			if left.Add(-1) == 0 {
				cancel()
			}
		})
	}
	return ctx, func() {
		for _, stop := range stops {
			stop()
		}
		cancel()
	}
}
