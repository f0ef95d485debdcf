package dynamocas

import (
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// itemSize is an item's size as DynamoDB counts it against 400 KB:
// attribute names plus values, numbers at one byte per two digits plus
// one, documents with 3 bytes of overhead and 1 per element.
func itemSize(av map[string]types.AttributeValue) int {
	n := 0
	for name, v := range av {
		n += len(name) + avSize(v)
	}
	return n
}

func avSize(v types.AttributeValue) int {
	switch v := v.(type) {
	case *types.AttributeValueMemberS:
		return len(v.Value)
	case *types.AttributeValueMemberN:
		return len(v.Value)/2 + 2
	case *types.AttributeValueMemberB:
		return len(v.Value)
	case *types.AttributeValueMemberBOOL, *types.AttributeValueMemberNULL:
		return 1
	case *types.AttributeValueMemberSS:
		n := 0
		for _, s := range v.Value {
			n += len(s)
		}
		return n
	case *types.AttributeValueMemberNS:
		n := 0
		for _, s := range v.Value {
			n += len(s)/2 + 2
		}
		return n
	case *types.AttributeValueMemberBS:
		n := 0
		for _, b := range v.Value {
			n += len(b)
		}
		return n
	case *types.AttributeValueMemberL:
		n := 3
		for _, e := range v.Value {
			n += 1 + avSize(e)
		}
		return n
	case *types.AttributeValueMemberM:
		n := 3
		for k, e := range v.Value {
			n += 1 + len(k) + avSize(e)
		}
		return n
	}
	return 0
}
