package versionvector

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/occkit/occkit/adapters/memcas"
	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/occ"
)

// TestSimulationThreeRegions runs three regions, each a memcas store with
// its own replica ID, with concurrent writers that write after a fresh read,
// with a stale context read earlier in any region, or blind, while an
// anti-entropy loop syncs the regions over links that randomly go down
// (partitions) and come back. After the writers stop, the links heal and
// anti-entropy runs to convergence. Then every store must hold the same
// sets, and for every key the siblings must be exactly the acknowledged
// writes that no acknowledged write had seen:
//   - lost: an acknowledged write that is neither a sibling nor seen by
//     another acknowledged write (silently overwritten);
//   - stale: a sibling that an acknowledged write had seen (a write that
//     should have been replaced, so siblings would pile up).
//
// Both must be zero, and so must the stale siblings found right after each
// acknowledged write, in the store it was written to: once stored, a write
// supersedes what its writer had seen there for good.
func TestSimulationThreeRegions(t *testing.T) {
	const (
		writersPerRegion = 4
		writesPerWriter  = 150
		numKeys          = 5
		staleTail        = 15   // last writes of each writer: stale contexts only
		linkFlip         = 0.25 // chance per round that a link changes state
	)
	regions := []string{"eu", "us", "ap"}
	keys := make([]string, numKeys)
	for i := range keys {
		keys[i] = fmt.Sprintf("cart/%d", i)
	}
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)

	ctx := context.Background()
	stores := make([]*memcas.Store, len(regions))
	regs := make([]*Register[string], len(regions))
	for i := range regions {
		stores[i] = memcas.New()
		regs[i] = NewRegister(stores[i], cas.JSON[string]())
	}
	retry := []occ.Option{occ.WithMaxAttempts(50)}

	type snapshot struct {
		cc   CausalContext
		seen []string
	}
	type write struct {
		id, key string
		seen    []string
		acked   bool
	}
	var (
		mu          sync.Mutex
		writes      []write
		pool        = map[string][]snapshot{} // reads of each key, any region
		maxSiblings int
		revived     []string // seen by a stored write, yet a sibling after it
		modes       [3]int   // fresh, stale, blind
	)
	observe := func(n int) {
		mu.Lock()
		maxSiblings = max(maxSiblings, n)
		mu.Unlock()
	}

	// Writers.
	var writersWG sync.WaitGroup
	errs := make(chan error, len(regions)*writersPerRegion)
	for ri, region := range regions {
		for w := range writersPerRegion {
			writersWG.Add(1)
			go func() {
				defer writersWG.Done()
				rng := rand.New(rand.NewPCG(seed, uint64(ri*100+w)))
				for n := range writesPerWriter {
					key := keys[rng.IntN(len(keys))]
					var snap snapshot
					mode := rng.IntN(100)
					if n >= writesPerWriter-staleTail {
						// The last writes only use old contexts, so
						// that the end state shows how they were
						// handled instead of fresh writes covering it.
						mode = 60 + mode%25
					}
					switch {
					case mode < 60: // read, then write
						vals, cc, err := regs[ri].Get(ctx, key)
						if err != nil && !errors.Is(err, cas.ErrNotFound) {
							errs <- err
							return
						}
						snap = snapshot{cc: cc, seen: vals}
						observe(len(vals))
						mu.Lock()
						pool[key] = append(pool[key], snap)
						modes[0]++
						mu.Unlock()
					case mode < 85: // a context read earlier, anywhere
						mu.Lock()
						if p := pool[key]; len(p) > 0 {
							// Half the time a recent read (a
							// client that was a little slow),
							// else any read since the start.
							if rng.IntN(2) == 0 {
								p = p[max(0, len(p)-8):]
							}
							snap = p[rng.IntN(len(p))]
						}
						modes[1]++
						mu.Unlock()
					default: // blind
						mu.Lock()
						modes[2]++
						mu.Unlock()
					}
					// Think time between the read and the write, so
					// that other writes land in between.
					time.Sleep(time.Duration(rng.IntN(300)) * time.Microsecond)
					id := fmt.Sprintf("%s-%d-%d", region, w, n)
					err := regs[ri].Put(ctx, key, snap.cc, id, region, retry...)
					if err != nil && !errors.Is(err, cas.ErrConflict) {
						errs <- err
						return
					}
					if err == nil {
						// Once a write is stored, what its writer
						// had seen is superseded in this store for
						// good: no later write or sync may bring it
						// back.
						set, _, err := regs[ri].GetSet(ctx, key)
						if err != nil {
							errs <- err
							return
						}
						observe(set.Len())
						for _, v := range set.Values() {
							if slices.Contains(snap.seen, v) {
								mu.Lock()
								revived = append(revived, fmt.Sprintf("%s (seen by %s)", v, id))
								mu.Unlock()
							}
						}
					}
					mu.Lock()
					writes = append(writes, write{id: id, key: key, seen: snap.seen, acked: err == nil})
					mu.Unlock()
				}
			}()
		}
	}

	// Anti-entropy over links that go down and come back.
	type link struct{ a, b int }
	links := []link{{0, 1}, {1, 2}, {0, 2}}
	var (
		rounds, partitions, syncWrites int
		down                           = make([]bool, len(links))
	)
	syncAll := func(l link) error {
		st, err := SyncKeys(ctx, stores[l.a], stores[l.b], keys, retry...)
		syncWrites += st.UpdatedA + st.UpdatedB
		return err
	}
	stop := make(chan struct{})
	aeDone := make(chan error, 1)
	go func() {
		rng := rand.New(rand.NewPCG(seed, 999))
		for {
			select {
			case <-stop:
				aeDone <- nil
				return
			default:
			}
			rounds++
			for i, l := range links {
				if rng.Float64() < linkFlip {
					down[i] = !down[i]
					if down[i] {
						partitions++
					}
				}
				if down[i] {
					continue
				}
				if err := syncAll(l); err != nil {
					aeDone <- err
					return
				}
			}
			for _, r := range regs {
				for _, k := range keys {
					if s, _, err := r.GetSet(ctx, k); err == nil {
						observe(s.Len())
					}
				}
			}
			time.Sleep(100 * time.Microsecond)
		}
	}()

	writersWG.Wait()
	close(stop)
	if err := <-aeDone; err != nil {
		t.Fatalf("anti-entropy: %v", err)
	}
	close(errs)
	for err := range errs {
		t.Fatalf("writer: %v", err)
	}

	// Heal every link and run anti-entropy until the stores agree: two
	// passes over a connected graph suffice.
	for range 2 {
		for _, l := range links {
			if err := syncAll(l); err != nil {
				t.Fatal(err)
			}
		}
	}
	final := map[string][]string{}
	finalSiblings := 0
	for _, k := range keys {
		ref := storedBytes(t, stores[0], k)
		for i := 1; i < len(stores); i++ {
			if got := storedBytes(t, stores[i], k); !bytes.Equal(got, ref) {
				t.Fatalf("key %s: %s and %s differ after healing", k, regions[0], regions[i])
			}
		}
		if ref == nil {
			continue
		}
		vals, _, err := regs[0].Get(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		final[k] = vals
		finalSiblings += len(vals)
		maxSiblings = max(maxSiblings, len(vals))
	}

	// The check: siblings are exactly the acknowledged writes nobody saw.
	seenBy := map[string]string{} // write → an acknowledged write that had seen it
	acked := map[string]bool{}
	unacked := 0
	for _, w := range writes {
		if !w.acked {
			unacked++
			continue
		}
		acked[w.id] = true
		for _, s := range w.seen {
			seenBy[s] = w.id
		}
	}
	var lost, stale, phantom []string
	for _, w := range writes {
		if !w.acked {
			continue
		}
		in := slices.Contains(final[w.key], w.id)
		switch {
		case !in && seenBy[w.id] == "":
			lost = append(lost, w.id)
		case in && seenBy[w.id] != "":
			stale = append(stale, fmt.Sprintf("%s (seen by %s)", w.id, seenBy[w.id]))
		}
	}
	for _, vals := range final {
		for _, v := range vals {
			if !acked[v] {
				phantom = append(phantom, v)
			}
		}
	}

	t.Logf("regions: %d (memcas stores), writers: %d, keys: %d", len(regions), len(regions)*writersPerRegion, numKeys)
	t.Logf("writes acknowledged: %d (fresh read %d, stale context %d, blind %d), not acknowledged (retries exhausted): %d",
		len(acked), modes[0], modes[1], modes[2], unacked)
	t.Logf("anti-entropy rounds: %d, partitions (link went down): %d, keys written by anti-entropy: %d", rounds, partitions, syncWrites)
	t.Logf("siblings at most (one key, any time): %d; siblings at the end: %d over %d keys", maxSiblings, finalSiblings, len(final))
	t.Logf("writes lost: %d, stale siblings: %d at the end, %d right after a write; unknown siblings: %d", len(lost), len(stale), len(revived), len(phantom))
	if len(lost) > 0 || len(stale) > 0 || len(revived) > 0 || len(phantom) > 0 {
		t.Fatalf("lost %v\nstale at the end %v\nstale after a write %v\nunknown %v", lost, stale, revived, phantom)
	}
	if len(acked) < len(writes)/2 || partitions == 0 {
		t.Fatalf("the simulation did too little to mean anything: %d acknowledged writes, %d partitions", len(acked), partitions)
	}
}
