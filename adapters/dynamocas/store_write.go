package dynamocas

import (
	"context"
	"errors"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/occkit/occkit/cas"
)

// putWrite builds a conditional put: a plain one (waiting while the key
// is held), a fenced one (which does not look at holds), or, with hold,
// the write of the exclusive update holding the key with that token,
// which ends the hold.
func (s *Store) putWrite(key string, expected cas.Version, value []byte, fenced bool, token uint64, hold []byte) *write {
	id := s.ids.Next()
	e := s.newExpr()
	var newVersion uint64
	if expected != 0 {
		newVersion = uint64(expected) + 1
	}
	upd := s.putUpdate(e, value, id, newVersion, fenced, token)
	cond := s.versionCond(e, uint64(expected))
	unheld := false
	switch {
	case fenced:
		cond = s.fenceCond(e, token) + " AND " + cond
	case hold != nil:
		cond = s.holdCond(e, hold) + " AND " + cond
		upd += ", " + s.releaseUpdate(e)
	default:
		cond = s.unheldCond(e) + " AND " + cond
		unheld = true
	}
	in := s.updateInput(key, upd, cond, e)
	if expected == 0 {
		// The new version is one above the old version attribute: return
		// the old attributes the update changed (a tombstone's version and
		// write id, never a value, which a created key did not have).
		in.ReturnValues = types.ReturnValueUpdatedOld
	}
	return &write{op: "compare-and-swap", key: key, expected: expected, fenced: fenced, token: token, id: id, in: in, unheld: unheld, held: hold != nil}
}

// send sends w once and turns the answer into the caller's result.
func (s *Store) send(ctx context.Context, w *write) (cas.Version, error) {
	out, err := s.cli.UpdateItem(ctx, w.in, noSDKRetry)
	if err == nil {
		return s.written(w, out)
	}
	var ccf *types.ConditionalCheckFailedException
	if errors.As(err, &ccf) {
		return s.refused(ctx, w, ccf.Item, err)
	}
	if definite(err) {
		if unread(err) {
			return s.refusedUnread(ctx, w, err)
		}
		return 0, s.definiteError(w.op, w.key, err)
	}
	return s.resolveWrite(ctx, w, err)
}

// refusedUnread handles a write the server refused (HTTP 4xx) in an answer
// cut before its body: nothing applied, but the reason (a failed condition,
// throttling, a validation error...) is lost. A consistent read tells a
// conflict — the key no longer as w expects: a *cas.ConflictError with the
// current item, or a *cas.FencedError — from a refusal for another reason,
// returned as the definite error (Retryable: the next attempt learns the
// reason). A key found as w expects most likely did not fail w's
// condition (versions only grow); nothing applied either way.
func (s *Store) refusedUnread(ctx context.Context, w *write, cause error) (cas.Version, error) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.resolve)
	st, err := s.readState(rctx, w.key)
	cancel()
	switch {
	case err != nil || w.holds(st):
		return 0, s.definiteError(w.op, w.key, cause)
	case w.fenced && st.fence > w.token:
		return 0, &cas.FencedError{Key: w.key, Token: w.token, Highest: st.fence, Err: cause}
	}
	return 0, &cas.ConflictError{Key: w.key, Expected: w.expected, Current: st.item, HasCurrent: true, Err: cause}
}

// written is the version a successful write gave the key.
func (s *Store) written(w *write, out *dynamodb.UpdateItemOutput) (cas.Version, error) {
	switch {
	case w.delete:
		return 0, nil
	case w.expected != 0:
		return w.expected + 1, nil
	}
	old, err := signedAttr(out.Attributes, s.names.version)
	if err != nil || old > 0 {
		return 0, &cas.KeyError{Op: w.op, Key: w.key, Err: fmt.Errorf("dynamocas: written, but the old version came back as %v (%v)", out.Attributes[s.names.version], err)}
	}
	return cas.Version(1 - old), nil
}

// refused turns a failed condition into the caller's error: the item the
// server returned (or, when it returned none, a consistent read) tells a
// stale fencing token from a version conflict and is the conflict's
// current item. Finding the write's own id means that an earlier send of
// the same write applied (see resolveWrite).
func (s *Store) refused(ctx context.Context, w *write, old map[string]types.AttributeValue, cause error) (cas.Version, error) {
	ce := &cas.ConflictError{Key: w.key, Expected: w.expected, Err: cause}
	var st state
	var err error
	if len(old) > 0 {
		st, err = s.decode(w.key, old)
	} else {
		// No item: either the key never existed or the server ignores
		// ReturnValuesOnConditionCheckFailure. Read it to know.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.resolve)
		st, err = s.readState(rctx, w.key)
		cancel()
	}
	if err != nil {
		return 0, ce // the conflict stands; its current state is unknown
	}
	if st.hasWID && st.wid == w.id {
		if w.delete {
			return 0, nil
		}
		return st.highest, nil
	}
	if w.fenced && st.fence > w.token {
		return 0, &cas.FencedError{Key: w.key, Token: w.token, Highest: st.fence, Err: cause}
	}
	if w.unheld && w.holds(st) {
		// The version was as expected: an exclusive update's hold
		// refused the write (sendUnheld waits for it and sends it again).
		ce.Current, ce.HasCurrent, ce.Err = st.item, true, errHeld
		return 0, ce
	}
	// A state read after the refusal may already satisfy the condition
	// again (a create refused, then the key deleted): it is not the state
	// that refused the write, so it is not reported as such.
	if !w.holds(st) {
		ce.Current, ce.HasCurrent = st.item, true
	}
	return 0, ce
}
