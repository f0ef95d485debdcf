package castest

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/occkit/occkit/cas"
)

// commitShapesTests mixes commits of two shapes on the same keys: writes
// of live keys only, and the same with a check of another key. A store
// that locks rows in a different order for the two shapes deadlocks
// them, which shows as conflicts without the current item (or as
// failures); a store that returns the current item with every conflict
// must return it here too.
var commitShapesTests = []test{
	{"MixedShapesNoDeadlock", func(t *testing.T, h *Harness, s cas.Store) {
		c := capability[cas.Committer](t, s)
		ctx := context.Background()
		keys := []string{"k0", "k1", "k2", "k3", "k4", "k5"}
		for _, k := range keys {
			mustCreate(t, s, k, "0")
		}
		var bare, failed int64
		var mu sync.Mutex
		h.runWorkers(func(w int) {
			for i := range 2 * h.opsPerWorker() {
				a, b := keys[(w+i)%len(keys)], keys[(w+2*i+1)%len(keys)]
				if a == b {
					continue
				}
				items, err := cas.GetMany(ctx, s, []string{a, b})
				if err != nil {
					t.Errorf("read: %v", err)
					return
				}
				ops := []cas.Op{cas.Put(a, items[0].Version, []byte("x")), cas.Put(b, items[1].Version, []byte("y"))}
				if w%2 == 1 {
					// The other shape: a check of a third key too.
					k := keys[(w+i+3)%len(keys)]
					if k != a && k != b {
						it, err := s.Get(ctx, k)
						if errors.Is(err, cas.ErrNotFound) && h.StaleReads {
							// Read from before k was made: the
							// check of version 0 conflicts.
							it, err = cas.Item{Key: k}, nil
						}
						if err != nil {
							t.Errorf("read: %v", err)
							return
						}
						ops = append(ops, cas.Check(k, it.Version))
					}
				}
				_, err = c.Commit(ctx, ops)
				var ce *cas.ConflictError
				switch {
				case err == nil:
				case errors.As(err, &ce):
					if !ce.HasCurrent {
						mu.Lock()
						bare++
						mu.Unlock()
					}
				default:
					mu.Lock()
					failed++
					mu.Unlock()
				}
			}
		})
		if failed > 0 {
			t.Errorf("%d commits failed with an error other than a conflict", failed)
		}
		if h.ReturnsCurrent && bare > 0 {
			t.Errorf("%d conflicts came without the current item: commits of the two shapes deadlocked", bare)
		}
	}},
}
