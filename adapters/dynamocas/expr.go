package dynamocas

import (
	"strings"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/occkit/occkit/internal/writeid"
)

// Every attribute name goes into expressions through a placeholder, so
// that any name works, reserved words ("value", "size", "name", ...) and
// names with dots or spaces included.
const (
	phKey     = "#k"
	phVersion = "#v"
	phValue   = "#d"
	phFence   = "#f"
	phWriteID = "#w"
	phHold    = "#h"
	phUntil   = "#u"
)

// expr collects the names and values of one request's expressions.
// DynamoDB refuses placeholders that no expression uses, so each request
// declares only those it needs.
type expr struct {
	names  map[string]string
	values map[string]types.AttributeValue
}

func (s *Store) newExpr() *expr {
	return &expr{names: map[string]string{}, values: map[string]types.AttributeValue{}}
}

// name declares the placeholder ph (one of the ph* constants) and returns it.
func (e *expr) name(s *Store, ph string) string {
	switch ph {
	case phKey:
		e.names[ph] = s.names.key
	case phVersion:
		e.names[ph] = s.names.version
	case phValue:
		e.names[ph] = s.names.value
	case phFence:
		e.names[ph] = s.names.fence
	case phWriteID:
		e.names[ph] = s.names.writeID
	case phHold:
		e.names[ph] = s.names.hold
	case phUntil:
		e.names[ph] = s.names.holdUntil
	}
	return ph
}

// value declares the value placeholder ph with v and returns it.
func (e *expr) value(ph string, v types.AttributeValue) string {
	e.values[ph] = v
	return ph
}

func (e *expr) valueMap() map[string]types.AttributeValue {
	if len(e.values) == 0 {
		return nil
	}
	return e.values
}

// absentCond is the condition "the key does not exist": no item, or a
// tombstone (whose version attribute is the deleted version, negated).
func (s *Store) absentCond(e *expr) string {
	v := e.name(s, phVersion)
	return "(attribute_not_exists(" + v + ") OR " + v + " < " + e.value(":zero", num(0)) + ")"
}

// versionCond is the condition "the key is at version expected": absent
// for 0, otherwise live at that version (a tombstone's negative version
// never equals it).
func (s *Store) versionCond(e *expr, expected uint64) string {
	if expected == 0 {
		return s.absentCond(e)
	}
	return e.name(s, phVersion) + " = " + e.value(":e", num(expected))
}

// fenceCond is the condition "token is at least the largest token that
// wrote the key".
func (s *Store) fenceCond(e *expr, token uint64) string {
	f := e.name(s, phFence)
	return "(attribute_not_exists(" + f + ") OR " + f + " <= " + e.value(":t", num(token)) + ")"
}

// baseCond is the condition of a create inside a transaction, where no
// value can be returned and the new version must be known in advance: the
// key is a tombstone of version base, or (base 0) never existed.
func (s *Store) baseCond(e *expr, base uint64) string {
	if base == 0 {
		return "attribute_not_exists(" + e.name(s, phVersion) + ")"
	}
	return e.name(s, phVersion) + " = " + e.value(":b", negNum(base))
}

// putUpdate is the update expression of a put writing value with write id
// id. newVersion 0 means "one above the version a tombstone kept, or 1":
// 1 - if_not_exists(version, 0), the tombstone's version being negative;
// single-key creates use it and read the old version back with
// ReturnValues UPDATED_OLD.
func (s *Store) putUpdate(e *expr, value []byte, id writeid.ID, newVersion uint64, fenced bool, token uint64) string {
	v := e.name(s, phVersion)
	var b strings.Builder
	b.WriteString("SET ")
	b.WriteString(e.name(s, phValue) + " = " + e.value(":d", valueAV(value)))
	if newVersion == 0 {
		b.WriteString(", " + v + " = " + e.value(":one", num(1)) + " - if_not_exists(" + v + ", " + e.value(":zero", num(0)) + ")")
	} else {
		b.WriteString(", " + v + " = " + e.value(":nv", num(newVersion)))
	}
	b.WriteString(", " + e.name(s, phWriteID) + " = " + e.value(":w", bin(id[:])))
	if fenced {
		b.WriteString(", " + e.name(s, phFence) + " = " + e.value(":t", num(token)))
	}
	return b.String()
}

// deleteUpdate turns the item of version expected into a tombstone: the
// version attribute becomes -expected (so that the next create knows the
// version to go above, and no version condition matches it), the value
// becomes NULL, the fence attribute stays, the write id records the
// delete. (NULL rather than REMOVE: minidyn's UpdateItem ignores REMOVE.)
func (s *Store) deleteUpdate(e *expr, id writeid.ID, expected uint64) string {
	return "SET " + e.name(s, phVersion) + " = " + e.value(":neg", negNum(expected)) +
		", " + e.name(s, phValue) + " = " + e.value(":tomb", &types.AttributeValueMemberNULL{Value: true}) +
		", " + e.name(s, phWriteID) + " = " + e.value(":w", bin(id[:]))
}

// unheldCond is the condition "no exclusive update holds the key": no
// hold, or one that ended before :now (the writer's clock, in Unix
// milliseconds, set by sendUnheld before each send).
func (s *Store) unheldCond(e *expr) string {
	u := e.name(s, phUntil)
	return "(attribute_not_exists(" + u + ") OR " + u + " < " + e.value(":now", nowMillis()) + ")"
}

// holdCond is the condition "the key is held with token hold".
func (s *Store) holdCond(e *expr, hold []byte) string {
	return e.name(s, phHold) + " = " + e.value(":h", bin(hold))
}

// releaseUpdate is the SET clause that ends a hold: its end moved to 0.
// (SET rather than REMOVE, which minidyn ignores.)
func (s *Store) releaseUpdate(e *expr) string {
	return e.name(s, phUntil) + " = " + e.value(":released", num(0))
}
