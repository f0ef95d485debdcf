package etcdcas_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/occkit/occkit/adapters/etcdcas"
	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/cas/castest"
	"github.com/occkit/occkit/internal/etcdtest"
	"github.com/occkit/occkit/occ"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// BenchmarkCAS compares etcdcas's CompareAndSwap with the same transaction
// written by hand with clientv3 (compare ModRevision, put, read back on
// failure), sequentially on one key each. The two alternate within every
// iteration, so that drift in the machine's load hits both alike; the
// result is their ratio.
//
//	go test -run '^$' -bench 'CAS' -benchtime 5000x -count 3 ./adapters/etcdcas/
func BenchmarkCAS(b *testing.B) {
	c := etcdtest.Start(b, etcdtest.Options{})
	cli := c.Client()
	value := []byte("0123456789abcdef0123456789abcdef")
	rawKey := fmt.Sprintf("raw%d/k", prefixes.Add(1))
	var rawV int64
	castest.BenchCAS(b, "etcdcas", newStore(b, cli, etcdcas.Config{}), value, func(ctx context.Context) error {
		resp, err := cli.Txn(ctx).
			If(clientv3.Compare(clientv3.ModRevision(rawKey), "=", rawV)).
			Then(clientv3.OpPut(rawKey, string(value))).
			Else(clientv3.OpGet(rawKey)).
			Commit()
		if err != nil {
			return err
		}
		if !resp.Succeeded {
			return errors.New("the raw transaction's compare failed")
		}
		rawV = resp.Header.Revision
		return nil
	})
}

// BenchmarkUpdateVsMutex runs the same read-modify-write (increment a
// counter) from 16 workers over 1000 keys with occ.Update on etcdcas, with
// occ.Update and a warm-as-it-goes version cache, and under etcd's
// concurrency.Mutex, and reports the throughputs and their ratios from the
// one run. The counters are checked at the end.
//
//	go test -run '^$' -bench 'UpdateVsMutex' -benchtime 4000x ./adapters/etcdcas/
func BenchmarkUpdateVsMutex(b *testing.B) {
	const workers, keys = 16, 1000
	c := etcdtest.Start(b, etcdtest.Options{})
	cli := c.Client()
	ctx := context.Background()
	ops := int64(b.N)

	run := func(name string, op func(w int, rng *rand.Rand) error) float64 {
		var next atomic.Int64
		var wg sync.WaitGroup
		start := time.Now()
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(uint64(w), 7))
				for next.Add(1) <= ops {
					if err := op(w, rng); err != nil {
						b.Errorf("%s: %v", name, err)
						return
					}
				}
			}()
		}
		wg.Wait()
		return float64(ops) / time.Since(start).Seconds()
	}

	store := newStore(b, cli, etcdcas.Config{})
	counters := cas.NewTyped(store, cas.JSON[int]())
	incr := func(n int, _ bool) (int, error) { return n + 1, nil }
	occRate := run("occ", func(_ int, rng *rand.Rand) error {
		k := "c" + strconv.Itoa(rng.IntN(keys))
		_, _, err := occ.Update(ctx, counters, k, incr, occ.WithMaxAttempts(100))
		return err
	})
	cachedStore := newStore(b, cli, etcdcas.Config{})
	cached := cas.NewTyped(cachedStore, cas.JSON[int]())
	cache := occ.NewCache(cachedStore, 10000)
	cachedRate := run("occ-cached", func(_ int, rng *rand.Rand) error {
		k := "c" + strconv.Itoa(rng.IntN(keys))
		_, _, err := occ.Update(ctx, cached, k, incr, occ.WithMaxAttempts(100), occ.WithCache(cache))
		return err
	})

	sessions := make([]*concurrency.Session, workers)
	for i := range sessions {
		s, err := concurrency.NewSession(cli, concurrency.WithTTL(10))
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		sessions[i] = s
	}
	pfx := fmt.Sprintf("mutex%d/", prefixes.Add(1))
	lockRate := run("mutex", func(w int, rng *rand.Rand) error {
		k := strconv.Itoa(rng.IntN(keys))
		m := concurrency.NewMutex(sessions[w], pfx+"lock/"+k)
		if err := m.Lock(ctx); err != nil {
			return err
		}
		defer m.Unlock(ctx)
		resp, err := cli.Get(ctx, pfx+"data/"+k)
		if err != nil {
			return err
		}
		n := 0
		if len(resp.Kvs) > 0 {
			n, _ = strconv.Atoi(string(resp.Kvs[0].Value))
		}
		_, err = cli.Put(ctx, pfx+"data/"+k, strconv.Itoa(n+1))
		return err
	})

	// Invariants: every increment counted, under both strategies.
	var occTotal, cachedTotal, lockTotal int
	for k := range keys {
		n, _, err := counters.Get(ctx, "c"+strconv.Itoa(k))
		if err == nil {
			occTotal += n
		}
		n, _, err = cached.Get(ctx, "c"+strconv.Itoa(k))
		if err == nil {
			cachedTotal += n
		}
		resp, err := cli.Get(ctx, pfx+"data/"+strconv.Itoa(k))
		if err == nil && len(resp.Kvs) > 0 {
			v, _ := strconv.Atoi(string(resp.Kvs[0].Value))
			lockTotal += v
		}
	}
	if int64(occTotal) != ops || int64(cachedTotal) != ops || int64(lockTotal) != ops {
		b.Fatalf("counters: occ %d, occ-cached %d, mutex %d, want %d each", occTotal, cachedTotal, lockTotal, ops)
	}
	b.ReportMetric(occRate, "occ-ops/s")
	b.ReportMetric(cachedRate, "occ-cached-ops/s")
	b.ReportMetric(lockRate, "mutex-ops/s")
	b.ReportMetric(occRate/lockRate, "occ/mutex")
	b.ReportMetric(cachedRate/lockRate, "occ-cached/mutex")
}

// BenchmarkSerializableReads compares occ.Update increments on a
// three-member cluster with serializable reads (Config.SerializableReads)
// and with the default linearizable reads: 8 workers over 1000 keys, the
// workers' clients spread over the members (worker w talks to member w%3
// only), each worker alternating the two stores call by call, so that
// both run under the same load at the same time (each over its own keys).
// It reports each mode's mean time per update, their ratio, and the
// conflicts per update (a stale read costs one); the counters of both
// are checked at the end.
//
//	go test -run '^$' -bench 'SerializableReads' -benchtime 4000x -count 3 ./adapters/etcdcas/
func BenchmarkSerializableReads(b *testing.B) {
	const workers, keys = 8, 1000
	c := etcdtest.Start(b, etcdtest.Options{Members: 3})
	ctx := context.Background()
	type mode struct {
		name      string
		stores    []*cas.Typed[int] // by member
		check     *etcdcas.Store    // linearizable, for the invariant
		elapsed   atomic.Int64      // ns spent in its updates
		updates   atomic.Int64
		conflicts atomic.Int64
	}
	var modes [2]*mode
	for i, serializable := range []bool{true, false} {
		m := &mode{name: map[bool]string{true: "serializable", false: "linearizable"}[serializable]}
		prefix := fmt.Sprintf("bench%d/", prefixes.Add(1))
		for _, ep := range c.AllEndpoints() {
			s, err := etcdcas.New(c.ClientOf(ep), etcdcas.Config{Prefix: prefix, SerializableReads: serializable})
			if err != nil {
				b.Fatal(err)
			}
			m.stores = append(m.stores, cas.NewTyped(s, cas.JSON[int]()))
		}
		check, err := etcdcas.New(c.Client(), etcdcas.Config{Prefix: prefix})
		if err != nil {
			b.Fatal(err)
		}
		m.check = check
		modes[i] = m
	}
	incr := func(n int, _ bool) (int, error) { return n + 1, nil }
	ops := int64(b.N)
	var next atomic.Int64
	var wg sync.WaitGroup
	b.ResetTimer()
	for w := range workers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 11))
			for j := 0; next.Add(1) <= ops; j++ {
				m := modes[(w+j)%2]
				observe := occ.WithObserver(occ.ObserverFuncs{Attempt: func(_ context.Context, a occ.Attempt) {
					if a.Outcome == occ.OutcomeConflict {
						m.conflicts.Add(1)
					}
				}})
				k := "c" + strconv.Itoa(rng.IntN(keys))
				t0 := time.Now()
				_, _, err := occ.Update(ctx, m.stores[w%len(m.stores)], k, incr, occ.WithMaxAttempts(100), observe)
				m.elapsed.Add(int64(time.Since(t0)))
				if err != nil {
					b.Errorf("%s: %v", m.name, err)
					return
				}
				m.updates.Add(1)
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	for _, m := range modes {
		total := 0
		for k := range keys {
			n, _, err := cas.NewTyped(m.check, cas.JSON[int]()).Get(ctx, "c"+strconv.Itoa(k))
			if err != nil && !errors.Is(err, cas.ErrNotFound) {
				b.Fatal(err)
			}
			total += n
		}
		if int64(total) != m.updates.Load() {
			b.Fatalf("%s: counters sum to %d after %d updates", m.name, total, m.updates.Load())
		}
	}
	mean := func(m *mode) float64 { return float64(m.elapsed.Load()) / float64(max(m.updates.Load(), 1)) }
	for _, m := range modes {
		b.ReportMetric(mean(m), m.name+"-ns/update")
		b.ReportMetric(float64(m.conflicts.Load())/float64(max(m.updates.Load(), 1)), m.name+"-conflicts/update")
	}
	b.ReportMetric(mean(modes[1])/mean(modes[0]), "linearizable/serializable")
}
