package rediscas_test

import (
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/occkit/occkit/adapters/rediscas"
	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/cas/castest"
	"github.com/occkit/occkit/internal/redistest"
	"github.com/occkit/occkit/occ"
	"github.com/redis/go-redis/v9"
)

// The tests in this file run on the Redis Cluster of
// OCCKIT_REDIS_CLUSTER_URL (scripts/servers/redis-cluster.sh: 3 masters,
// 3 replicas).

// TestClusterConformance runs cas/castest on a Redis Cluster twice: with a
// prefix that has a hash tag (every key of the store in one slot: the
// whole suite, commits included), and with a prefix without one (keys
// spread over every slot and master, a version counter per slot). Spread,
// the keys castest commits together ("a", "b") are in different slots, so
// the store is shown to the suite without its commit capabilities, which
// it skips visibly; TestClusterCommit covers commits there.
func TestClusterConformance(t *testing.T) {
	cli := redistest.ClusterClient(t, "")
	probe, err := rediscas.New(cli, rediscas.Config{Prefix: "{probe}:"})
	if err != nil {
		t.Fatal(err)
	}
	for _, mode := range []struct {
		name   string
		tag    string
		commit bool
	}{{"OneSlot", "{t}:", true}, {"Spread", "", false}} {
		t.Run(mode.name, func(t *testing.T) {
			prefixes := map[cas.Store]string{}
			open := func(t *testing.T, cli redis.UniversalClient, prefix string, cfg rediscas.Config) cas.Store {
				cfg.Prefix = prefix
				s, err := rediscas.New(cli, cfg)
				if err != nil {
					t.Fatal(err)
				}
				var out cas.Store = s
				if !mode.commit {
					out = noCommit{Store: s}
				}
				prefixes[out] = prefix
				return out
			}
			castest.Run(t, castest.Harness{
				NewStore: func(t *testing.T) cas.Store {
					return open(t, cli, redistest.ClusterPrefix(t, cli)+mode.tag, rediscas.Config{})
				},
				Reopen: func(t *testing.T, s cas.Store) cas.Store {
					// Another process: a client of its own.
					return open(t, redistest.ClusterClient(t, ""), prefixes[s], rediscas.Config{})
				},
				ShortHold: func(t *testing.T, s cas.Store) (cas.Store, time.Duration) {
					const bound = 200 * time.Millisecond
					return open(t, cli, prefixes[s], rediscas.Config{ExclusiveTTL: bound}), bound
				},
				ReturnsCurrent: true,
				Limits:         probe.Limits(),
			})
		})
	}
}

// noCommit shows a store without cas.Committer and cas.ExclusiveCommitter:
// the fields named Commit and CommitExclusive hide the embedded store's
// methods of those names.
type noCommit struct {
	*rediscas.Store
	Commit, CommitExclusive struct{}
}

// TestClusterHashSlot checks the store's slot arithmetic against the
// cluster's own (CLUSTER KEYSLOT): a commit is refused by the store exactly
// when Redis would answer CROSSSLOT.
func TestClusterHashSlot(t *testing.T) {
	cli := redistest.ClusterClient(t, "")
	ctx := redistest.Ctx(t, 30*time.Second)
	keys := []string{"", "a", "user:1", "{user}:1", "{user}:2", "x{}y", "{}{a}", "a{b", "}{a}", "{a}}", "occkit:d:{order:7}:line:1"}
	for i := range 200 {
		keys = append(keys, "occkit:d:k"+strconv.Itoa(i))
	}
	for _, k := range keys {
		want, err := cli.ClusterKeySlot(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		if got := rediscas.HashSlot(k); got != int(want) {
			t.Errorf("HashSlot(%q) = %d, CLUSTER KEYSLOT says %d", k, got, want)
		}
	}
}

// TestClusterCommit commits on a store whose keys spread over the slots:
// keys with a common hash tag commit atomically, keys of different slots
// are refused with a *rediscas.CrossSlotError before anything is sent
// (no key is written, no server error), and occ.Txn transfers within a
// tag group conserve the total under contention.
func TestClusterCommit(t *testing.T) {
	cli := redistest.ClusterClient(t, "")
	ctx := redistest.Ctx(t, time.Minute)
	s, err := rediscas.New(cli, rediscas.Config{Prefix: redistest.ClusterPrefix(t, cli)})
	if err != nil {
		t.Fatal(err)
	}
	if rediscas.HashSlot(s.DataKey("user:1")) == rediscas.HashSlot(s.DataKey("user:2")) {
		t.Fatal("the test needs user:1 and user:2 in different slots")
	}

	vs, err := s.Commit(ctx, []cas.Op{cas.Put("{user}:1", 0, []byte("a")), cas.Put("{user}:2", 0, []byte("b"))})
	if err != nil || vs[0] == 0 || vs[0] != vs[1] {
		t.Fatalf("commit in one slot: %v, %v", vs, err)
	}

	for name, commit := range map[string]func() error{
		"Commit": func() error {
			_, err := s.Commit(ctx, []cas.Op{cas.Put("user:1", 0, []byte("a")), cas.Put("user:2", 0, []byte("b"))})
			return err
		},
		"CommitExclusive": func() error {
			_, err := s.CommitExclusive(ctx, []string{"user:1", "user:2"}, func([]cas.Item) ([]cas.Op, error) {
				t.Error("fn called for keys of different slots")
				return nil, nil
			})
			return err
		},
		"Txn": func() error {
			return occ.Txn(ctx, s, func(tx *occ.Tx) error {
				tx.Put("user:1", []byte("a"))
				tx.Put("user:2", []byte("b"))
				return nil
			})
		},
	} {
		err := commit()
		var cse *rediscas.CrossSlotError
		if !errors.Is(err, rediscas.ErrCrossSlot) || !errors.As(err, &cse) {
			t.Errorf("%s over two slots: %v, want a *rediscas.CrossSlotError", name, err)
			continue
		}
		if cse.Slot == cse.OtherSlot || cse.Slot != rediscas.HashSlot(s.DataKey(cse.Key)) {
			t.Errorf("%s: %+v does not name two different slots", name, cse)
		}
		var rerr redis.Error
		if errors.As(err, &rerr) {
			t.Errorf("%s: the refusal is a server error: %v", name, err)
		}
	}
	for _, k := range []string{"user:1", "user:2"} {
		if n, err := cli.Exists(ctx, s.DataKey(k)).Result(); err != nil || n != 0 {
			t.Errorf("%s exists after refused commits (%d, %v)", k, n, err)
		}
	}

	// Transfers between accounts of one tag group, on several groups at
	// once (several slots, several masters).
	const groups, accounts, start = 6, 4, 100
	for g := range groups {
		for a := range accounts {
			if _, err := s.CompareAndSwap(ctx, account(g, a), 0, []byte(strconv.Itoa(start))); err != nil {
				t.Fatal(err)
			}
		}
	}
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 40 {
				g, from, to := (w+i)%groups, i%accounts, (i+1+w)%accounts
				if from == to {
					continue
				}
				err := occ.Txn(ctx, s, func(tx *occ.Tx) error {
					a, err := balance(tx, account(g, from))
					if err != nil {
						return err
					}
					b, err := balance(tx, account(g, to))
					if err != nil {
						return err
					}
					tx.Put(account(g, from), []byte(strconv.Itoa(a-1)))
					tx.Put(account(g, to), []byte(strconv.Itoa(b+1)))
					return nil
				})
				if err != nil {
					t.Errorf("transfer: %v", err)
					return
				}
			}
		}()
	}
	wg.Wait()
	for g := range groups {
		total := 0
		for a := range accounts {
			it, err := s.Get(ctx, account(g, a))
			if err != nil {
				t.Fatal(err)
			}
			n, _ := strconv.Atoi(string(it.Value))
			total += n
		}
		if total != accounts*start {
			t.Errorf("group %d holds %d, want %d", g, total, accounts*start)
		}
	}
}

func account(g, a int) string { return fmt.Sprintf("{acct%d}:%d", g, a) }

func balance(tx *occ.Tx, key string) (int, error) {
	raw, ok, err := tx.Get(key)
	if err != nil || !ok {
		return 0, fmt.Errorf("account %s: %v (present %v)", key, err, ok)
	}
	return strconv.Atoi(string(raw))
}

// TestClusterSpreadCounters increments keys spread over every master
// through two stores (two processes), deleting and re-creating some: every
// increment is counted, and each key's versions strictly increase over its
// whole life although they come from the counters of different slots.
func TestClusterSpreadCounters(t *testing.T) {
	cli := redistest.ClusterClient(t, "")
	ctx := redistest.Ctx(t, time.Minute)
	prefix := redistest.ClusterPrefix(t, cli)
	var stores [2]*rediscas.Store
	for i := range stores {
		s, err := rediscas.New(redistest.ClusterClient(t, ""), rediscas.Config{Prefix: prefix})
		if err != nil {
			t.Fatal(err)
		}
		stores[i] = s
	}
	const keys, workers, ops = 24, 8, 30
	masters := map[string]bool{}
	for k := range keys {
		m, err := cli.MasterForKey(ctx, stores[0].DataKey("k"+strconv.Itoa(k)))
		if err != nil {
			t.Fatal(err)
		}
		masters[m.Options().Addr] = true
	}
	if len(masters) < 3 {
		t.Fatalf("the keys reach %d masters, want 3", len(masters))
	}
	var done atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			typed := cas.NewTyped(stores[w%2], cas.JSON[int]())
			for i := range ops {
				key := "k" + strconv.Itoa((w*7+i)%keys)
				_, _, err := occ.Update(ctx, typed, key, func(n int, _ bool) (int, error) { return n + 1, nil })
				if err != nil {
					t.Errorf("increment %s: %v", key, err)
					return
				}
				done.Add(1)
			}
		}()
	}
	wg.Wait()
	total := 0
	typed := cas.NewTyped(stores[0], cas.JSON[int]())
	for k := range keys {
		n, v, err := typed.Get(ctx, "k"+strconv.Itoa(k))
		if err != nil {
			t.Fatal(err)
		}
		total += n
		// Delete and re-create: the new version is above the old one.
		if err := stores[1].CompareAndDelete(ctx, "k"+strconv.Itoa(k), v); err != nil {
			t.Fatal(err)
		}
		v2, err := stores[0].CompareAndSwap(ctx, "k"+strconv.Itoa(k), 0, []byte("0"))
		if err != nil {
			t.Fatal(err)
		}
		if v2 <= v {
			t.Errorf("k%d re-created at version %d, not above %d", k, v2, v)
		}
	}
	if int64(total) != done.Load() {
		t.Errorf("counted %d increments, %d succeeded", total, done.Load())
	}
}

// TestClusterNewConfig checks the prefixes a cluster store accepts.
func TestClusterNewConfig(t *testing.T) {
	cli := redistest.ClusterClient(t, "")
	for _, p := range []string{"occkit:", "{orders}:", "a{b}c:"} {
		if _, err := rediscas.New(cli, rediscas.Config{Prefix: p}); err != nil {
			t.Errorf("prefix %q: %v", p, err)
		}
	}
	for _, p := range []string{"a{b:", "a}b:", "{}:"} {
		if _, err := rediscas.New(cli, rediscas.Config{Prefix: p}); err == nil {
			t.Errorf("prefix %q accepted: a brace without a hash tag", p)
		}
	}
}

// TestClusterWait checks the durability setting: with WaitReplicas 1 (each
// master has one replica) writes succeed; asking for 2 replicas, which
// the cluster does not have, makes every applied write ambiguous with a
// *rediscas.ReplicationError, while a refused write stays a conflict.
func TestClusterWait(t *testing.T) {
	cli := redistest.ClusterClient(t, "")
	ctx := redistest.Ctx(t, time.Minute)
	prefix := redistest.ClusterPrefix(t, cli)
	one, err := rediscas.New(cli, rediscas.Config{Prefix: prefix, WaitReplicas: 1})
	if err != nil {
		t.Fatal(err)
	}
	v, err := one.CompareAndSwap(ctx, "k", 0, []byte("1"))
	if err != nil {
		t.Fatalf("write waiting for 1 replica: %v", err)
	}
	if _, _, err := one.Add(ctx, "n", 5, cas.Bounds{}); err != nil {
		t.Fatalf("delta waiting for 1 replica: %v", err)
	}
	if _, err := one.Commit(ctx, []cas.Op{cas.Put("{g}:a", 0, []byte("a")), cas.Put("{g}:b", 0, []byte("b"))}); err != nil {
		t.Fatalf("commit waiting for 1 replica: %v", err)
	}

	two, err := rediscas.New(cli, rediscas.Config{Prefix: prefix, WaitReplicas: 2, WaitTimeout: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	v2, err := two.CompareAndSwap(ctx, "k", v, []byte("2"))
	var re *rediscas.ReplicationError
	if !errors.Is(err, cas.ErrAmbiguous) || !errors.As(err, &re) || re.Want != 2 || re.Acked != 1 {
		t.Fatalf("write waiting for 2 replicas of 1: %v (version %d), want ambiguous with a ReplicationError acked 1 of 2", err, v2)
	}
	if it, err := one.Get(ctx, "k"); err != nil || string(it.Value) != "2" {
		t.Fatalf("the ambiguous write was applied on the master: got %q, %v", it.Value, err)
	}
	if _, err := two.CompareAndSwap(ctx, "k", v, []byte("3")); !errors.Is(err, cas.ErrConflict) {
		t.Errorf("stale write waiting for 2 replicas: %v, want a conflict", err)
	}
	if _, _, err := two.Add(ctx, "n", 1, cas.Bounds{}); !errors.Is(err, cas.ErrAmbiguous) || !errors.As(err, &re) {
		t.Errorf("delta waiting for 2 replicas of 1: %v, want ambiguous", err)
	}
	if err := two.CompareAndDelete(ctx, "k", v); !errors.Is(err, cas.ErrConflict) {
		t.Errorf("stale delete: %v, want a conflict", err)
	}
}
