package hybrid_test

import (
	"context"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/occkit/occkit/adapters/memcas"
	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/hybrid"
	"github.com/occkit/occkit/occ"
)

// orderLocker records the order in which each goroutine's call acquires
// its leases, and holds each lease a while so that callers overlap.
type orderLocker struct {
	hybrid.Locker
	mu    sync.Mutex
	order map[int][]string // by call
}

// callKey carries a call's number to Acquire.
type callKey struct{}

func (o *orderLocker) Acquire(ctx context.Context, key string) (hybrid.Lease, error) {
	l, err := o.Locker.Acquire(ctx, key)
	if err == nil {
		o.mu.Lock()
		call := ctx.Value(callKey{}).(int)
		o.order[call] = append(o.order[call], key)
		o.mu.Unlock()
		time.Sleep(100 * time.Microsecond)
	}
	return l, err
}

// TestTxn: transfers both ways between two keys, and over a third, under
// hybrid.Txn's leases: every call succeeds, no two callers deadlock
// (leases in key order), every call took its leases in key order, and the
// total holds.
func TestTxn(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s := memcas.New()
	for _, k := range []string{"a", "b", "c"} {
		if _, err := s.CompareAndSwap(ctx, k, 0, []byte("100")); err != nil {
			t.Fatal(err)
		}
	}
	l := &orderLocker{Locker: hybrid.NewLocalLocker(10 * time.Second), order: map[int][]string{}}
	pairs := [][2]string{{"b", "a"}, {"a", "b"}, {"c", "a"}, {"b", "c"}}
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := range 20 {
				p := pairs[(w+i)%len(pairs)]
				cctx := context.WithValue(ctx, callKey{}, w*1000+i)
				err := hybrid.Txn(cctx, l, s, []string{p[0], p[1]}, func(tx *occ.Tx) error {
					fv, _, err := tx.Get(p[0])
					if err != nil {
						return err
					}
					tv, _, err := tx.Get(p[1])
					if err != nil {
						return err
					}
					f, _ := strconv.Atoi(string(fv))
					g, _ := strconv.Atoi(string(tv))
					tx.Put(p[0], []byte(strconv.Itoa(f-1)))
					tx.Put(p[1], []byte(strconv.Itoa(g+1)))
					return nil
				})
				if err != nil {
					t.Errorf("transfer %v: %v", p, err)
					return
				}
			}
		})
	}
	wg.Wait()
	if ctx.Err() != nil {
		t.Fatal("the transfers did not end: a deadlock")
	}
	total := 0
	for _, k := range []string{"a", "b", "c"} {
		it, err := s.Get(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		n, _ := strconv.Atoi(string(it.Value))
		total += n
	}
	if total != 300 {
		t.Fatalf("total %d, want 300", total)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	// Each attempt of a call takes its two leases in key order: a call's
	// record is [low high] once per attempt.
	for call, keys := range l.order {
		for i := 0; i < len(keys); i += 2 {
			if i+1 >= len(keys) || !slices.IsSorted(keys[i:i+2]) || keys[i] == keys[i+1] {
				t.Fatalf("call %d took its leases in the order %q", call, keys)
			}
		}
	}
	if _, err := s.Get(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if err := hybrid.Txn(ctx, l, s, nil, func(*occ.Tx) error { return nil }); err == nil {
		t.Fatal("Txn without keys succeeded")
	}
	var _ cas.Committer = s
}
