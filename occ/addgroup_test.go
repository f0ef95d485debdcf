package occ_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/occkit/occkit/adapters/memcas"
	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/occ"
)

// manyAdder is a memcas store that applies deltas of several keys in one
// call, slowly (as a round trip would), counting the calls and checking
// that a call names each key once.
type manyAdder struct {
	*memcas.Store
	t        *testing.T
	delay    time.Duration
	calls    atomic.Int64 // AddMany calls
	deltas   atomic.Int64 // deltas they carried
	inFlight atomic.Int64
	most     atomic.Int64 // the most AddMany/Add calls in flight at once
}

func (m *manyAdder) enter() func() {
	n := m.inFlight.Add(1)
	for {
		most := m.most.Load()
		if n <= most || m.most.CompareAndSwap(most, n) {
			break
		}
	}
	time.Sleep(m.delay)
	return func() { m.inFlight.Add(-1) }
}

func (m *manyAdder) Add(ctx context.Context, key string, n int64, b cas.Bounds) (int64, cas.Version, error) {
	defer m.enter()()
	return m.Store.Add(ctx, key, n, b)
}

func (m *manyAdder) AddMany(ctx context.Context, ds []cas.Delta) []cas.DeltaResult {
	defer m.enter()()
	m.calls.Add(1)
	m.deltas.Add(int64(len(ds)))
	seen := map[string]bool{}
	out := make([]cas.DeltaResult, len(ds))
	for i, d := range ds {
		if seen[d.Key] {
			m.t.Errorf("AddMany named %q twice", d.Key)
		}
		seen[d.Key] = true
		out[i].Value, out[i].Version, out[i].Err = m.Store.Add(ctx, d.Key, d.N, d.Bounds)
	}
	return out
}

// TestAddGroupsKeys: concurrent deltas of many keys on a cas.ManyAdder go
// to the store together, each key once a call, at most two calls in
// flight, and every delta counted exactly once (stock never below 0).
func TestAddGroupsKeys(t *testing.T) {
	ctx := context.Background()
	m := &manyAdder{Store: memcas.New(), t: t, delay: 200 * time.Microsecond}
	const keys, workers, per = 5, 16, 40
	for k := range keys {
		if _, _, err := occ.Add(ctx, m, fmt.Sprint("k", k), 300, cas.Bounds{}); err != nil {
			t.Fatal(err)
		}
	}
	var sold [keys]atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range per {
				k := (w + i) % keys
				_, _, err := occ.Add(ctx, m, fmt.Sprint("k", k), -1, cas.AtLeast(0))
				switch {
				case err == nil:
					sold[k].Add(1)
				case !errors.Is(err, cas.ErrBound):
					t.Errorf("add: %v", err)
				}
			}
		})
	}
	wg.Wait()
	for k := range keys {
		left, _, err := occ.Add(ctx, m, fmt.Sprint("k", k), 0, cas.Bounds{})
		if err != nil || left != 300-sold[k].Load() || left < 0 {
			t.Fatalf("k%d: %d left (%v) after %d sold of 300", k, left, err, sold[k].Load())
		}
	}
	if m.calls.Load() == 0 || m.deltas.Load() <= m.calls.Load() {
		t.Fatalf("%d AddMany calls carried %d deltas: nothing went together", m.calls.Load(), m.deltas.Load())
	}
	if most := m.most.Load(); most > 2 {
		t.Fatalf("%d calls of the store in flight at once, want at most 2", most)
	}
	t.Logf("%d AddMany calls carried %d deltas", m.calls.Load(), m.deltas.Load())
}

// TestAddGroupWaiterCancelled: a delta whose context ends while it waits
// for a statement is not sent, and the others go on.
func TestAddGroupWaiterCancelled(t *testing.T) {
	m := &manyAdder{Store: memcas.New(), t: t, delay: 20 * time.Millisecond}
	bg := context.Background()
	var wg sync.WaitGroup
	for k := range 2 { // two statements in flight, for 20 ms
		wg.Go(func() {
			if _, _, err := occ.Add(bg, m, fmt.Sprint("busy", k), 1, cas.Bounds{}); err != nil {
				t.Errorf("add: %v", err)
			}
		})
	}
	time.Sleep(5 * time.Millisecond)
	ctx, cancel := context.WithTimeout(bg, 2*time.Millisecond)
	defer cancel()
	if _, _, err := occ.Add(ctx, m, "late", 1, cas.Bounds{}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a waiting delta whose context ended: %v, want context.DeadlineExceeded", err)
	}
	wg.Wait()
	if _, err := m.Get(bg, "late"); !errors.Is(err, cas.ErrNotFound) {
		t.Fatalf("the cancelled delta was applied: %v", err)
	}
	if v, _, err := occ.Add(bg, m, "busy0", 0, cas.Bounds{}); err != nil || v != 1 {
		t.Fatalf("busy0 = %d, %v; want 1", v, err)
	}
}
