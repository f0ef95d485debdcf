package rowupdate

import (
	"encoding/binary"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
)

// handles keeps the rows whose handles a Rows gave out: the bridge's
// "encoded value" of a row is an 8-byte handle, and the row lives as long
// as something (a cache entry, a combiner's state, a conflict being
// retried) still holds its handle.
//
// Handles come in chunks of chunkSize: the handles of one chunk are
// slices of one buffer, whose cleanup drops the chunk's rows once none of
// its handles is reachable. One cleanup per chunk instead of one per row,
// because runtime.AddCleanup walks its span's list of specials, and one
// per row was a large part of what Table.Modify costs on top of
// occ.Update over a Store (docs/benchmarks.md, the occ-table row of the
// goal checks). The price is that one live handle keeps its chunk's other
// rows too (at most chunkSize-1 more per entry a cache keeps).
type handles[T any] struct {
	chunks *sync.Map // chunk number → *chunk[T]

	mu   sync.Mutex
	cur  *chunk[T] // the chunk handles are taken from
	buf  []byte    // its buffer
	num  uint64    // its number
	next int       // its next free slot
}

// chunkSize is how many handles share one buffer and one cleanup.
const chunkSize = 16

// chunk holds the rows of chunkSize handles; a slot may be replaced (the
// row as stored after a write), hence the atomic pointers.
type chunk[T any] struct {
	rows [chunkSize]atomic.Pointer[T]
}

func newHandles[T any]() *handles[T] { return &handles[T]{chunks: new(sync.Map)} }

// hold keeps row and returns its handle.
func (h *handles[T]) hold(row T) []byte {
	h.mu.Lock()
	if h.cur == nil || h.next == chunkSize {
		h.num++
		h.cur, h.buf, h.next = new(chunk[T]), make([]byte, chunkSize*8), 0
		h.chunks.Store(h.num, h.cur)
		chunks := h.chunks
		runtime.AddCleanup(&h.buf[0], func(num uint64) { chunks.Delete(num) }, h.num)
	}
	c, buf, id := h.cur, h.buf, h.num*chunkSize+uint64(h.next)
	i := h.next
	h.next++
	h.mu.Unlock()
	c.rows[i].Store(&row)
	b := buf[i*8 : i*8+8 : i*8+8]
	binary.LittleEndian.PutUint64(b, id)
	return b
}

// load returns the row b is a handle of, and its id for replace.
func (h *handles[T]) load(b []byte) (*T, uint64, error) {
	if len(b) != 8 {
		return nil, 0, fmt.Errorf("rowupdate: %d bytes are not a row handle", len(b))
	}
	id := binary.LittleEndian.Uint64(b)
	c, ok := h.chunks.Load(id / chunkSize)
	if ok {
		if p := c.(*chunk[T]).rows[id%chunkSize].Load(); p != nil {
			return p, id, nil
		}
	}
	return nil, 0, fmt.Errorf("rowupdate: row handle %d is no longer held", id)
}

// replace makes handle id hold *p (the row as stored after a write).
func (h *handles[T]) replace(id uint64, p *T) {
	if c, ok := h.chunks.Load(id / chunkSize); ok {
		c.(*chunk[T]).rows[id%chunkSize].Store(p)
	}
}
