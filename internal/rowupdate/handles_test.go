package rowupdate

import (
	"runtime"
	"testing"
	"time"
)

func TestHandlesHoldLoadReplace(t *testing.T) {
	h := newHandles[int]()
	var hs [][]byte
	for i := range 3*chunkSize + 5 {
		hs = append(hs, h.hold(i))
	}
	for i, b := range hs {
		p, id, err := h.load(b)
		if err != nil || *p != i {
			t.Fatalf("handle %d: %v, %v; want %d", i, p, err, i)
		}
		v := -i
		h.replace(id, &v)
	}
	for i, b := range hs {
		if p, _, err := h.load(b); err != nil || *p != -i {
			t.Fatalf("handle %d after replace: %v, %v; want %d", i, p, err, -i)
		}
	}
	if _, _, err := h.load([]byte{1, 2, 3}); err == nil {
		t.Fatal("3 bytes loaded as a handle")
	}
	if _, _, err := h.load([]byte{0, 0, 0, 0, 0, 0, 0, 1}); err == nil {
		t.Fatal("a handle never given out loaded")
	}
	runtime.KeepAlive(hs)
}

// The rows of a chunk are dropped once none of its handles is
// reachable, and not before: a chunk with one live handle stays.
func TestHandlesDropUnreachableChunks(t *testing.T) {
	h := newHandles[[64]byte]()
	keep := h.hold([64]byte{1})
	for range 10 * chunkSize {
		h.hold([64]byte{})
	}
	h.hold([64]byte{}) // the allocator moves on from the last full chunk
	count := func() int {
		n := 0
		h.chunks.Range(func(any, any) bool { n++; return true })
		return n
	}
	deadline := time.Now().Add(10 * time.Second)
	for count() > 2 && time.Now().Before(deadline) {
		runtime.GC()
		time.Sleep(time.Millisecond)
	}
	// Left: keep's chunk and the allocator's current one.
	if n := count(); n != 2 {
		t.Fatalf("%d chunks held after GC, want 2 (the live handle's and the current)", n)
	}
	if p, _, err := h.load(keep); err != nil || p[0] != 1 {
		t.Fatalf("the live handle: %v, %v", p, err)
	}
}
