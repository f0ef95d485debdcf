package etcdcas

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/hybrid"
	"github.com/occkit/occkit/hybrid/lockertest"
	"github.com/occkit/occkit/internal/etcdtest"
)

var lockerSpaces atomic.Int64

// TestLockerConformance runs hybrid/lockertest on Lockers with a 1 s TTL
// (etcd's least), each with a client of its own: one process each. A lease
// is lost by revoking its session's etcd lease, as its expiry after a pause
// of the holder past the TTL would end it.
func TestLockerConformance(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.Options{})
	admin := c.Client()
	lockertest.Run(t, lockertest.Harness{
		NewLockers: func(t *testing.T, n int) []hybrid.Locker {
			prefix := fmt.Sprintf("lockertest%d/", lockerSpaces.Add(1))
			ls := make([]hybrid.Locker, n)
			for i := range ls {
				l, err := NewLocker(c.Client(), LockerConfig{Prefix: prefix, TTL: time.Second})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { l.Close() })
				ls[i] = l
			}
			return ls
		},
		TTL:    time.Second,
		Renews: true,
		LoseLease: func(t *testing.T, g hybrid.Lease) {
			ctx := etcdtest.Ctx(t, 10*time.Second)
			if _, err := admin.Revoke(ctx, g.(*Lease).sess.id); err != nil {
				t.Fatalf("revoking the session of lease %d: %v", g.Token(), err)
			}
		},
		NewStore: func(t *testing.T) cas.FencedStore {
			s, err := New(admin, Config{Prefix: fmt.Sprintf("lockerteststore%d/", lockerSpaces.Add(1))})
			if err != nil {
				t.Fatal(err)
			}
			return s
		},
	})
}
