package rediscas

import (
	"testing"
	"time"

	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/hybrid"
	"github.com/occkit/occkit/hybrid/lockertest"
	"github.com/occkit/occkit/internal/redistest"
)

// TestClusterLockerConformance runs hybrid/lockertest on the Redis Cluster
// of OCCKIT_REDIS_CLUSTER_URL: each lock and its token counter share the
// slot of the lock's key, and the fenced store spreads its keys over the
// slots. Each Locker has a client of its own (one process each).
func TestClusterLockerConformance(t *testing.T) {
	const ttl = 500 * time.Millisecond
	prefixes := map[*testing.T]string{}
	prefix := func(t *testing.T) string {
		if p, ok := prefixes[t]; ok {
			return p
		}
		prefixes[t] = redistest.ClusterPrefix(t, redistest.ClusterClient(t, ""))
		return prefixes[t]
	}
	lockertest.Run(t, lockertest.Harness{
		NewLockers: func(t *testing.T, n int) []hybrid.Locker {
			ls := make([]hybrid.Locker, n)
			for i := range ls {
				l, err := NewLocker(redistest.ClusterClient(t, ""), LockerConfig{Prefix: prefix(t) + "lock:", TTL: ttl})
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
			cli := redistest.ClusterClient(t, "")
			if err := cli.Del(redistest.Ctx(t, 10*time.Second), g.(*Lease).lockKey).Err(); err != nil {
				t.Fatalf("deleting the lock key of lease %d: %v", g.Token(), err)
			}
		},
		NewStore: func(t *testing.T) cas.FencedStore {
			s, err := New(redistest.ClusterClient(t, ""), Config{Prefix: prefix(t) + "data:"})
			if err != nil {
				t.Fatal(err)
			}
			return s
		},
	})
}
