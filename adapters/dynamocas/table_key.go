package dynamocas

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/occkit/occkit/cas"
)

// keyAV marshals key into the table's key attributes.
func (t *Table[T]) keyAV(op string, key Key) (map[string]types.AttributeValue, error) {
	pk, err := attributevalue.Marshal(key.Partition)
	if err == nil && key.Partition != nil {
		err = emptyKeyPart(pk)
	}
	if err != nil || key.Partition == nil {
		return nil, &cas.KeyError{Op: op, Key: keyString(key), Err: fmt.Errorf("%w: partition key: %v", cas.ErrInvalidKey, err)}
	}
	m := map[string]types.AttributeValue{t.cfg.PartitionKey: pk}
	if t.cfg.SortKey != "" {
		sk, err := attributevalue.Marshal(key.Sort)
		if err == nil && key.Sort != nil {
			err = emptyKeyPart(sk)
		}
		if err != nil || key.Sort == nil {
			return nil, &cas.KeyError{Op: op, Key: keyString(key), Err: fmt.Errorf("%w: sort key: %v", cas.ErrInvalidKey, err)}
		}
		m[t.cfg.SortKey] = sk
	}
	return m, nil
}

// emptyKeyPart refuses an empty string or binary as a key attribute, which
// DynamoDB answers with a ValidationException: refused here, it is a
// cas.ErrInvalidKey like every other bad key, before anything is sent.
func emptyKeyPart(av types.AttributeValue) error {
	switch v := av.(type) {
	case *types.AttributeValueMemberS:
		if v.Value == "" {
			return errors.New("DynamoDB takes no empty string as a key attribute")
		}
	case *types.AttributeValueMemberB:
		if len(v.Value) == 0 {
			return errors.New("DynamoDB takes no empty binary value as a key attribute")
		}
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

// keyOf returns the key attributes of a marshalled item and its Key.
func (t *Table[T]) keyOf(op string, av map[string]types.AttributeValue) (map[string]types.AttributeValue, string, error) {
	m := map[string]types.AttributeValue{}
	var parts []string
	for _, name := range []string{t.cfg.PartitionKey, t.cfg.SortKey} {
		if name == "" {
			continue
		}
		v, ok := av[name]
		if !ok {
			return nil, "", &cas.KeyError{Op: op, Key: "?", Err: fmt.Errorf("%w: item has no key attribute %q", cas.ErrInvalidKey, name)}
		}
		m[name] = v
		parts = append(parts, avString(v))
	}
	ks := parts[0]
	if len(parts) == 2 {
		ks += "/" + parts[1]
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
