package dynamocas

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"strconv"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/occkit/occkit/cas"
)

// tableWrite is a prepared conditional write of one item: a PutItem (or
// a transaction's Put) of item, conditional on the item's version
// attribute being base.
type tableWrite struct {
	op       string
	ks       string
	kav      map[string]types.AttributeValue
	expected cas.Version // the version the caller expected (0: absent)
	// base is the version attribute the condition requires: 0 for an item
	// that never existed, -b for a tombstone of version b, v for a live
	// item of version v; anyAbsent makes the condition accept both kinds
	// of absence (a check of absence).
	base      int64
	anyAbsent bool
	version   cas.Version // the version it writes (0 for a delete or a check)
	item      map[string]types.AttributeValue
	pkAttr    string
	verAttr   string
	untilAttr string
	// unheld adds "no exclusive hold lasts" to the condition (a plain
	// write: refused by a hold, it waits and is sent again); hold, set
	// for the write of the exclusive update holding the item, adds "the
	// hold is this token's" (the write, replacing the item, ends it).
	unheld   bool
	hold     []byte
	holdAttr string
}

// condition returns w's condition expression, names and values. Names go
// through placeholders, so reserved words are fine.
//
// An item that only a hold made (an exclusive update of an absent key
// that wrote nothing: its key attributes and hold attributes, no
// version) counts as one that never existed.
func (w *tableWrite) condition() (string, map[string]string, map[string]types.AttributeValue) {
	names := map[string]string{"#ver": w.verAttr}
	values := map[string]types.AttributeValue{}
	var cond string
	switch {
	case w.anyAbsent:
		cond = "attribute_not_exists(#pk) OR (attribute_not_exists(#ver) AND attribute_exists(#u)) OR #ver < :zero"
		names["#pk"], names["#u"], values[":zero"] = w.pkAttr, w.untilAttr, num(0)
	case w.base == 0:
		cond = "attribute_not_exists(#pk) OR (attribute_not_exists(#ver) AND attribute_exists(#u))"
		names["#pk"], names["#u"] = w.pkAttr, w.untilAttr
	default:
		cond = "#ver = :expected"
		values[":expected"] = &types.AttributeValueMemberN{Value: strconv.FormatInt(w.base, 10)}
	}
	switch {
	case w.hold != nil:
		cond = "(" + cond + ") AND #h = :h"
		names["#h"], values[":h"] = w.holdAttr, bin(w.hold)
	case w.unheld:
		cond = "(" + cond + ") AND (attribute_not_exists(#u) OR #u < :now)"
		names["#u"], values[":now"] = w.untilAttr, nowMillis()
	}
	if len(values) == 0 {
		values = nil
	}
	return cond, names, values
}

// onTombstone makes w, a create refused by a tombstone of version b, a
// create over that tombstone: conditional on it, at version b + 1.
func (w *tableWrite) onTombstone(b cas.Version) {
	w.base, w.version = -int64(b), b+1
	w.item[w.verAttr] = num(uint64(w.version))
}

// prepInsert marshals item for a create at version 1 (over a tombstone,
// onTombstone moves it above).
func (t *Table[T]) prepInsert(op string, item T) (*tableWrite, error) {
	w, err := t.marshal(op, item)
	if err != nil {
		return nil, err
	}
	w.version = 1
	w.item[t.cfg.VersionAttribute] = num(1)
	return w, t.checkSize(w)
}

// prepUpdate marshals item for a replace of the version its version field
// holds, at that version + 1.
func (t *Table[T]) prepUpdate(op string, item T) (*tableWrite, error) {
	w, err := t.marshal(op, item)
	if err != nil {
		return nil, err
	}
	v, err := signedAttr(w.item, t.cfg.VersionAttribute)
	if err != nil || v <= 0 {
		return nil, &cas.KeyError{Op: op, Key: w.ks, Err: fmt.Errorf("%w: the item's version field is %d (%v): Update writes an item read before; use Insert for a new one", cas.ErrInvalidVersion, v, err)}
	}
	w.expected, w.base, w.version = cas.Version(v), v, cas.Version(v)+1
	w.item[t.cfg.VersionAttribute] = num(uint64(w.version))
	return w, t.checkSize(w)
}

func (t *Table[T]) marshal(op string, item T) (*tableWrite, error) {
	av, err := attributevalue.MarshalMapWithOptions(item, t.encOpts...)
	if err != nil {
		return nil, &cas.CodecError{Err: err}
	}
	kav, ks, err := t.keyOf(op, av)
	if err != nil {
		return nil, err
	}
	return &tableWrite{op: op, ks: ks, kav: kav, item: av, pkAttr: t.cfg.PartitionKey, verAttr: t.cfg.VersionAttribute,
		untilAttr: t.cfg.HoldUntilAttribute, holdAttr: t.cfg.HoldAttribute, unheld: true}, nil
}

func (t *Table[T]) checkSize(w *tableWrite) error {
	if size := itemSize(w.item); size > MaxItemBytes {
		return &cas.KeyError{Op: w.op, Key: w.ks, Err: fmt.Errorf("%w: item is %d bytes, limit %d", cas.ErrTooLarge, size, MaxItemBytes)}
	}
	return nil
}

// prepDelete prepares the delete of the item with key at version expected
// (not 0): the item is replaced by its tombstone, its key attributes and
// the version attribute holding -expected, so that the key's next version
// is above every version it had.
func (t *Table[T]) prepDelete(key Key, expected cas.Version) (*tableWrite, error) {
	kav, err := t.keyAV("delete", key)
	if err != nil {
		return nil, err
	}
	if expected == 0 || expected > math.MaxInt64 {
		return nil, &cas.KeyError{Op: "delete", Key: keyString(key), Err: fmt.Errorf("%w: expected version %d cannot name a stored item", cas.ErrInvalidVersion, expected)}
	}
	item := maps.Clone(kav)
	item[t.cfg.VersionAttribute] = negNum(uint64(expected))
	return &tableWrite{op: "delete", ks: keyString(key), kav: kav, expected: expected, base: int64(expected), item: item,
		pkAttr: t.cfg.PartitionKey, verAttr: t.cfg.VersionAttribute, untilAttr: t.cfg.HoldUntilAttribute, holdAttr: t.cfg.HoldAttribute, unheld: true}, nil
}

// prepCheck prepares a check that the item with key is at version
// expected (0: absent, a tombstone included).
func (t *Table[T]) prepCheck(key Key, expected cas.Version) (*tableWrite, error) {
	kav, err := t.keyAV("check", key)
	if err != nil {
		return nil, err
	}
	if expected > math.MaxInt64 {
		return nil, &cas.KeyError{Op: "check", Key: keyString(key), Err: fmt.Errorf("%w: expected version %d", cas.ErrInvalidVersion, expected)}
	}
	return &tableWrite{op: "check", ks: keyString(key), kav: kav, expected: expected, base: int64(expected), anyAbsent: expected == 0,
		version: expected, pkAttr: t.cfg.PartitionKey, verAttr: t.cfg.VersionAttribute, untilAttr: t.cfg.HoldUntilAttribute, holdAttr: t.cfg.HoldAttribute}, nil
}

// maxTombstoneRounds bounds how often a create follows a tombstone that
// changed under it (a key deleted and created again meanwhile, each time).
const maxTombstoneRounds = 3

// write sends w and returns the item as stored, or the current item with
// the conflict. A create refused by a tombstone is sent again over it.
func (t *Table[T]) write(ctx context.Context, w *tableWrite) (T, error) {
	var zero T
	for round := 0; ; round++ {
		old, err := t.sendUnheld(ctx, w)
		if err == nil {
			v, derr := t.decodeItem(w.ks, w.item)
			if derr != nil {
				return zero, derr
			}
			return v, nil
		}
		var ce *cas.ConflictError
		if !errors.As(err, &ce) || old == nil {
			return zero, err
		}
		raw, _ := signedAttr(old, t.cfg.VersionAttribute)
		if w.expected == 0 && w.version != 0 && raw < 0 && round < maxTombstoneRounds {
			w.onTombstone(cas.Version(-raw)) // a create over a tombstone
			continue
		}
		if raw <= 0 {
			return zero, err
		}
		cur, derr := t.decodeItem(w.ks, old)
		if derr != nil {
			return zero, err
		}
		return cur, err
	}
}

// send sends w once, as a PutItem. On a failed condition it returns the
// stored item (empty when absent; nil when unknown) with the
// *cas.ConflictError.
func (t *Table[T]) send(ctx context.Context, w *tableWrite) (map[string]types.AttributeValue, error) {
	cond, names, values := w.condition()
	_, err := t.cli.PutItem(ctx, &dynamodb.PutItemInput{
		TableName:                           aws.String(t.cfg.Table),
		Item:                                w.item,
		ConditionExpression:                 aws.String(cond),
		ExpressionAttributeNames:            names,
		ExpressionAttributeValues:           values,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	}, noSDKRetry)
	if err == nil {
		return nil, nil
	}
	var ccf *types.ConditionalCheckFailedException
	if errors.As(err, &ccf) {
		return t.refused(ctx, w, ccf.Item, err)
	}
	if definite(err) {
		if tooLarge(err) {
			return nil, &cas.KeyError{Op: w.op, Key: w.ks, Err: fmt.Errorf("%w: %w", cas.ErrTooLarge, err)}
		}
		return nil, &cas.KeyError{Op: w.op, Key: w.ks, Err: fmt.Errorf("dynamocas: %w", err)}
	}
	return nil, t.lost(ctx, w, err)
}

// refused builds the conflict of w from the stored item the server
// returned, or from a consistent read when it returned none. The stored
// item comes back with it (empty when absent), unless it is unknown or
// would have satisfied w's condition (it changed back since).
func (t *Table[T]) refused(ctx context.Context, w *tableWrite, old map[string]types.AttributeValue, cause error) (map[string]types.AttributeValue, error) {
	ce := &cas.ConflictError{Key: w.ks, Expected: w.expected, Current: cas.Item{Key: w.ks}, Err: cause}
	if len(old) == 0 {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), DefaultResolveTimeout)
		var err error
		old, err = t.read(rctx, w.kav)
		cancel()
		if err != nil {
			return nil, ce
		}
	}
	if old == nil {
		old = map[string]types.AttributeValue{}
	}
	raw, err := signedAttr(old, t.cfg.VersionAttribute)
	if err == nil && w.unheld && (raw == w.base || w.anyAbsent && raw <= 0) && heldAt(old, t.cfg.HoldUntilAttribute) {
		ce.Err = errHeld // an exclusive update holds the item: sendUnheld waits
		return nil, ce
	}
	if err != nil || raw == w.base {
		return nil, ce // unreadable, or changed back since: not the state that refused w
	}
	ce.Current.Version, ce.HasCurrent = cas.Version(max(raw, 0)), true
	return old, ce
}

// lost handles a write whose answer was lost. Items of an application's
// table carry no write id, so the outcome can be settled only when the
// item is still in the state w's condition requires: then w has not
// applied, and it is sent again (the same condition lets at most one of
// the two sends apply). Otherwise the caller gets a *cas.AmbiguousError.
func (t *Table[T]) lost(ctx context.Context, w *tableWrite, cause error) error {
	amb := &cas.AmbiguousError{Op: w.op, Key: w.ks, Err: cause}
	if ctx.Err() != nil {
		return amb
	}
	av, err := t.read(ctx, w.kav)
	if err != nil {
		return amb
	}
	raw, err := signedAttr(av, t.cfg.VersionAttribute)
	if err != nil || raw != w.base {
		return amb
	}
	_, err = t.send(ctx, w)
	var ce *cas.ConflictError
	if errors.As(err, &ce) || errors.Is(err, cas.ErrAmbiguous) || (definite(err) && unread(err)) {
		// Refused by the condition (or, its answer cut, maybe so): by
		// the first send, which applied meanwhile, or by another writer.
		return amb
	}
	return err
}
