package rediscas

import (
	"encoding/binary"
	"fmt"

	"github.com/occkit/occkit/internal/writeid"
)

// historyEntryLen is the size of one entry of a key's history.
const historyEntryLen = 24

// historyEntry is a write's entry in a key's history: its id, then the
// version it replaces (expected), 8 bytes big-endian.
func historyEntry(id writeid.ID, expected uint64) string {
	var b [historyEntryLen]byte
	copy(b[:16], id[:])
	binary.BigEndian.PutUint64(b[16:], expected)
	return string(b[:])
}

// entry is one write in a key's history.
type entry struct {
	id       writeid.ID
	replaced uint64 // the version the write replaced; 0: it created the key
}

// parseHistory splits a history into its entries, newest first.
func parseHistory(hist string) []entry {
	out := make([]entry, 0, len(hist)/historyEntryLen)
	for len(hist) >= historyEntryLen {
		var e entry
		copy(e.id[:], hist[:16])
		e.replaced = binary.BigEndian.Uint64([]byte(hist[16:historyEntryLen]))
		out = append(out, e)
		hist = hist[historyEntryLen:]
	}
	return out
}

func raw8(v uint64) string {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], v)
	return string(b[:])
}

// encodeToken writes a fencing token as 20 decimal digits, zero-padded, so
// that the scripts compare tokens as strings exactly, over the whole uint64
// range (Lua 5.1 numbers are doubles).
func encodeToken(t uint64) string { return fmt.Sprintf("%020d", t) }
