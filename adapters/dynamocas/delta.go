package dynamocas

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"

	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/internal/ctxwait"
)

// Add implements cas.Adder. A key whose value a delta wrote holds it as a
// number attribute, and the delta is one conditional UpdateItem:
//
//	SET value = value + :n, version = version + 1, writeid = :w
//	IF version > 0 AND attribute_type(value, N) AND value BETWEEN :lo AND :hi AND <not held>
//
// which returns the new value and version (ReturnValues ALL_NEW):
// concurrent deltas of one key never conflict. A key that is absent,
// deleted, or whose value CompareAndSwap wrote (binary) takes one
// version-conditioned write first, which stores the sum as a number (a
// conflict there sends the delta again). Get returns a number attribute's
// decimal text, as JSON[int64] writes it.
//
// DynamoDB keeps no history of an item's writes: a delta whose answer was
// lost is resolved when the item's write id is still the delta's (it
// applied, and no write came after it); otherwise Add returns a
// *cas.AmbiguousError and does not send it again, since a second send
// could apply it twice.
func (s *Store) Add(ctx context.Context, key string, n int64, b cas.Bounds) (int64, cas.Version, error) {
	lo, hi, err := s.limits.Add(ctx, key, n, b)
	if err != nil {
		return 0, 0, err
	}
	for {
		v, ver, st, err := s.addInPlace(ctx, key, n, lo, hi)
		if st == nil {
			return v, ver, err
		}
		// Refused: the item as the refusal found it says why.
		cur, err := st.intValue(key)
		if err != nil {
			return 0, 0, err
		}
		if !b.Allows(cur, n) {
			return 0, 0, &cas.BoundError{Key: key, Add: n, Bounds: b, Current: cur, HasCurrent: true}
		}
		if st.number && st.item.Version != 0 {
			continue // changed between the refusal and now: add in place
		}
		// Absent, deleted, or a binary value: one conditional put of the
		// sum as a number.
		w := s.putWrite(key, st.item.Version, nil, false, 0, nil)
		w.op = "add"
		w.in.ExpressionAttributeValues[":d"] = &types.AttributeValueMemberN{Value: strconv.FormatInt(cur+n, 10)}
		ver, err = s.sendUnheld(ctx, w)
		switch {
		case err == nil:
			return cur + n, ver, nil
		case errors.Is(err, cas.ErrConflict):
			continue
		}
		return 0, 0, err
	}
}

// addState is the item of a refused delta.
type addState struct {
	state
	number bool // the value is a number attribute
	raw    string
}

// intValue is the item's value as an integer: 0 for an absent key.
func (st *addState) intValue(key string) (int64, error) {
	if st.item.Version == 0 {
		return 0, nil
	}
	if st.number {
		return cas.ParseInt(key, []byte(st.raw))
	}
	return cas.ParseInt(key, st.item.Value)
}

// addInPlace sends the in-place delta, waiting while the key is held. It
// returns the refusal's item (nil when the delta applied or failed for
// another reason).
func (s *Store) addInPlace(ctx context.Context, key string, n, lo, hi int64) (int64, cas.Version, *addState, error) {
	id := s.ids.Next()
	e := s.newExpr()
	d, v := e.name(s, phValue), e.name(s, phVersion)
	cond := v + " > " + e.value(":zero", num(0)) +
		" AND attribute_type(" + d + ", " + e.value(":ntype", str("N")) + ")" +
		" AND " + d + " BETWEEN " + e.value(":lo", inum(lo)) + " AND " + e.value(":hi", inum(hi)) +
		" AND " + s.unheldCond(e)
	upd := "SET " + d + " = " + d + " + " + e.value(":n", inum(n)) +
		", " + v + " = " + v + " + " + e.value(":one", num(1)) +
		", " + e.name(s, phWriteID) + " = " + e.value(":w", bin(id[:]))
	in := s.updateInput(key, upd, cond, e)
	in.ReturnValues = types.ReturnValueAllNew
	var p ctxwait.Poll
	mismatches := 0
	for {
		in.ExpressionAttributeValues[":now"] = nowMillis()
		out, err := s.cli.UpdateItem(ctx, in, noSDKRetry)
		if err == nil {
			return s.added(key, out.Attributes)
		}
		var ccf *types.ConditionalCheckFailedException
		if errors.As(err, &ccf) {
			st, derr := s.addStateOf(ctx, key, ccf.Item)
			if derr != nil {
				return 0, 0, nil, derr
			}
			if st.item.Version != 0 && st.holdUntil >= time.Now().UnixMilli() {
				if err := p.Wait(ctx); err != nil {
					return 0, 0, nil, err
				}
				continue // held by an exclusive update: wait for it
			}
			return 0, 0, st, nil
		}
		if definite(err) {
			if unread(err) || validation(err) {
				// Refused, reason unknown (an answer cut before its body;
				// minidyn's ValidationException when BETWEEN meets a
				// binary value): the item tells whether the value is a
				// number the delta could have added to.
				st, derr := s.addStateOf(ctx, key, nil)
				if derr == nil && (!st.number || unread(err)) {
					return 0, 0, st, nil
				}
				if derr == nil && mismatches < 100 {
					// A number again by now (another delta wrote it).
					mismatches++
					continue
				}
			}
			if unread(err) {
				// Refused, reason unknown: read the item to learn it.
				st, derr := s.addStateOf(ctx, key, nil)
				if derr != nil {
					return 0, 0, nil, s.definiteError("add", key, err)
				}
				return 0, 0, st, nil
			}
			return 0, 0, nil, s.definiteError("add", key, err)
		}
		// The answer was lost: the delta applied if the item still
		// carries its write id.
		amb := &cas.AmbiguousError{Op: "add", Key: key, WriteID: id.String(), Err: err}
		if ctx.Err() != nil {
			return 0, 0, nil, amb
		}
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.resolve)
		item, rerr := s.cli.GetItem(rctx, s.getInput(key))
		for rerr != nil && ctxwait.Sleep(rctx, 50*time.Millisecond) == nil {
			item, rerr = s.cli.GetItem(rctx, s.getInput(key))
		}
		cancel()
		if rerr != nil {
			return 0, 0, nil, amb
		}
		st, derr := s.decode(key, item.Item)
		if derr != nil || !st.hasWID || st.wid != id {
			return 0, 0, nil, amb
		}
		return s.added(key, item.Item)
	}
}

// added reads the value and version a delta left in av.
func (s *Store) added(key string, av map[string]types.AttributeValue) (int64, cas.Version, *addState, error) {
	st, err := s.decode(key, av)
	if err != nil {
		return 0, 0, nil, err
	}
	nv, ok := av[s.names.value].(*types.AttributeValueMemberN)
	if !ok {
		return 0, 0, nil, &cas.KeyError{Op: "add", Key: key, Err: fmt.Errorf("dynamocas: added, but the value came back as %T", av[s.names.value])}
	}
	v, err := cas.ParseInt(key, []byte(nv.Value))
	if err != nil {
		return 0, 0, nil, err
	}
	return v, st.highest, nil, nil
}

// addStateOf decodes the item of a refused delta (nil: read it).
func (s *Store) addStateOf(ctx context.Context, key string, av map[string]types.AttributeValue) (*addState, error) {
	if len(av) == 0 {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.resolve)
		out, err := s.cli.GetItem(rctx, s.getInput(key))
		cancel()
		if err != nil {
			return nil, &cas.KeyError{Op: "add", Key: key, Err: fmt.Errorf("dynamocas: reading the key after a refused delta: %w", err)}
		}
		av = out.Item
	}
	st, err := s.decode(key, av)
	if err != nil {
		return nil, err
	}
	as := &addState{state: st}
	if nv, ok := av[s.names.value].(*types.AttributeValueMemberN); ok && st.item.Version != 0 {
		as.number, as.raw = true, nv.Value
	}
	return as, nil
}

// inum is a signed number attribute.
func inum(n int64) types.AttributeValue {
	return &types.AttributeValueMemberN{Value: strconv.FormatInt(n, 10)}
}

// validation reports a ValidationException.
func validation(err error) bool {
	var ae smithy.APIError
	return errors.As(err, &ae) && ae.ErrorCode() == "ValidationException"
}
