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

func TestUUID(t *testing.T) {
	id := ID{0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef, 0, 1, 2, 3, 4, 5, 6, 0xff}
	if got, want := id.UUID(), "01234567-89ab-cdef-0001-0203040506ff"; got != want {
		t.Fatalf("UUID() = %s, want %s", got, want)
	}
}
