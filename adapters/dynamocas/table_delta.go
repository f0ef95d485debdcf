package dynamocas

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/internal/ctxwait"
	"github.com/occkit/occkit/internal/rowupdate"
)

// maxUnexplainedRefusals is how many refusals whose reason the item, read
// back, does not show Table.Add takes before it returns the last one:
// enough for an item that changed type and back meanwhile, few enough
// that a refusal of the request itself ends at once.
const maxUnexplainedRefusals = 10

// Add adds n to the number attribute column of the item with key, if the
// result lies within b, and returns the item as stored: a bounded delta
// of one attribute (the stock of an item), one conditional UpdateItem,
//
//	SET stock = stock + :n, version = version + 1
//	IF version > 0 AND stock BETWEEN :lo AND :hi AND <not held>
//
// so concurrent deltas of one item never conflict. The item gets a new
// version, so a concurrent Modify or Update of it conflicts as usual. A
// result outside b fails with a *cas.BoundError carrying the current
// value, an attribute that is not a number with cas.ErrNotInteger;
// nothing is written. A missing item fails with an error matching
// cas.ErrNotFound: Add does not insert. A result whose longer number
// would take the item over DynamoDB's 400 KB fails with an error
// matching cas.ErrTooLarge. column is the attribute's name (a field's
// dynamodbav tag); it may not be a key or the version attribute, and its
// field must be a signed integer. While Modify's exclusive hold holds the
// item, Add waits for it. A lost answer is a *cas.AmbiguousError (an
// application's item has no write id).
func (t *Table[T]) Add(ctx context.Context, key Key, column string, n int64, b cas.Bounds) (T, error) {
	var zero T
	ks := keyString(key)
	lo, hi, err := rowupdate.DeltaRange(ctx, ks, n, b)
	if err != nil {
		return zero, err
	}
	if err := t.deltaAttribute(column); err != nil {
		return zero, err
	}
	kav, err := t.keyAV("add", key)
	if err != nil {
		return zero, err
	}
	in := &dynamodb.UpdateItemInput{
		TableName:           aws.String(t.cfg.Table),
		Key:                 kav,
		UpdateExpression:    aws.String("SET #c = #c + :n, #ver = #ver + :one"),
		ConditionExpression: aws.String("#ver > :zero AND #c BETWEEN :lo AND :hi AND (attribute_not_exists(#u) OR #u < :now)"),
		ExpressionAttributeNames: map[string]string{
			"#c": column, "#ver": t.cfg.VersionAttribute, "#u": t.cfg.HoldUntilAttribute,
		},
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":n": inum(n), ":one": num(1), ":zero": num(0), ":lo": inum(lo), ":hi": inum(hi),
		},
		ReturnValues:                        types.ReturnValueAllNew,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	}
	var p ctxwait.Poll
	unexplainedRefusals := 0
	for {
		in.ExpressionAttributeValues[":now"] = nowMillis()
		out, err := t.cli.UpdateItem(ctx, in, noSDKRetry)
		if err == nil {
			v, _, err := t.decodeStored(ks, out.Attributes)
			return v, err
		}
		var ccf *types.ConditionalCheckFailedException
		var old map[string]types.AttributeValue
		var unexplained error // the refusal, when its reason is unknown
		switch {
		case errors.As(err, &ccf):
			old = ccf.Item
		case definite(err) && tooLarge(err):
			// The sum would make the item larger than DynamoDB's item
			// limit: the item as read passes the bounds, so reading it
			// tells nothing, and sending the delta again fails again.
			return zero, &cas.KeyError{Op: "add", Key: ks, Err: fmt.Errorf("%w: %w", cas.ErrTooLarge, err)}
		case definite(err) && (unread(err) || validation(err)):
			// Refused, reason unknown (an answer cut before its body;
			// minidyn's ValidationException when BETWEEN meets a value
			// of another type): the item tells.
			unexplained = err
		case definite(err):
			return zero, &cas.KeyError{Op: "add", Key: ks, Err: fmt.Errorf("dynamocas: %w", err)}
		default:
			return zero, &cas.AmbiguousError{Op: "add", Key: ks, Err: err}
		}
		if len(old) == 0 {
			if old, err = t.read(ctx, kav); err != nil {
				return zero, &readError{key: ks, err: err}
			}
		}
		cur, _, derr := t.decodeStored(ks, old)
		if derr != nil {
			if errors.Is(derr, cas.ErrNotFound) {
				derr = &cas.KeyError{Op: "add", Key: ks, Err: cas.ErrNotFound}
			}
			return zero, derr
		}
		if heldAt(old, t.cfg.HoldUntilAttribute) {
			if err := p.Wait(ctx); err != nil {
				return zero, err
			}
			continue
		}
		nv, ok := old[column].(*types.AttributeValueMemberN)
		if !ok {
			return cur, &cas.KeyError{Op: "add", Key: ks, Err: fmt.Errorf("%w: attribute %s is %T", cas.ErrNotInteger, column, old[column])}
		}
		v, perr := strconv.ParseInt(nv.Value, 10, 64)
		if perr != nil {
			return cur, &cas.KeyError{Op: "add", Key: ks, Err: fmt.Errorf("%w: attribute %s is %s", cas.ErrNotInteger, column, nv.Value)}
		}
		if b.Allows(v, n) {
			// Changed since the refusal: add again. After a refusal the
			// item does not explain, a refusal that persists (a
			// ValidationException of the request itself) would send it
			// again forever without waiting: give up after a few.
			if unexplained != nil {
				if unexplainedRefusals++; unexplainedRefusals >= maxUnexplainedRefusals {
					return zero, &cas.KeyError{Op: "add", Key: ks, Err: fmt.Errorf("dynamocas: %w", unexplained)}
				}
			}
			continue
		}
		return cur, &cas.BoundError{Key: ks, Add: n, Bounds: b, Current: v, HasCurrent: true}
	}
}

// deltaAttribute checks that a delta may change attribute name: T maps a
// signed integer field to it, and it is not a key or the version.
func (t *Table[T]) deltaAttribute(name string) error {
	switch name {
	case t.cfg.PartitionKey, t.cfg.SortKey, t.cfg.VersionAttribute, t.cfg.HoldAttribute, t.cfg.HoldUntilAttribute:
		return fmt.Errorf("dynamocas: Add: attribute %q of %s is a key, the version or a hold attribute", name, t.cfg.Table)
	}
	rt := reflect.TypeFor[T]()
	for i := range rt.NumField() {
		f := rt.Field(i)
		attr := f.Name
		if tag, ok := f.Tag.Lookup("dynamodbav"); ok {
			if n, _, _ := strings.Cut(tag, ","); n != "" {
				attr = n
			}
		}
		if attr != name || !f.IsExported() {
			continue
		}
		if err := rowupdate.DeltaField(rt, f.Index); err != nil {
			return fmt.Errorf("dynamocas: Add: attribute %q of %s %w", name, t.cfg.Table, err)
		}
		return nil
	}
	return fmt.Errorf("dynamocas: Add: %v has no field for attribute %q of %s", rt, name, t.cfg.Table)
}
