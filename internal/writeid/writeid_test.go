package writeid

import (
	"sync"
	"testing"
)

func TestUnique(t *testing.T) {
	a, b := NewSource(), NewSource()
	seen := map[ID]bool{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, s := range []*Source{a, b, a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 1000 {
				id := s.Next()
				mu.Lock()
				if seen[id] {
					t.Errorf("id %s made twice", id)
				}
				seen[id] = true
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if len(seen) != 4000 || len(a.Next().String()) != 2*Len {
		t.Fatalf("%d ids", len(seen))
	}
}
