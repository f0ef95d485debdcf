package cas_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/occkit/occkit/cas"
)

// The validators and codecs are fuzzed. Each target checks that nothing
// panics, that what is refused fails with the documented typed error, and
// that what is accepted round-trips. Run one with
//
//	go test -run '^$' -fuzz '^FuzzLimitsPut$' -fuzztime 20s ./cas/

// validKey is the key contract, written independently of CheckKey.
func validKey(key string, max int) bool {
	return key != "" && len(key) <= max && utf8.ValidString(key) && !strings.ContainsRune(key, 0)
}

func effective(n, def int) int {
	if n > 0 {
		return n
	}
	return def
}

// mustKeyError checks that err is a *cas.KeyError for op and key matching
// want.
func mustKeyError(t *testing.T, err error, op, key string, want error) {
	t.Helper()
	var ke *cas.KeyError
	if !errors.As(err, &ke) || !errors.Is(err, want) {
		t.Fatalf("error %v (%T) is not a *cas.KeyError matching %v", err, err, want)
	}
	if ke.Op != op || ke.Key != key {
		t.Fatalf("KeyError names op %q key %q, want %q %q", ke.Op, ke.Key, op, key)
	}
	if ke.Error() == "" {
		t.Fatal("empty error message")
	}
}

// FuzzLimitsPut checks Limits.Put and Limits.Delete (and through them
// CheckKey and CheckValue) over keys, value sizes, versions, any limits
// (zero and negative mean the default) and cancelled contexts.
func FuzzLimitsPut(f *testing.F) {
	f.Add("k", 3, uint64(1), 0, 0, false)
	f.Add("k", 9, uint64(0), 4, 8, false)
	f.Add("", 0, uint64(1), 0, 0, false)
	f.Add("a\x00b", 0, uint64(1<<63), -1, -1, false)
	f.Add("\xff", 1, uint64(1<<64-1), 0, 0, false)
	f.Add("日本語", 4096, uint64(7), 6, 4096, false)
	f.Add("key", 1, uint64(1), 0, 0, true)
	f.Add(strings.Repeat("x", 1025), 0, uint64(1), 0, 0, false)
	f.Fuzz(func(t *testing.T, key string, n int, expected uint64, maxKey, maxValue int, cancel bool) {
		// Value sizes stay small; the limit is what is fuzzed.
		n = min(max(n, 0), 1<<14)
		maxValue = min(maxValue, 1<<14)
		l := cas.Limits{MaxKeyBytes: maxKey, MaxValueBytes: maxValue}
		ctx := context.Background()
		if cancel {
			c, stop := context.WithCancel(ctx)
			stop()
			ctx = c
		}
		value := bytes.Repeat([]byte{'v'}, n)
		keyOK := validKey(key, effective(maxKey, cas.DefaultMaxKeyBytes))
		valueOK := n <= effective(maxValue, cas.DefaultMaxValueBytes)

		err := l.Put(ctx, key, value)
		switch {
		case cancel:
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("Put with a cancelled context = %v", err)
			}
		case !keyOK:
			mustKeyError(t, err, "compare-and-swap", key, cas.ErrInvalidKey)
		case !valueOK:
			mustKeyError(t, err, "compare-and-swap", key, cas.ErrTooLarge)
		case err != nil:
			t.Fatalf("Put(%q, %d bytes) = %v, want nil", key, n, err)
		}
		if cerr := l.CheckValue("x", key, value); (cerr == nil) != valueOK {
			t.Fatalf("CheckValue(%d bytes) = %v, want ok = %v", n, cerr, valueOK)
		}

		err = l.Delete(ctx, key, cas.Version(expected))
		switch {
		case cancel:
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("Delete with a cancelled context = %v", err)
			}
		case !keyOK:
			mustKeyError(t, err, "compare-and-delete", key, cas.ErrInvalidKey)
		case expected == 0:
			mustKeyError(t, err, "compare-and-delete", key, cas.ErrInvalidVersion)
		case err != nil:
			t.Fatalf("Delete(%q, %d) = %v, want nil", key, expected, err)
		}

		err = l.Get(ctx, key)
		if cancel != errors.Is(err, context.Canceled) || (!cancel && (err == nil) != keyOK) {
			t.Fatalf("Get(%q) = %v, key ok = %v", key, err, keyOK)
		}
		// WithDefaults changes nothing about what is accepted.
		if d := l.WithDefaults(); d.MaxKeyBytes <= 0 || d.MaxValueBytes <= 0 || d.MaxCommitOps <= 0 ||
			(d.Put(ctx, key, value) == nil) != (err == nil && valueOK) {
			t.Fatalf("WithDefaults = %+v disagrees with %+v", d, l)
		}
	})
}

// FuzzLimitsCommit checks Limits.Commit on commits decoded from bytes: each
// op is a kind byte, an expected version byte, a value length byte and a
// key length byte followed by the key.
func FuzzLimitsCommit(f *testing.F) {
	f.Add([]byte("\x02\x00\x03\x01a\x01\x05\x00\x01b"), 0, 0)
	f.Add([]byte("\x03\x00\x00\x01a"), 0, 0)
	f.Add([]byte("\x02\x00\x03\x01a\x02\x00\x03\x01a"), 0, 0)
	f.Add([]byte("\x07\x01\x00\x01a"), 0, 0)
	f.Add([]byte("\x02\x00\xff\x01a"), 0, 100)
	f.Add([]byte("\x02\x00\x01\x02\xff\xfe"), 0, 0)
	f.Add([]byte("\x02\x00\x01\x01\x00"), 0, 0)
	f.Add([]byte{}, 0, 0)
	f.Add([]byte("\x01\x01\x00\x01a\x01\x01\x00\x01b\x01\x01\x00\x01c"), 2, 0)
	f.Fuzz(func(t *testing.T, data []byte, maxOps, maxBytes int) {
		var ops []cas.Op
		for len(data) >= 4 {
			kind, exp, vlen, klen := data[0], data[1], int(data[2]), int(data[3])
			data = data[4:]
			klen = min(klen, len(data))
			op := cas.Op{Kind: cas.OpKind(kind), Key: string(data[:klen]), Expected: cas.Version(exp)}
			data = data[klen:]
			if kind == byte(cas.OpPut) {
				op.Value = bytes.Repeat([]byte{'v'}, vlen)
			}
			ops = append(ops, op)
		}
		maxOps = min(maxOps, 1<<10)
		l := cas.Limits{MaxKeyBytes: 8, MaxValueBytes: 200, MaxCommitOps: maxOps, MaxCommitBytes: maxBytes}
		err := l.Commit(context.Background(), ops)

		// The model: the first problem found, in the documented order.
		var want error
		seen := map[string]bool{}
		total := 0
		switch {
		case len(ops) == 0:
			want = cas.ErrInvalidCommit
		case len(ops) > effective(maxOps, cas.DefaultMaxCommitOps):
			want = cas.ErrTooLarge
		}
		for _, op := range ops {
			if want != nil {
				break
			}
			switch {
			case !validKey(op.Key, 8):
				want = cas.ErrInvalidKey
			case seen[op.Key]:
				want = cas.ErrInvalidCommit
			case op.Kind == cas.OpPut && len(op.Value) > 200:
				want = cas.ErrTooLarge
			case op.Kind == cas.OpDelete && op.Expected == 0:
				want = cas.ErrInvalidVersion
			case op.Kind != cas.OpCheck && op.Kind != cas.OpPut && op.Kind != cas.OpDelete:
				want = cas.ErrInvalidCommit
			}
			seen[op.Key] = true
			total += len(op.Key) + len(op.Value)
		}
		if want == nil && maxBytes > 0 && total > maxBytes {
			want = cas.ErrTooLarge
		}
		if want == nil {
			if err != nil {
				t.Fatalf("Commit(%v) = %v, want nil", ops, err)
			}
			return
		}
		if !errors.Is(err, want) {
			t.Fatalf("Commit(%v) = %v, want %v", ops, err, want)
		}
		for _, other := range []error{cas.ErrInvalidCommit, cas.ErrTooLarge, cas.ErrInvalidKey, cas.ErrInvalidVersion} {
			if other != want && errors.Is(err, other) {
				t.Fatalf("Commit error %v matches both %v and %v", err, want, other)
			}
		}
	})
}

type record struct {
	Name  string            `json:"name"`
	N     int64             `json:"n"`
	Tags  []string          `json:"tags,omitempty"`
	Attrs map[string]uint64 `json:"attrs,omitempty"`
	Raw   []byte            `json:"raw,omitempty"`
	Next  *record           `json:"next,omitempty"`
}

// FuzzTypedDecode checks Typed.Decode with the JSON and Bytes codecs on
// any stored bytes: a failure is a *cas.CodecError for the key, marked as
// a decode; what decodes re-encodes to bytes that decode to the same value;
// the Bytes codec is the identity and never aliases its input.
func FuzzTypedDecode(f *testing.F) {
	for _, s := range []string{
		`{"name":"a","n":1}`,
		`{"name":"b","n":-9223372036854775808,"tags":["x",""],"attrs":{"k":18446744073709551615},"raw":"AAE=","next":{"name":"c"}}`,
		`{"n":9223372036854775808}`,
		`{"attrs":{"k":-1}}`,
		`{"raw":"not base64"}`,
		`null`, `[]`, `"`, ``, "\xff", `{"name":"\ud800"}`,
		`{"next":{"next":{"next":{"next":null}}}}`,
	} {
		f.Add([]byte(s))
	}
	js := cas.NewTyped[record](nil, cas.JSON[record]())
	raw := cas.NewTyped[[]byte](nil, cas.Bytes())
	f.Fuzz(func(t *testing.T, data []byte) {
		in := bytes.Clone(data)
		var r record
		err := js.Decode("key", data, &r)
		if !bytes.Equal(in, data) {
			t.Fatal("Decode modified its input")
		}
		if err != nil {
			var ce *cas.CodecError
			if !errors.As(err, &ce) || !ce.Decode || ce.Key != "key" || ce.Err == nil {
				t.Fatalf("Decode(%q) = %v (%T), not a decode *cas.CodecError for the key", data, err, err)
			}
			if json.Valid(data) && !strings.Contains(err.Error(), "decode") {
				t.Fatalf("error text %q", err)
			}
			if !json.Valid(data) {
				return
			}
		} else {
			if !json.Valid(data) {
				t.Fatalf("Decode accepted invalid JSON %q", data)
			}
			enc, err := js.Encode("key", r)
			if err != nil {
				t.Fatalf("Encode(%+v) = %v", r, err)
			}
			// Empty and absent fields decode alike (omitempty), so the
			// encodings are compared, not the values.
			var back record
			if err := js.Decode("key", enc, &back); err != nil {
				t.Fatalf("re-encoding %q of %q does not decode: %v", enc, data, err)
			}
			if enc2, err := js.Encode("key", back); err != nil || !bytes.Equal(enc2, enc) {
				t.Fatalf("round trip of %q: %q, then %q, %v", data, enc, enc2, err)
			}
		}

		var b []byte
		if err := raw.Decode("key", data, &b); err != nil || !bytes.Equal(b, data) {
			t.Fatalf("Bytes decode of %q = %q, %v", data, b, err)
		}
		if len(b) > 0 {
			b[0]++
			if !bytes.Equal(in, data) {
				t.Fatal("Bytes decode aliases its input")
			}
		}
		enc, err := raw.Encode("key", data)
		if err != nil || !bytes.Equal(enc, data) {
			t.Fatalf("Bytes encode of %q = %q, %v", data, enc, err)
		}
		if len(enc) > 0 {
			enc[0]++
			if !bytes.Equal(in, data) {
				t.Fatal("Bytes encode aliases its input")
			}
		}
	})
}
