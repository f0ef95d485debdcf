package dynamocas

import (
	"errors"
	"fmt"
	"strconv"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/occkit/occkit/cas"
)

// keyAV marshals key into the table's key attributes. A key DynamoDB
// would refuse, or would take for another key, is refused here with
// cas.ErrInvalidKey before anything is sent: a missing value, a value
// keyPart refuses, and a Sort value on a table without a sort key, which
// DynamoDB would never see, so that the call would act on the item of
// the partition value alone.
func (t *Table[T]) keyAV(op string, key Key) (map[string]types.AttributeValue, error) {
	invalid := func(part string, err error) error {
		return &cas.KeyError{Op: op, Key: keyString(key), Err: fmt.Errorf("%w: %s key: %v", cas.ErrInvalidKey, part, err)}
	}
	pk, err := keyValueAV(key.Partition, MaxPartitionKeyBytes)
	if err != nil {
		return nil, invalid("partition", err)
	}
	m := map[string]types.AttributeValue{t.cfg.PartitionKey: pk}
	switch {
	case t.cfg.SortKey != "":
		sk, err := keyValueAV(key.Sort, MaxSortKeyBytes)
		if err != nil {
			return nil, invalid("sort", err)
		}
		m[t.cfg.SortKey] = sk
	case key.Sort != nil:
		return nil, invalid("sort", errors.New("the table has no sort key"))
	}
	return m, nil
}

// keyValueAV marshals one part of a Key (nil: missing) and checks it with
// keyPart against limit, DynamoDB's longest value for that part.
func keyValueAV(v any, limit int) (types.AttributeValue, error) {
	if v == nil {
		return nil, errors.New("no value")
	}
	av, err := attributevalue.Marshal(v)
	if err != nil {
		return nil, err
	}
	return av, keyPart(av, limit)
}

// keyPart refuses a key attribute value that DynamoDB refuses with a
// ValidationException (an empty string or binary value, one over limit
// bytes) or would store under another key: a string that is not valid
// UTF-8 reaches the server with its invalid bytes replaced by U+FFFD (the
// SDK's JSON encoding does that), so "a\xff" and "a\xfe" would name one
// item, stored under neither. Refused here, each is a cas.ErrInvalidKey
// like every other bad key.
func keyPart(av types.AttributeValue, limit int) error {
	var n int
	switch v := av.(type) {
	case *types.AttributeValueMemberS:
		if v.Value == "" {
			return errors.New("DynamoDB takes no empty string as a key attribute")
		}
		if !utf8.ValidString(v.Value) {
			return fmt.Errorf("%q is not valid UTF-8, which DynamoDB's strings are", truncate(v.Value, 64))
		}
		n = len(v.Value)
	case *types.AttributeValueMemberB:
		if len(v.Value) == 0 {
			return errors.New("DynamoDB takes no empty binary value as a key attribute")
		}
		n = len(v.Value)
	}
	if n > limit {
		return fmt.Errorf("%d bytes, over DynamoDB's limit of %d bytes for this key attribute", n, limit)
	}
	return nil
}

// keyText is k as an unambiguous text, distinct for distinct keys
// (partition "a/b" and sort "c" is not partition "a" and sort "b/c"): what
// occ's turns and caches key a row by, and what orders and matches keys.
func keyText(k Key) string {
	if k.Sort == nil {
		return keyString(k)
	}
	return strconv.Quote(fmt.Sprint(k.Partition)) + "/" + strconv.Quote(fmt.Sprint(k.Sort))
}

// keyString names a key in errors: the partition value, then "/" and the
// sort value if there is one.
func keyString(k Key) string {
	if k.Sort == nil {
		return fmt.Sprint(k.Partition)
	}
	return fmt.Sprintf("%v/%v", k.Partition, k.Sort)
}

// keyOf returns the key attributes of a marshalled item and its Key. A
// key attribute value that keyPart refuses is a cas.ErrInvalidKey, as in
// keyAV: Insert and Update check the item's key as Get checks a Key.
func (t *Table[T]) keyOf(op string, av map[string]types.AttributeValue) (map[string]types.AttributeValue, string, error) {
	m := map[string]types.AttributeValue{}
	var parts []string
	var bad error
	for _, attr := range []struct {
		name  string
		limit int
	}{{t.cfg.PartitionKey, MaxPartitionKeyBytes}, {t.cfg.SortKey, MaxSortKeyBytes}} {
		if attr.name == "" {
			continue
		}
		v, ok := av[attr.name]
		if !ok {
			return nil, "", &cas.KeyError{Op: op, Key: "?", Err: fmt.Errorf("%w: item has no key attribute %q", cas.ErrInvalidKey, attr.name)}
		}
		if err := keyPart(v, attr.limit); err != nil && bad == nil {
			bad = fmt.Errorf("%w: key attribute %q: %v", cas.ErrInvalidKey, attr.name, err)
		}
		m[attr.name] = v
		parts = append(parts, avString(v))
	}
	ks := parts[0]
	if len(parts) == 2 {
		ks += "/" + parts[1]
	}
	if bad != nil {
		return nil, ks, &cas.KeyError{Op: op, Key: ks, Err: bad}
	}
	return m, ks, nil
}

func avString(v types.AttributeValue) string {
	switch v := v.(type) {
	case *types.AttributeValueMemberS:
		return v.Value
	case *types.AttributeValueMemberN:
		return v.Value
	case *types.AttributeValueMemberB:
		return fmt.Sprintf("%x", v.Value)
	}
	return fmt.Sprintf("%T", v)
}
