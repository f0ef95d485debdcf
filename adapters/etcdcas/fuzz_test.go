package etcdcas

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"errors"
	"testing"

	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/internal/writeid"
)

// The decoders of what etcd hands back are fuzzed: they need no server.
// Run one with
//
//	go test -run '^$' -fuzz '^FuzzDecodeEnvelope$' -fuzztime 20s ./adapters/etcdcas/

// FuzzDecodeEnvelope checks that any value under the prefix decodes or is
// refused with errForeignValue (a *cas.KeyError through Store.item), never
// panics, that what decodes re-encodes to the very same bytes, and that the
// decoded value does not alias etcd's buffer.
func FuzzDecodeEnvelope(f *testing.F) {
	ids := writeid.NewSource()
	f.Add([]byte(encodeEnvelope(ids.Next(), []byte("value"))))
	f.Add([]byte(encodeEnvelope(ids.Next(), nil)))
	f.Add([]byte(encodeEnvelope(writeid.ID{}, []byte{0, 0xff})))
	f.Add([]byte{})
	f.Add([]byte{envelopeFormat})
	f.Add([]byte("\x02plain value written by someone else"))
	f.Add(bytes.Repeat([]byte{envelopeFormat}, envelopeHeader-1))
	s := &Store{}
	f.Fuzz(func(t *testing.T, raw []byte) {
		in := bytes.Clone(raw)
		id, v, err := decodeEnvelope(raw)
		valid := len(raw) >= envelopeHeader && raw[0] == envelopeFormat
		if valid != (err == nil) {
			t.Fatalf("decodeEnvelope(%x) = %v, valid = %v", raw, err, valid)
		}
		it, iid, ierr := s.item("k", &mvccpb.KeyValue{Value: raw, ModRevision: 7})
		if err != nil {
			if !errors.Is(err, errForeignValue) {
				t.Fatalf("decodeEnvelope(%x) = %v, not errForeignValue", raw, err)
			}
			var ke *cas.KeyError
			if !errors.As(ierr, &ke) || ke.Key != "k" || !errors.Is(ierr, errForeignValue) {
				t.Fatalf("item(%x) = %v (%T), not a *cas.KeyError for the key", raw, ierr, ierr)
			}
			return
		}
		if got := encodeEnvelope(id, v); got != string(raw) {
			t.Fatalf("decodeEnvelope(%x) = %x, %x, which encodes to %x", raw, id, v, got)
		}
		if ierr != nil || iid != id || it.Version != 7 || it.Key != "k" || !bytes.Equal(it.Value, v) {
			t.Fatalf("item(%x) = %+v, %x, %v", raw, it, iid, ierr)
		}
		if v == nil {
			t.Fatalf("decodeEnvelope(%x) returned a nil value for an empty one", raw)
		}
		if len(v) > 0 {
			v[0]++
			if !bytes.Equal(in, raw) {
				t.Fatal("the decoded value aliases the raw bytes")
			}
		}
	})
}

// FuzzToken checks the fencing token encoding: decodeToken inverts
// encodeToken, refuses (as 0, no token) anything not 8 bytes long, and
// etcd's byte-wise comparison of encodings orders tokens numerically,
// which is what the fenced write's compare relies on.
func FuzzToken(f *testing.F) {
	f.Add(uint64(0), uint64(1), []byte{})
	f.Add(uint64(255), uint64(256), []byte("12345678"))
	f.Add(uint64(1<<63), uint64(1<<63-1), []byte("123456789"))
	f.Add(uint64(1<<64-1), uint64(0), []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, a, b uint64, raw []byte) {
		ea, eb := encodeToken(a), encodeToken(b)
		if len(ea) != 8 || decodeToken([]byte(ea)) != a {
			t.Fatalf("encodeToken(%d) = %x, decodes to %d", a, ea, decodeToken([]byte(ea)))
		}
		if c := cmp.Compare(ea, eb); c != cmp.Compare(a, b) {
			t.Fatalf("encodings of %d and %d compare %d", a, b, c)
		}
		got := decodeToken(raw)
		switch {
		case len(raw) != 8 && got != 0:
			t.Fatalf("decodeToken(%x) = %d, want 0", raw, got)
		case len(raw) == 8 && (got != binary.BigEndian.Uint64(raw) || encodeToken(got) != string(raw)):
			t.Fatalf("decodeToken(%x) = %d does not round-trip", raw, got)
		}
	})
}
