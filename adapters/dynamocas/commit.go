package dynamocas

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/internal/ctxwait"
	"github.com/occkit/occkit/internal/writeid"
)

// maxCommitAttempts bounds the transactions one Commit sends when creates
// must be re-sent with the version a tombstone kept (see Commit).
const maxCommitAttempts = 4

// commit is one TransactWriteItems request of a Commit, kept whole so that
// it can be sent again, identically, while resolving a lost answer.
type commit struct {
	ops      []cas.Op
	bases    []uint64   // per create: the version attribute it expects
	id       writeid.ID // the write id of every put and delete, and the ClientRequestToken
	versions []cas.Version
	held     map[string]cas.Item // the keys an exclusive commit holds (their ops ask for its hold)
	prior    []writeid.ID        // the ids of the transactions this Commit sent before c: any found means one applied
	in       *dynamodb.TransactWriteItemsInput
}

// mine reports whether id is c's, or that of a transaction the same
// Commit sent before it (whose answer was lost, then refused on a resend
// by a hold that has since ended: it may have applied since).
func (c *commit) mine(id writeid.ID) bool {
	return id == c.id || slices.Contains(c.prior, id)
}

// Commit implements cas.Committer with one TransactWriteItems: a
// ConditionCheck per OpCheck, and a conditional Update per OpPut and
// OpDelete (an Update rather than a Put or Delete so that the version and
// fence attributes, and tombstones, survive). A refused transaction's
// cancellation reasons name the operations whose condition failed; the
// first of them in op order is the *cas.ConflictError, with the current
// item the server returned (ALL_OLD) or a consistent read found.
//
// A transaction cannot return values, so the version of a created key is
// chosen in advance: one above the version a tombstone of the key kept.
// Commit first assumes that a created key never existed; when one did, the
// refusal tells its version and Commit sends the transaction again with
// the versions of every created key read consistently.
//
// Every operation also asks that no exclusive update or exclusive commit
// holds its key (see UpdateExclusive). A transaction refused only by such
// a hold waits for it to end, polling, and is sent again, as a writer
// waits for a row lock; the holder then finds its versions unchanged, and
// the waiting transaction usually loses to the holder's write.
//
// The ClientRequestToken is the commit's write id, so a transaction sent
// again after a lost answer is idempotent on DynamoDB; see resolveCommit.
func (s *Store) Commit(ctx context.Context, ops []cas.Op) ([]cas.Version, error) {
	if err := s.limits.Commit(ctx, ops); err != nil {
		return nil, err
	}
	return s.commit(ctx, ops, nil, nil)
}

// commit is Commit by the exclusive commit holding the keys of held with
// token hold (the ops on those keys are conditional on it, and their
// writes end it), or by no one (nil).
func (s *Store) commit(ctx context.Context, ops []cas.Op, hold []byte, held map[string]cas.Item) ([]cas.Version, error) {
	bases := make([]uint64, len(ops))
	var (
		poll  ctxwait.Poll
		prior []writeid.ID
	)
	for attempt := 1; ; attempt++ {
		c := s.buildCommit(ops, bases, hold, held)
		c.prior = prior
		vs, rebase, err := s.sendCommit(ctx, c)
		if !rebase {
			return vs, err
		}
		prior = append(prior, c.id)
		var ce *cas.ConflictError
		if errors.As(err, &ce) && errors.Is(err, errHeld) {
			if hold != nil {
				// An exclusive commit does not wait for another's hold
				// while it keeps its own (two such commits could wait
				// for each other): a conflict, after which occ holds
				// this key too.
				return nil, ce
			}
			// Refused by another's hold only: wait for it to end, then
			// send anew (a new id, the clock read again).
			if err := poll.Wait(ctx); err != nil {
				return nil, fmt.Errorf("dynamocas: commit (first key %q) waiting for an exclusive hold: %w", truncate(ops[0].Key, 64), err)
			}
			attempt--
			continue
		}
		if attempt == maxCommitAttempts {
			// Created keys keep being deleted and re-created under us: a
			// conflict, which occ retries.
			return nil, &cas.ConflictError{Key: firstCreate(ops), Err: err}
		}
		if err := s.readBases(ctx, ops, bases); err != nil {
			return nil, err
		}
	}
}

func firstCreate(ops []cas.Op) string {
	for _, op := range ops {
		if op.Kind == cas.OpPut && op.Expected == 0 {
			return op.Key
		}
	}
	return ops[0].Key
}

func (s *Store) buildCommit(ops []cas.Op, bases []uint64, hold []byte, held map[string]cas.Item) *commit {
	c := &commit{ops: ops, bases: bases, id: s.ids.Next(), versions: make([]cas.Version, len(ops)), held: held}
	items := make([]types.TransactWriteItem, len(ops))
	for i, op := range ops {
		e := s.newExpr()
		var cond string
		switch {
		case op.Kind == cas.OpPut && op.Expected == 0:
			cond = s.baseCond(e, bases[i])
			c.versions[i] = cas.Version(bases[i] + 1)
		default:
			cond = s.versionCond(e, uint64(op.Expected))
		}
		_, mine := held[op.Key]
		if mine {
			cond = s.holdCond(e, hold) + " AND " + cond
		} else {
			cond = s.unheldCond(e) + " AND " + cond
		}
		switch op.Kind {
		case cas.OpCheck:
			c.versions[i] = op.Expected
			items[i].ConditionCheck = &types.ConditionCheck{
				TableName:                           aws.String(s.table),
				Key:                                 s.keyAV(op.Key),
				ConditionExpression:                 aws.String(cond),
				ExpressionAttributeNames:            e.names,
				ExpressionAttributeValues:           e.valueMap(),
				ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
			}
			continue
		case cas.OpPut:
			if op.Expected != 0 {
				c.versions[i] = op.Expected + 1
			}
			upd := s.putUpdate(e, op.Value, c.id, uint64(c.versions[i]), false, 0)
			if mine {
				upd += ", " + s.releaseUpdate(e)
			}
			items[i].Update = s.txUpdate(op.Key, upd, cond, e)
		case cas.OpDelete:
			upd := s.deleteUpdate(e, c.id, uint64(op.Expected))
			if mine {
				upd += ", " + s.releaseUpdate(e)
			}
			items[i].Update = s.txUpdate(op.Key, upd, cond, e)
		}
	}
	c.in = &dynamodb.TransactWriteItemsInput{TransactItems: items, ClientRequestToken: aws.String(c.id.String())}
	return c
}

// txUpdate is the update of updateInput as an item of a
// TransactWriteItems.
func (s *Store) txUpdate(key, upd, cond string, e *expr) *types.Update {
	in := s.updateInput(key, upd, cond, e)
	return &types.Update{
		TableName:                           in.TableName,
		Key:                                 in.Key,
		UpdateExpression:                    in.UpdateExpression,
		ConditionExpression:                 in.ConditionExpression,
		ExpressionAttributeNames:            in.ExpressionAttributeNames,
		ExpressionAttributeValues:           in.ExpressionAttributeValues,
		ReturnValuesOnConditionCheckFailure: in.ReturnValuesOnConditionCheckFailure,
	}
}

// holds reports whether st satisfies the condition of op i of c.
func (c *commit) holds(i int, st state) bool {
	op := c.ops[i]
	if op.Kind == cas.OpPut && op.Expected == 0 {
		return st.item.Version == 0 && uint64(st.highest) == c.bases[i]
	}
	return st.item.Version == op.Expected
}

// sendCommit sends c once. rebase reports that a create's expected
// version attribute was wrong and c should be built again.
func (s *Store) sendCommit(ctx context.Context, c *commit) (vs []cas.Version, rebase bool, err error) {
	_, err = s.cli.TransactWriteItems(ctx, c.in, noSDKRetry)
	if err == nil {
		return c.versions, false, nil
	}
	var tce *types.TransactionCanceledException
	if errors.As(err, &tce) {
		rebase, err = s.cancelled(ctx, c, tce, err)
		return nil, rebase, err
	}
	if definite(err) {
		return nil, false, s.definiteError("commit", c.ops[0].Key, err)
	}
	return s.resolveCommit(ctx, c, err)
}

// cancelled maps a TransactionCanceledException: the first operation in op
// order whose condition failed against a state that really differs from
// the one it expected is the conflict. A failed condition whose key now
// satisfies it (a tombstone with another version than a create assumed, or
// a state that changed back in between) asks for another attempt; one
// whose key is held by another's exclusive update asks for it after the
// hold ends (the error is then a *cas.ConflictError matching errHeld, for
// an exclusive commit, which does not wait). With no
// failed condition, the transaction was cancelled for other reasons
// (TransactionConflict and throttling are Retryable).
func (s *Store) cancelled(ctx context.Context, c *commit, tce *types.TransactionCanceledException, cause error) (rebase bool, err error) {
	reasons := tce.CancellationReasons
	var heldBy *cas.ConflictError // the first op refused by another's hold
	for i, r := range reasons {
		if i >= len(c.ops) || aws.ToString(r.Code) != "ConditionalCheckFailed" {
			continue
		}
		op := c.ops[i]
		st, rerr := s.stateFrom(ctx, op.Key, r.Item)
		if rerr != nil {
			return false, &cas.ConflictError{Key: op.Key, Expected: op.Expected, Err: cause}
		}
		if st.hasWID && c.mine(st.wid) {
			continue // only while resolving: this commit applied (see resolveCommit)
		}
		if st.item.Version == op.Expected {
			rebase = true // the condition holds now: try again
			if _, mine := c.held[op.Key]; !mine && st.holdUntil >= time.Now().UnixMilli() && heldBy == nil {
				// But another's hold refused it: after the hold.
				heldBy = &cas.ConflictError{Key: op.Key, Expected: op.Expected, Current: st.item, HasCurrent: true, Err: fmt.Errorf("%w: %w", errHeld, cause)}
			}
			continue
		}
		return false, &cas.ConflictError{Key: op.Key, Expected: op.Expected, Current: st.item, HasCurrent: true, Err: cause}
	}
	if heldBy != nil {
		return true, heldBy
	}
	if rebase {
		return true, cause
	}
	return false, fmt.Errorf("dynamocas: commit of %d operations (first key %q) cancelled: %w", len(c.ops), truncate(c.ops[0].Key, 64), cause)
}

// stateFrom decodes the item a refusal returned, or reads the key when the
// server returned none (the key does not exist, or the server ignores
// ReturnValuesOnConditionCheckFailure).
func (s *Store) stateFrom(ctx context.Context, key string, old map[string]types.AttributeValue) (state, error) {
	if len(old) > 0 {
		return s.decode(key, old)
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.resolve)
	defer cancel()
	return s.readState(rctx, key)
}

// readBases reads the version attribute of every key ops create.
func (s *Store) readBases(ctx context.Context, ops []cas.Op, bases []uint64) error {
	for i, op := range ops {
		if op.Kind != cas.OpPut || op.Expected != 0 {
			continue
		}
		st, err := s.readState(ctx, op.Key)
		if err != nil {
			return &readError{key: op.Key, err: err}
		}
		bases[i] = uint64(st.highest)
	}
	return nil
}

// resolveCommit finds out whether c, whose answer was lost, was applied,
// the way resolveWrite does for one key, through the first operation that
// writes (every put and delete of c carries c's write id): its id found
// means c applied; its key still as c expects means c has not applied, and
// c is sent again with the same ClientRequestToken (idempotent on
// DynamoDB; on servers that ignore the token, the conditions let at most
// one of the sends apply); anything else is a *cas.AmbiguousError. A
// resend refused while that key is still as c expects is a refusal like
// any other: the first send did not apply, and cannot apply after a
// refusal of the same conditions.
func (s *Store) resolveCommit(ctx context.Context, c *commit, cause error) ([]cas.Version, bool, error) {
	fw := -1
	for i, op := range c.ops {
		if op.Kind != cas.OpCheck {
			fw = i
			break
		}
	}
	key := c.ops[0].Key
	if fw >= 0 {
		key = c.ops[fw].Key
	}
	amb := &cas.AmbiguousError{Op: "commit", Key: key, WriteID: c.id.String(), Err: cause}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.resolve)
	defer cancel()
	// unchanged reports whether c has certainly not applied: the key of its
	// first write holds neither c's id nor anything but the state c expects.
	unchanged := func() (bool, error) {
		if fw < 0 {
			return true, nil // only checks: nothing to have applied
		}
		st, err := s.readState(rctx, key)
		switch {
		case err != nil:
			return false, amb
		case st.hasWID && c.mine(st.wid):
			return false, nil // applied
		case !c.holds(fw, st):
			return false, amb
		}
		return true, nil
	}
	for resends := 0; ; {
		ok, err := unchanged()
		if !ok {
			if err != nil {
				return nil, false, err
			}
			return c.versions, false, nil
		}
		if ctx.Err() != nil || resends == maxResends {
			return nil, false, amb
		}
		resends++
		_, err = s.cli.TransactWriteItems(ctx, c.in, noSDKRetry)
		if err == nil {
			return c.versions, false, nil
		}
		var tce *types.TransactionCanceledException
		switch {
		case errors.As(err, &tce) && !cancelledTransiently(tce):
			ok, uerr := unchanged()
			if !ok {
				if uerr != nil {
					return nil, false, uerr
				}
				return c.versions, false, nil // the first send applied
			}
			rebase, cerr := s.cancelled(ctx, c, tce, err)
			return nil, rebase, cerr
		case definite(err) && !Retryable(err):
			return nil, false, amb
		}
		amb.Err = errors.Join(cause, err)
		if ctxwait.Sleep(rctx, 50*time.Millisecond) != nil {
			return nil, false, amb
		}
	}
}
