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
		return numberSize(v.Value)
	case *types.AttributeValueMemberB:
		return len(v.Value)
	case *types.AttributeValueMemberBOOL, *types.AttributeValueMemberNULL:
		return 1
	case *types.AttributeValueMemberSS:
		return sumSizes(v.Value, func(s string) int { return len(s) })
	case *types.AttributeValueMemberNS:
		return sumSizes(v.Value, numberSize)
	case *types.AttributeValueMemberBS:
		return sumSizes(v.Value, func(b []byte) int { return len(b) })
	case *types.AttributeValueMemberL:
		return 3 + sumSizes(v.Value, func(e types.AttributeValue) int { return 1 + avSize(e) })
	case *types.AttributeValueMemberM:
		n := 3
		for k, e := range v.Value {
			n += 1 + len(k) + avSize(e)
		}
		return n
	}
	return 0
}

// numberSize is the size of the number whose decimal text is s.
func numberSize(s string) int { return len(s)/2 + 2 }

// sumSizes is the sum of size over the elements of a set or list.
func sumSizes[E any](es []E, size func(E) int) int {
	n := 0
	for _, e := range es {
		n += size(e)
	}
	return n
}
