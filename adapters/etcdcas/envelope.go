package etcdcas

import (
	"encoding/binary"
	"errors"

	"github.com/occkit/occkit/internal/writeid"
)

// A data key's value is an envelope: one format byte, the 16-byte id of the
// write that stored it, then the caller's bytes. The write id is what lets
// the store tell, after a lost answer, whether its own write was applied.
const (
	envelopeFormat = 0x01
	envelopeHeader = 1 + writeid.Len
)

// errForeignValue reports a value under the store's prefix that etcdcas did
// not write.
var errForeignValue = errors.New("etcdcas: value under the prefix was not written by etcdcas")

func encodeEnvelope(id writeid.ID, value []byte) string {
	b := make([]byte, envelopeHeader+len(value))
	b[0] = envelopeFormat
	copy(b[1:], id[:])
	copy(b[envelopeHeader:], value)
	return string(b)
}

// decodeEnvelope returns the write id and the caller's bytes (a copy).
func decodeEnvelope(raw []byte) (writeid.ID, []byte, error) {
	var id writeid.ID
	if len(raw) < envelopeHeader || raw[0] != envelopeFormat {
		return id, nil, errForeignValue
	}
	copy(id[:], raw[1:envelopeHeader])
	v := make([]byte, len(raw)-envelopeHeader)
	copy(v, raw[envelopeHeader:])
	return id, v, nil
}

// encodeToken encodes a fencing token so that etcd's byte-wise value
// comparison orders tokens numerically.
func encodeToken(t uint64) string {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], t)
	return string(b[:])
}

func decodeToken(raw []byte) uint64 {
	if len(raw) != 8 {
		return 0
	}
	return binary.BigEndian.Uint64(raw)
}
