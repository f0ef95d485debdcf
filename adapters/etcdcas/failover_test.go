package etcdcas_test

import (
	"context"
	"encoding/hex"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/occkit/occkit/adapters/etcdcas"
	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/internal/etcdtest"
	"github.com/occkit/occkit/occ"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestLeaderLoss runs concurrent occ.Update increments on a 3-member
// cluster while the leader is hard-stopped. Afterwards the counter must
// equal the confirmed successes plus the ambiguous writes that really
// applied (found by write id in the key's history): nothing lost, nothing
// applied twice, every ambiguous outcome either resolved by the store or
// reported to the caller.
func TestLeaderLoss(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.Options{Members: 3})
	cli := c.Client()
	store := newStore(t, cli, etcdcas.Config{ResolveTimeout: 5 * time.Second})
	counters := cas.NewTyped(store, cas.JSON[int]())
	ctx := etcdtest.Ctx(t, 60*time.Second)
	if _, err := counters.CompareAndSwap(ctx, "n", 0, 0); err != nil {
		t.Fatal(err)
	}

	var (
		ok, other atomic.Int64
		mu        sync.Mutex
		ambiguous []string // write ids
		afterLoss atomic.Int64
		lost      atomic.Bool
	)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				cctx, cancel := context.WithTimeout(ctx, 4*time.Second)
				_, _, err := occ.Update(cctx, counters, "n", func(n int, _ bool) (int, error) { return n + 1, nil },
					occ.WithMaxAttempts(50), occ.WithRetryable(etcdcas.Retryable))
				cancel()
				var amb *cas.AmbiguousError
				switch {
				case err == nil:
					ok.Add(1)
					if lost.Load() {
						afterLoss.Add(1)
					}
				case errors.As(err, &amb):
					if amb.WriteID == "" {
						t.Errorf("ambiguous write without a write id: %v", err)
					}
					mu.Lock()
					ambiguous = append(ambiguous, amb.WriteID)
					mu.Unlock()
				default:
					// Gave up (the call's deadline passed while the cluster
					// recovered): the store resolved the outcome, so the
					// write did not apply.
					other.Add(1)
					t.Logf("update failed: %v", err)
				}
			}
		}()
	}
	time.Sleep(700 * time.Millisecond)
	leader := c.WaitLeader(10 * time.Second)
	before := ok.Load()
	c.HardStop(leader)
	lost.Store(true)
	t.Logf("hard-stopped leader m%d after %d successful increments", leader, before)
	// Writes in flight at the crash can hang until the server gives up on
	// them (a few seconds); keep going until the cluster has clearly
	// recovered, or 20 s.
	for deadline := time.Now().Add(20 * time.Second); afterLoss.Load() < 50 && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
	}
	close(stop)
	wg.Wait()

	t.Logf("successes %d (%d after the leader loss), ambiguous %d, failed and not applied %d",
		ok.Load(), afterLoss.Load(), len(ambiguous), other.Load())
	checkCounter(t, ctx, cli, store, "n", ok.Load(), ambiguous)
	if afterLoss.Load() == 0 {
		t.Fatalf("no increment succeeded after the leader was lost")
	}
}

// checkCounter checks the counter key of s after a load of increments,
// ok of which succeeded and those with the write ids ambiguous came back
// ambiguous: nothing lost, nothing applied twice. Each ambiguous increment
// is in the key's history at most once, the counter equals ok plus those
// that are, and the history has one write per increment (and the
// create). It returns the revisions of each write id in the history and
// how many ambiguous increments applied.
func checkCounter(t *testing.T, ctx context.Context, cli *clientv3.Client, s *etcdcas.Store, key string, ok int64, ambiguous []string) (ids map[string][]int64, applied int) {
	t.Helper()
	final, _, err := cas.NewTyped(s, cas.JSON[int]()).Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	ids, puts := writeHistory(t, ctx, cli, s, key)
	for _, id := range ambiguous {
		switch len(ids[id]) {
		case 0:
		case 1:
			applied++
		default:
			t.Errorf("ambiguous write %s applied %d times", id, len(ids[id]))
		}
	}
	t.Logf("counter %d: %d increments succeeded, %d of the %d ambiguous ones applied", final, ok, applied, len(ambiguous))
	if int64(final) != ok+int64(applied) {
		t.Fatalf("counter %d != successes %d + applied ambiguous %d: an increment was lost or doubled", final, ok, applied)
	}
	if puts != final+1 {
		t.Fatalf("%d writes in the key's history for a counter at %d (+1 create)", puts, final)
	}
	return ids, applied
}

// writeHistory returns, for the data key of key, the revisions at which
// each write id appears in its history (once, for a write applied once),
// and the number of writes.
func writeHistory(t *testing.T, ctx context.Context, cli *clientv3.Client, s *etcdcas.Store, key string) (map[string][]int64, int) {
	t.Helper()
	dk := s.DataKey(key)
	cur, err := cli.Get(ctx, dk)
	if err != nil {
		t.Fatal(err)
	}
	upto := cur.Header.Revision
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ids := map[string][]int64{}
	puts := 0
	for wr := range cli.Watch(wctx, dk, clientv3.WithRev(1)) {
		if err := wr.Err(); err != nil {
			t.Fatal(err)
		}
		for _, ev := range wr.Events {
			if ev.Type == clientv3.EventTypePut {
				puts++
				id := hex.EncodeToString(ev.Kv.Value[1:17])
				ids[id] = append(ids[id], ev.Kv.ModRevision)
			}
			if ev.Kv.ModRevision >= cur.Kvs[0].ModRevision {
				return ids, puts
			}
		}
		if wr.Header.Revision >= upto && len(wr.Events) == 0 {
			break
		}
	}
	t.Fatal("history ended before the current revision")
	return nil, 0
}
