package etcdcas_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/occkit/occkit/adapters/etcdcas"
	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/cas/castest"
	"github.com/occkit/occkit/internal/etcdtest"
	"github.com/occkit/occkit/occ"
)

// Fault tests of serializable reads (Config.SerializableReads) on a
// three-member cluster: workers on every member increment one counter
// with occ.Update, each member's stores talking to that member only, so
// that every read is served by its own member, stale or not, while a fault
// hits the cluster. Each test then checks that nothing was lost and
// nothing applied twice (the counter equals the increments that succeeded
// plus the ambiguous ones found applied, once, in the key's history), and
// that the recorded history of every call is linearizable, with each
// serializable read a state the counter really had (castest.CheckHistory).

// TestPartitionedMember isolates one member from the other two (its raft
// messages dropped both ways; its client port still serving) for two
// seconds and more under load, then heals it. The isolated member keeps answering
// its clients' reads from its old state; their writes fail, or come back
// ambiguous, until it is back. Both a follower and the leader.
func TestPartitionedMember(t *testing.T) {
	for _, who := range []string{"Follower", "Leader"} {
		t.Run(who, func(t *testing.T) {
			c := etcdtest.Start(t, etcdtest.Options{Members: 3})
			l := startMemberLoad(t, c, 3)
			time.Sleep(500 * time.Millisecond)
			lead := c.WaitLeader(10 * time.Second)
			cut := (lead + 1) % 3
			if who == "Leader" {
				cut = lead
			}
			l.fault(func() { c.Isolate(cut) })
			t.Logf("isolated m%d (leader m%d) after %d increments", cut, lead, l.successes())
			// The majority goes on; the isolated member still answers
			// serializable reads, with a state older than theirs.
			others := []int{(cut + 1) % 3, (cut + 2) % 3}
			if !l.waitAfter(20, 15*time.Second, others...) {
				t.Fatalf("the two members without m%d made no progress: %d increments after the cut", cut, l.afterOn(others...))
			}
			rctx, cancel := context.WithTimeout(l.ctx, 2*time.Second)
			old, err := l.stores[cut].Get(rctx, "n")
			cancel()
			if err != nil {
				t.Fatalf("the isolated member's serializable read: %v", err)
			}
			majority, err := etcdcas.New(c.ClientOf(c.AllEndpoints()[others[0]]), etcdcas.Config{Prefix: l.prefix})
			if err != nil {
				t.Fatal(err)
			}
			cur, err := majority.Get(l.ctx, "n") // linearizable
			if err != nil {
				t.Fatal(err)
			}
			if old.Version >= cur.Version {
				t.Fatalf("the isolated member read v%d, the majority v%d: want an older state", old.Version, cur.Version)
			}
			t.Logf("the isolated member reads %s at v%d, the majority %s at v%d", old.Value, old.Version, cur.Value, cur.Version)
			time.Sleep(2 * time.Second)
			c.Heal(cut)
			t.Logf("healed m%d: %d increments after the cut, %d on m%d", cut, l.afterOn(others...), l.afterOn(cut), cut)
			// Back: the member catches up and its clients' updates succeed.
			l.resetAfter()
			if !l.waitAfter(10, 15*time.Second, cut) {
				t.Fatalf("no increment through m%d succeeded after the heal", cut)
			}
			l.finish()
		})
	}
}

// TestLeaderLossSerializableReads hard-stops the leader under load; its
// clients are cut off, the other members elect a leader and serve on.
func TestLeaderLossSerializableReads(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.Options{Members: 3})
	l := startMemberLoad(t, c, 3)
	time.Sleep(500 * time.Millisecond)
	lead := c.WaitLeader(10 * time.Second)
	l.fault(func() { c.HardStop(lead) })
	t.Logf("hard-stopped leader m%d after %d increments", lead, l.successes())
	others := []int{(lead + 1) % 3, (lead + 2) % 3}
	if !l.waitAfter(50, 20*time.Second, others...) {
		t.Fatalf("no recovery: %d increments after the leader loss", l.afterOn(others...))
	}
	l.finish()
}

// memberLoad is a load of occ.Update increments of the counter "n": a
// few workers per member, each member's through a store whose client talks
// to that member only, with serializable reads. Every call the workers
// make is recorded in a castest.History.
type memberLoad struct {
	t      *testing.T
	c      *etcdtest.Cluster
	ctx    context.Context
	prefix string
	stores []*etcdcas.Store // by member
	hist   *castest.History

	ok, after [3]atomic.Int64 // increments that succeeded by member, in all and since the fault
	failed    atomic.Int64    // calls that failed without applying anything
	faulted   atomic.Bool

	mu        sync.Mutex
	ambiguous []string // write ids of the increments that came back ambiguous

	stop chan struct{}
	wg   sync.WaitGroup
}

func startMemberLoad(t *testing.T, c *etcdtest.Cluster, perMember int) *memberLoad {
	t.Helper()
	l := &memberLoad{
		t: t, c: c, ctx: etcdtest.Ctx(t, 2*time.Minute),
		prefix: fmt.Sprintf("test%d/", prefixes.Add(1)),
		hist:   castest.NewHistory(),
		stop:   make(chan struct{}),
	}
	for _, ep := range c.AllEndpoints() {
		s, err := etcdcas.New(c.ClientOf(ep), etcdcas.Config{Prefix: l.prefix, SerializableReads: true, ResolveTimeout: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		l.stores = append(l.stores, s)
	}
	counters := make([]*cas.Typed[int], len(l.stores))
	for m, s := range l.stores {
		counters[m] = cas.NewTyped(l.hist.Store(s), cas.JSON[int]())
	}
	if _, err := counters[0].CompareAndSwap(l.ctx, "n", 0, 0); err != nil {
		t.Fatal(err)
	}
	for m := range l.stores {
		for range perMember {
			l.wg.Go(func() { l.work(m, counters[m]) })
		}
	}
	t.Cleanup(l.halt)
	return l
}

// work increments until the load stops. A call has 2 s (and the store 1 s
// more to resolve a write whose answer was lost); one that fails (its
// member unreachable, say) is followed by a short pause.
func (l *memberLoad) work(m int, counter *cas.Typed[int]) {
	for {
		select {
		case <-l.stop:
			return
		default:
		}
		ctx, cancel := context.WithTimeout(l.ctx, 2*time.Second)
		_, _, err := occ.Update(ctx, counter, "n", func(n int, _ bool) (int, error) { return n + 1, nil },
			occ.WithMaxAttempts(50), occ.WithRetryable(etcdcas.Retryable))
		cancel()
		var amb *cas.AmbiguousError
		switch {
		case err == nil:
			l.ok[m].Add(1)
			if l.faulted.Load() {
				l.after[m].Add(1)
			}
			continue
		case errors.As(err, &amb):
			if amb.WriteID == "" {
				l.t.Errorf("ambiguous write without a write id: %v", err)
			}
			l.mu.Lock()
			l.ambiguous = append(l.ambiguous, amb.WriteID)
			l.mu.Unlock()
		default:
			l.failed.Add(1)
		}
		select {
		case <-l.stop:
			return
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// fault runs f and counts the increments after it apart.
func (l *memberLoad) fault(f func()) {
	f()
	l.faulted.Store(true)
}

// resetAfter starts the count of increments after the fault again.
func (l *memberLoad) resetAfter() {
	for m := range l.after {
		l.after[m].Store(0)
	}
}

func (l *memberLoad) successes() int64 {
	var n int64
	for m := range l.ok {
		n += l.ok[m].Load()
	}
	return n
}

// afterOn returns the increments that succeeded through members since
// the fault.
func (l *memberLoad) afterOn(members ...int) int64 {
	var n int64
	for _, m := range members {
		n += l.after[m].Load()
	}
	return n
}

// waitAfter waits until n increments succeeded through members since the
// fault, for up to timeout, and reports whether they did.
func (l *memberLoad) waitAfter(n int64, timeout time.Duration, members ...int) bool {
	for deadline := time.Now().Add(timeout); l.afterOn(members...) < n; {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
	return true
}

// halt stops the workers and waits for them.
func (l *memberLoad) halt() {
	select {
	case <-l.stop:
	default:
		close(l.stop)
	}
	l.wg.Wait()
}

// finish stops the load and checks it: the counter, read linearizably
// from the members still running, equals the increments that succeeded
// plus the ambiguous ones the key's history shows applied (each at most
// once); the history has one write per increment; and the recorded calls
// are linearizable, serializable reads checked apart.
func (l *memberLoad) finish() {
	t := l.t
	t.Helper()
	l.halt()
	if t.Failed() {
		return
	}
	cli := l.c.ClientOf(l.c.Endpoints()...)
	lin, err := etcdcas.New(cli, etcdcas.Config{Prefix: l.prefix})
	if err != nil {
		t.Fatal(err)
	}
	ok := l.successes()
	t.Logf("increments: %d succeeded (by member %d, %d, %d), %d ambiguous, %d failed and not applied",
		ok, l.ok[0].Load(), l.ok[1].Load(), l.ok[2].Load(), len(l.ambiguous), l.failed.Load())
	ids, applied := checkCounter(t, l.ctx, cli, lin, "n", ok, l.ambiguous)
	rep := castest.CheckHistory(t, l.hist.Operations(), castest.CheckOptions{
		StaleReads: true,
		Resolve: func(in castest.Input, err error) (cas.Version, bool, bool) {
			var amb *cas.AmbiguousError
			if !errors.As(err, &amb) {
				return 0, false, false
			}
			switch revs := ids[amb.WriteID]; len(revs) {
			case 0:
				return 0, false, true
			case 1:
				return cas.Version(revs[0]), true, true
			}
			return 0, false, false
		},
	})
	t.Logf("history: %d writes, %d reads (%d seen stale), %d ambiguous (%d applied), %d failed calls left out",
		rep.Writes, rep.Reads, rep.Stale, rep.Ambiguous, rep.AmbiguousApplied, rep.Failed)
	if rep.Ambiguous != len(l.ambiguous) || rep.AmbiguousApplied != applied {
		t.Errorf("the history has %d ambiguous writes (%d applied), the callers got %d (%d applied)",
			rep.Ambiguous, rep.AmbiguousApplied, len(l.ambiguous), applied)
	}
}
