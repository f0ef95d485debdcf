package dynamocas

import (
	"bytes"
	"errors"
	"math"
	"strconv"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/internal/writeid"
)

// The decoding of an item as DynamoDB hands it back is fuzzed: it needs no
// server. Run it with
//
//	go test -run '^$' -fuzz '^FuzzDecodeItem$' -fuzztime 20s ./adapters/dynamocas/

func fuzzStore() *Store {
	return &Store{table: "t", names: attrNames{"pk", "version", "value", "fence", "writeid", "hold", "hold_until"}}
}

// attr makes an attribute of a fuzzed kind: 0 absent, 1 number, 2 string,
// 3 binary, 4 NULL, 5 bool, 6 list.
func attr(kind uint8, s string, b []byte) types.AttributeValue {
	switch kind % 7 {
	case 1:
		return &types.AttributeValueMemberN{Value: s}
	case 2:
		return &types.AttributeValueMemberS{Value: s}
	case 3:
		return &types.AttributeValueMemberB{Value: b}
	case 4:
		return &types.AttributeValueMemberNULL{Value: true}
	case 5:
		return &types.AttributeValueMemberBOOL{Value: true}
	case 6:
		return &types.AttributeValueMemberL{Value: []types.AttributeValue{&types.AttributeValueMemberN{Value: s}}}
	}
	return nil
}

// FuzzDecodeItem checks Store.decode on items of any shape: it never
// panics; an item the store did not write is refused with a *cas.KeyError
// for the key that matches none of the outcome sentinels (a foreign item
// is neither absent nor a conflict); an accepted item's version, fence,
// write id and value are what the attributes say, and a tombstone (a
// negative or zero version) is absent but keeps its version's magnitude.
func FuzzDecodeItem(f *testing.F) {
	wid := bytes.Repeat([]byte{7}, writeid.Len)
	f.Add(uint8(1), "3", uint8(1), "0", uint8(3), "", []byte("value"), wid, false)
	f.Add(uint8(1), "1", uint8(0), "", uint8(2), "", []byte{}, wid, false)
	f.Add(uint8(1), "-4", uint8(1), "18446744073709551615", uint8(4), "", []byte{}, wid[:3], false)
	f.Add(uint8(1), "-9223372036854775808", uint8(0), "", uint8(0), "", []byte{}, []byte{}, false)
	f.Add(uint8(1), "9223372036854775808", uint8(0), "", uint8(3), "", []byte("x"), wid, false)
	f.Add(uint8(1), "1.5", uint8(0), "", uint8(3), "", []byte("x"), wid, false)
	f.Add(uint8(1), "2", uint8(1), "-1", uint8(3), "", []byte("x"), wid, false)
	f.Add(uint8(1), "2", uint8(1), "1e3", uint8(3), "", []byte("x"), wid, false)
	f.Add(uint8(1), "2", uint8(0), "", uint8(2), "not binary", []byte{}, wid, false)
	f.Add(uint8(1), "2", uint8(0), "", uint8(0), "", []byte{}, wid, false)
	f.Add(uint8(2), "2", uint8(0), "", uint8(3), "", []byte("x"), wid, false)
	f.Add(uint8(0), "", uint8(0), "", uint8(0), "", []byte{}, []byte{}, true)
	f.Add(uint8(1), "+7", uint8(1), "+7", uint8(3), "", []byte("x"), wid, false)
	f.Add(uint8(1), "0", uint8(5), "", uint8(3), "", []byte("x"), wid, false)
	f.Add(uint8(1), "4", uint8(0), "", uint8(1), "42", []byte{}, wid, false) // a value a delta wrote: a number
	f.Add(uint8(1), "5", uint8(1), "2", uint8(1), "-7", []byte{}, wid, false)
	s := fuzzStore()
	f.Fuzz(func(t *testing.T, vk uint8, ver string, fk uint8, fence string, xk uint8, sval string, bval, wid []byte, empty bool) {
		av := map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: "k"}}
		if empty {
			av = nil
		}
		for name, a := range map[string]types.AttributeValue{
			"version": attr(vk, ver, bval),
			"fence":   attr(fk, fence, bval),
			"value":   attr(xk, sval, bval),
			"writeid": &types.AttributeValueMemberB{Value: wid},
		} {
			if a != nil && !empty {
				av[name] = a
			}
		}
		in := bytes.Clone(bval)
		st, err := s.decode("k", av)

		// The model.
		sv, why := modelNumber(av, "version", func(s string) (int64, error) { return strconv.ParseInt(s, 10, 64) })
		var fv uint64
		if why == "" {
			fv, why = modelNumber(av, "fence", func(s string) (uint64, error) { return strconv.ParseUint(s, 10, 64) })
		}
		var value []byte
		if why == "" && sv > 0 {
			switch v := av["value"].(type) {
			case *types.AttributeValueMemberB:
				value = v.Value
			case *types.AttributeValueMemberN:
				value = []byte(v.Value) // a delta's value: its decimal text
			case *types.AttributeValueMemberS:
				if v.Value != "" {
					why = "value string"
				}
				value = []byte{}
			default:
				why = "value kind"
			}
		}

		if why != "" {
			var ke *cas.KeyError
			if !errors.As(err, &ke) || ke.Op != "get" || ke.Key != "k" {
				t.Fatalf("decode of a foreign item (%s) %v = %v (%T), want a *cas.KeyError", why, av, err, err)
			}
			for _, sentinel := range []error{cas.ErrNotFound, cas.ErrConflict, cas.ErrAmbiguous, cas.ErrFenced} {
				if errors.Is(err, sentinel) {
					t.Fatalf("decode of a foreign item = %v, matches %v", err, sentinel)
				}
			}
			return
		}
		if err != nil {
			t.Fatalf("decode(%v) = %v, want no error", av, err)
		}
		highest := uint64(sv)
		if sv < 0 {
			highest = -uint64(sv) // also right for math.MinInt64
		}
		if st.item.Key != "k" || uint64(st.highest) != highest || st.fence != fv {
			t.Fatalf("decode(%v) = %+v, want highest %d fence %d", av, st, highest, fv)
		}
		if w, ok := av["writeid"].(*types.AttributeValueMemberB); st.hasWID != (ok && len(w.Value) == writeid.Len) ||
			(st.hasWID && !bytes.Equal(st.wid[:], w.Value)) {
			t.Fatalf("decode(%v) write id = %v %x", av, st.hasWID, st.wid)
		}
		if sv <= 0 {
			if st.item.Version != 0 || st.item.Value != nil {
				t.Fatalf("tombstone %v decodes as a live item %+v", av, st.item)
			}
			return
		}
		if st.item.Version != cas.Version(sv) || st.item.Value == nil || !bytes.Equal(st.item.Value, value) {
			t.Fatalf("decode(%v) = %+v", av, st.item)
		}
		if len(st.item.Value) > 0 {
			st.item.Value[0]++
			if !bytes.Equal(bval, in) {
				t.Fatal("the decoded value aliases the item's attribute")
			}
		}
	})
}

// modelNumber is the fuzz model's reading of the number attribute name
// of av: its value (zero when absent), and why the decoder must refuse
// the item ("" when it may accept it).
func modelNumber[N int64 | uint64](av map[string]types.AttributeValue, name string, parse func(string) (N, error)) (N, string) {
	switch v := av[name].(type) {
	case nil:
		return 0, ""
	case *types.AttributeValueMemberN:
		n, err := parse(v.Value)
		if err != nil {
			return n, name
		}
		return n, ""
	default:
		return 0, name + " kind"
	}
}

// FuzzItemRoundTrip checks that every item the store writes (live, with
// valueAV and num; a tombstone, with negNum) decodes to what was written.
func FuzzItemRoundTrip(f *testing.F) {
	f.Add(uint64(1), uint64(0), []byte("v"), false)
	f.Add(uint64(1), uint64(1<<64-1), []byte{}, false)
	f.Add(uint64(math.MaxInt64), uint64(5), []byte{0}, true)
	f.Add(uint64(1<<63), uint64(5), []byte{0}, true)
	s := fuzzStore()
	ids := writeid.NewSource()
	f.Fuzz(func(t *testing.T, ver, fence uint64, value []byte, tombstone bool) {
		// Versions grow by one from 1: no key reaches 2^63 live; a
		// tombstone's negated version may be -2^63 at most.
		ver = max(ver%(1<<63), 1)
		if tombstone && ver == math.MaxInt64 {
			ver = 1 << 63
		}
		id := ids.Next()
		av := map[string]types.AttributeValue{
			"pk":      str("k"),
			"version": num(ver),
			"fence":   num(fence),
			"value":   valueAV(value),
			"writeid": bin(id[:]),
		}
		if tombstone {
			av["version"] = negNum(ver)
			av["value"] = &types.AttributeValueMemberNULL{Value: true}
		}
		st, err := s.decode("k", av)
		if err != nil {
			t.Fatalf("decode of a written item %v = %v", av, err)
		}
		if uint64(st.highest) != ver || st.fence != fence || !st.hasWID || st.wid != id {
			t.Fatalf("decode(%v) = %+v", av, st)
		}
		want := cas.Item{Key: "k", Version: cas.Version(ver), Value: value}
		if tombstone {
			want = cas.Item{Key: "k"}
		}
		if st.item.Key != want.Key || st.item.Version != want.Version || !bytes.Equal(st.item.Value, want.Value) ||
			(!tombstone && st.item.Value == nil) {
			t.Fatalf("decode(%v) = %+v, want %+v", av, st.item, want)
		}
	})
}

type fuzzRow struct {
	PK      string   `dynamodbav:"pk"`
	N       int64    `dynamodbav:"n"`
	Tags    []string `dynamodbav:"tags"`
	Version uint64   `dynamodbav:"version"`
}

// FuzzTableDecode checks Table.decodeStored on items of any shape: it
// never panics; an absent or negative version (a tombstone) is not found;
// otherwise it refuses with a decode *cas.CodecError for the key, or
// returns the version attribute as the version, also in the row's version
// field, only when it is a positive decimal integer.
func FuzzTableDecode(f *testing.F) {
	f.Add(uint8(1), "3", uint8(1), "-5")
	f.Add(uint8(0), "", uint8(0), "")
	f.Add(uint8(1), "-1", uint8(1), "1")
	f.Add(uint8(1), "18446744073709551616", uint8(1), "1")
	f.Add(uint8(2), "3", uint8(1), "1")
	f.Add(uint8(1), "3", uint8(1), "9223372036854775808")
	f.Add(uint8(1), "3", uint8(2), "1")
	f.Add(uint8(1), "3", uint8(6), "x")
	f.Add(uint8(1), "1e2", uint8(1), "1.5")
	tb := &Table[fuzzRow]{cfg: TableConfig{Table: "t", PartitionKey: "pk", VersionAttribute: "version"}}
	f.Fuzz(func(t *testing.T, vk uint8, ver string, nk uint8, n string) {
		av := map[string]types.AttributeValue{"pk": str("k")}
		if a := attr(vk, ver, []byte(ver)); a != nil {
			av["version"] = a
		}
		if a := attr(nk, n, []byte(n)); a != nil {
			av["n"] = a
		}
		row, v, err := tb.decodeStored("k", av)
		if errors.Is(err, cas.ErrNotFound) {
			raw, serr := signedAttr(av, "version")
			if serr != nil || raw > 0 {
				t.Fatalf("decodeStored(%v): not found, but the version is %d (%v)", av, raw, serr)
			}
			return
		}
		if err != nil {
			var ce *cas.CodecError
			if !errors.As(err, &ce) || !ce.Decode || ce.Key != "k" {
				t.Fatalf("decodeStored(%v) = %v (%T), not a decode *cas.CodecError", av, err, err)
			}
			return
		}
		a, ok := av["version"].(*types.AttributeValueMemberN)
		if !ok {
			t.Fatalf("decodeStored(%v) accepted a version of type %T", av, av["version"])
		}
		want, perr := strconv.ParseUint(a.Value, 10, 64)
		if perr != nil || want == 0 {
			t.Fatalf("decodeStored(%v) accepted version %q", av, a.Value)
		}
		if uint64(v) != want || row.Version != want || row.PK != "k" {
			t.Fatalf("decodeStored(%v) = %+v, v%d, want v%d", av, row, v, want)
		}
	})
}

// FuzzWritten checks how a create learns its new version from the old
// attributes DynamoDB returns: one above the tombstone's (negated) version,
// or 1; any other answer is a *cas.KeyError, never a bogus version.
func FuzzWritten(f *testing.F) {
	f.Add(uint8(0), "")
	f.Add(uint8(1), "-7")
	f.Add(uint8(1), "0")
	f.Add(uint8(1), "5")
	f.Add(uint8(1), "-9223372036854775808")
	f.Add(uint8(2), "-1")
	s := fuzzStore()
	f.Fuzz(func(t *testing.T, kind uint8, old string) {
		out := &dynamodb.UpdateItemOutput{Attributes: map[string]types.AttributeValue{}}
		if a := attr(kind, old, []byte(old)); a != nil {
			out.Attributes["version"] = a
		}
		v, err := s.written(&write{op: "compare-and-swap", key: "k"}, out)
		var prev int64
		ok := true
		switch a := out.Attributes["version"].(type) {
		case nil:
		case *types.AttributeValueMemberN:
			n, perr := strconv.ParseInt(a.Value, 10, 64)
			prev, ok = n, perr == nil && n <= 0
		default:
			ok = false
		}
		if !ok {
			var ke *cas.KeyError
			if !errors.As(err, &ke) || ke.Key != "k" || v != 0 {
				t.Fatalf("written(%v) = %d, %v", out.Attributes, v, err)
			}
			return
		}
		if want := uint64(-prev) + 1; err != nil || uint64(v) != want || v == 0 {
			t.Fatalf("written(%v) = %d, %v, want %d", out.Attributes, v, err, want)
		}
	})
}
