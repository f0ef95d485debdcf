// Package writeid makes the ids adapters tag their writes with, so that
// after an answer was lost they can tell whether their own write applied.
package writeid

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"sync/atomic"
	"time"
)

// Len is the length of an id.
const Len = 16

// ID identifies one write.
type ID [Len]byte

// String returns the id in hex.
func (id ID) String() string { return hex.EncodeToString(id[:]) }

// UUID returns the id in the 8-4-4-4-12 form of a UUID, as a PostgreSQL
// uuid column shows it (the column takes any 128 bits, so the id needs no
// version or variant bits).
func (id ID) UUID() string {
	return fmt.Sprintf("%x-%x-%x-%x-%x", id[0:4], id[4:6], id[6:8], id[8:10], id[10:16])
}

// Random returns Len random bytes in hex: a token that names one holder
// or one request (a lock holder, a key's hold, a DynamoDB transaction's
// ClientRequestToken) rather than one write.
func Random() string {
	var b [Len]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read does not fail: it crashes the program
	return hex.EncodeToString(b[:])
}

// Source makes ids: 8 random bytes fixed per source, then a counter. They
// are unique without a system call per write. A Source is safe for
// concurrent use.
type Source struct {
	prefix [8]byte
	n      atomic.Uint64
}

// NewSource returns a source with a random prefix.
func NewSource() *Source {
	s := &Source{}
	if _, err := rand.Read(s.prefix[:]); err != nil {
		panic(fmt.Sprintf("writeid: reading random bytes: %v", err))
	}
	return s
}

// Next returns a new id.
func (s *Source) Next() ID {
	var id ID
	copy(id[:8], s.prefix[:])
	binary.BigEndian.PutUint64(id[8:], s.n.Add(1))
	return id
}

// Timed returns an id that sorts by time: now in Unix nanoseconds
// (8 bytes, big-endian), then 8 random bytes. Records keyed by such ids
// can be pruned by age with a range of the key.
func Timed(now time.Time) ID {
	var id ID
	binary.BigEndian.PutUint64(id[:8], uint64(now.UnixNano()))
	if _, err := rand.Read(id[8:]); err != nil {
		panic(fmt.Sprintf("writeid: reading random bytes: %v", err))
	}
	return id
}

// Before returns the smallest id Timed makes at t: every id made before t
// sorts below it.
func Before(t time.Time) ID {
	var id ID
	binary.BigEndian.PutUint64(id[:8], uint64(t.UnixNano()))
	return id
}
