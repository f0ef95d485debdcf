package memcas_test

import (
	"bytes"
	"context"
	"errors"
	"testing"

	"github.com/occkit/occkit/adapters/memcas"
	"github.com/occkit/occkit/cas"
)

// FuzzFencedWrites runs a program decoded from bytes against a memcas store
// and a model of the FencedStore contract: each op is three bytes (kind,
// key and expected-version choice, token). A token smaller than the
// largest that wrote the key fails with a *cas.FencedError naming both,
// checked before the version; a wrong expected version fails with a
// *cas.ConflictError carrying the current item; the largest token survives
// plain writes and deletes; versions only grow; nothing panics. Run it with
//
//	go test -run '^$' -fuzz '^FuzzFencedWrites$' -fuzztime 20s ./adapters/memcas/
func FuzzFencedWrites(f *testing.F) {
	f.Add([]byte{1, 0x80, 5, 1, 0x80, 4, 0, 0x80, 0, 2, 0x80, 0, 1, 0x00, 5})
	f.Add([]byte{1, 0x80, 0xff, 1, 0x80, 0xfe, 1, 0x80, 0xff, 3, 0x80, 0})
	f.Add([]byte{0, 0x80, 0, 0, 0x03, 0, 2, 0x00, 0, 2, 0x81, 0, 3, 0x01, 0})
	f.Add([]byte{1, 0x80, 0, 1, 0x80, 0, 2, 0x80, 0, 1, 0x80, 0, 0, 0x80, 0})
	type state struct {
		version cas.Version
		token   uint64
		value   []byte
	}
	keys := []string{"a", "b"}
	f.Fuzz(func(t *testing.T, prog []byte) {
		ctx := context.Background()
		s := memcas.New()
		model := map[string]state{}
		var last cas.Version
		for i := 0; i+3 <= len(prog) && i < 3*64; i += 3 {
			kind, sel, tok := prog[i]%4, prog[i+1], uint64(prog[i+2])
			key := keys[sel&1]
			m := model[key]
			expected := m.version
			if sel&0x80 == 0 {
				expected = cas.Version(sel >> 1 & 0x3f) // often wrong
			}
			value := []byte{byte(i), byte(tok)}
			switch kind {
			case 0, 1:
				var v cas.Version
				var err error
				fenced := kind == 1
				if fenced {
					v, err = s.CompareAndSwapFenced(ctx, key, expected, tok, value)
				} else {
					v, err = s.CompareAndSwap(ctx, key, expected, value)
				}
				var fe *cas.FencedError
				var ce *cas.ConflictError
				switch {
				case fenced && tok < m.token:
					if !errors.As(err, &fe) || !errors.Is(err, cas.ErrFenced) || fe.Token != tok || fe.Highest != m.token || fe.Key != key {
						t.Fatalf("op %d: token %d under %d: %v", i/3, tok, m.token, err)
					}
				case expected != m.version:
					if !errors.As(err, &ce) || !ce.HasCurrent || ce.Current.Version != m.version ||
						!bytes.Equal(ce.Current.Value, m.value) || errors.Is(err, cas.ErrFenced) ||
						errors.Is(err, cas.ErrNotFound) != (m.version == 0) {
						t.Fatalf("op %d: expected %d, current %d: %v", i/3, expected, m.version, err)
					}
				default:
					if err != nil || v <= last {
						t.Fatalf("op %d: write = v%d, %v (last version %d)", i/3, v, err, last)
					}
					last, m.version, m.value = v, v, value
					if fenced {
						m.token = tok
					}
				}
			case 2:
				err := s.CompareAndDelete(ctx, key, expected)
				var ce *cas.ConflictError
				switch {
				case expected == 0:
					if !errors.Is(err, cas.ErrInvalidVersion) {
						t.Fatalf("op %d: delete expecting 0 = %v", i/3, err)
					}
				case expected != m.version:
					if !errors.As(err, &ce) || ce.Current.Version != m.version {
						t.Fatalf("op %d: delete expected %d, current %d: %v", i/3, expected, m.version, err)
					}
				default:
					if err != nil {
						t.Fatalf("op %d: delete = %v", i/3, err)
					}
					m.version, m.value = 0, nil
				}
			case 3:
				it, err := s.Get(ctx, key)
				if m.version == 0 {
					if !errors.Is(err, cas.ErrNotFound) {
						t.Fatalf("op %d: Get of an absent key = %+v, %v", i/3, it, err)
					}
				} else if err != nil || it.Version != m.version || !bytes.Equal(it.Value, m.value) {
					t.Fatalf("op %d: Get = %+v, %v, want v%d %x", i/3, it, err, m.version, m.value)
				}
			}
			model[key] = m
		}
	})
}
