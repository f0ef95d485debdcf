package rediscas

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/hybrid"
	"github.com/occkit/occkit/hybrid/lockertest"
	"github.com/occkit/occkit/internal/redistest"
)

// TestLockerConformance runs hybrid/lockertest on Lockers with a 500 ms
// TTL, each with a client of its own: one process each. A lease is lost by
// deleting its lock key, as its expiry after a pause of the holder past
// the TTL (or a failover that lost it) would.
func TestLockerConformance(t *testing.T) {
	runLockerConformance(t,
		func(t *testing.T) redis.UniversalClient { return redistest.Client(t) },
		func(t *testing.T) string { return redistest.Prefix(t) })
}

// TestClusterLockerConformance runs the same on the Redis Cluster of
// OCCKIT_REDIS_CLUSTER_URL: each lock and its token counter share the
// slot of the lock's key, and the fenced store spreads its keys over the
// slots.
func TestClusterLockerConformance(t *testing.T) {
	runLockerConformance(t,
		func(t *testing.T) redis.UniversalClient { return redistest.ClusterClient(t, "") },
		func(t *testing.T) string { return redistest.ClusterPrefix(t, redistest.ClusterClient(t, "")) })
}

// runLockerConformance runs lockertest with clients from client (a new one
// for each Locker and store) under a prefix per test from newPrefix.
func runLockerConformance(t *testing.T, client func(t *testing.T) redis.UniversalClient, newPrefix func(t *testing.T) string) {
	const ttl = 500 * time.Millisecond
	prefixes := map[*testing.T]string{}
	prefix := func(t *testing.T) string {
		if p, ok := prefixes[t]; ok {
			return p
		}
		prefixes[t] = newPrefix(t)
		return prefixes[t]
	}
	lockertest.Run(t, lockertest.Harness{
		NewLockers: func(t *testing.T, n int) []hybrid.Locker {
			ls := make([]hybrid.Locker, n)
			for i := range ls {
				l, err := NewLocker(client(t), LockerConfig{Prefix: prefix(t) + "lock:", TTL: ttl})
				if err != nil {
					t.Fatal(err)
				}
				ls[i] = l
			}
			return ls
		},
		TTL:    ttl,
		Renews: true,
		LoseLease: func(t *testing.T, g hybrid.Lease) {
			if err := client(t).Del(redistest.Ctx(t, 10*time.Second), g.(*Lease).lockKey).Err(); err != nil {
				t.Fatalf("deleting the lock key of lease %d: %v", g.Token(), err)
			}
		},
		NewStore: func(t *testing.T) cas.FencedStore {
			s, err := New(client(t), Config{Prefix: prefix(t) + "data:"})
			if err != nil {
				t.Fatal(err)
			}
			return s
		},
	})
}
