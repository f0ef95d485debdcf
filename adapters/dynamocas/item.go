package dynamocas

import (
	"fmt"
	"strconv"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/internal/writeid"
)

// state is what the store knows of a key from one item: its item (Version
// 0: absent, also for a tombstone), the largest version it ever had (a
// tombstone's version attribute is that version negated), the largest
// fencing token that wrote it and the id of the last write.
type state struct {
	item    cas.Item
	highest cas.Version // the version attribute, kept by tombstones
	fence   uint64
	hasWID  bool
	wid     writeid.ID
	// holdUntil is when an exclusive update's hold on the key ends, in
	// Unix milliseconds (0: none).
	holdUntil int64
}

// decode reads an item as the store wrote it. A nil or empty item is an
// absent key that never existed.
func (s *Store) decode(key string, av map[string]types.AttributeValue) (state, error) {
	st := state{item: cas.Item{Key: key}}
	if len(av) == 0 {
		return st, nil
	}
	ver, err := signedAttr(av, s.names.version)
	if err != nil {
		return st, s.foreign(key, err)
	}
	live := ver > 0
	if ver < 0 {
		ver = -ver
	}
	st.highest = cas.Version(ver)
	fence, err := numberAttr(av, s.names.fence)
	if err != nil {
		return st, s.foreign(key, err)
	}
	st.fence = uint64(fence)
	until, err := numberAttr(av, s.names.holdUntil)
	if err != nil {
		return st, s.foreign(key, err)
	}
	st.holdUntil = int64(until)
	if w, ok := av[s.names.writeID].(*types.AttributeValueMemberB); ok && len(w.Value) == writeid.Len {
		st.hasWID = true
		copy(st.wid[:], w.Value)
	}
	if !live {
		return st, nil // a tombstone: absent, but its version stays
	}
	var value []byte
	switch v := av[s.names.value].(type) {
	case *types.AttributeValueMemberB:
		value = append([]byte{}, v.Value...)
	case *types.AttributeValueMemberN:
		// Written by a delta (Add): its decimal text, as JSON[int64]
		// writes it.
		value = []byte(v.Value)
	case *types.AttributeValueMemberS:
		if v.Value != "" {
			return st, s.foreign(key, fmt.Errorf("value attribute %q is a non-empty string", s.names.value))
		}
		value = []byte{}
	default:
		return st, s.foreign(key, fmt.Errorf("value attribute %q is %T, not binary", s.names.value, v))
	}
	st.item.Version, st.item.Value = st.highest, value
	return st, nil
}

func (s *Store) foreign(key string, err error) error {
	return &cas.KeyError{Op: "get", Key: key, Err: fmt.Errorf("dynamocas: item in table %q was not written by dynamocas: %w", s.table, err)}
}

// numberAttr reads a non-negative integer attribute; absent is 0.
func numberAttr(av map[string]types.AttributeValue, name string) (cas.Version, error) {
	switch v := av[name].(type) {
	case nil:
		return 0, nil
	case *types.AttributeValueMemberN:
		n, err := strconv.ParseUint(v.Value, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("attribute %q: %w", name, err)
		}
		return cas.Version(n), nil
	default:
		return 0, fmt.Errorf("attribute %q is %T, not a number", name, v)
	}
}

// signedAttr reads the version attribute: positive for a live key,
// negative for a tombstone, 0 when absent.
func signedAttr(av map[string]types.AttributeValue, name string) (int64, error) {
	switch v := av[name].(type) {
	case nil:
		return 0, nil
	case *types.AttributeValueMemberN:
		n, err := strconv.ParseInt(v.Value, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("attribute %q: %w", name, err)
		}
		return n, nil
	default:
		return 0, fmt.Errorf("attribute %q is %T, not a number", name, v)
	}
}

func negNum(n uint64) types.AttributeValue {
	return &types.AttributeValueMemberN{Value: "-" + strconv.FormatUint(n, 10)}
}

func num(n uint64) types.AttributeValue {
	return &types.AttributeValueMemberN{Value: strconv.FormatUint(n, 10)}
}

func str(s string) types.AttributeValue { return &types.AttributeValueMemberS{Value: s} }

func bin(b []byte) types.AttributeValue { return &types.AttributeValueMemberB{Value: b} }

// valueAV is the value attribute of value: binary, or an empty string for
// an empty value (DynamoDB accepts empty binary attributes, but minidyn
// refuses them).
func valueAV(value []byte) types.AttributeValue {
	if len(value) == 0 {
		return str("")
	}
	return bin(value)
}
