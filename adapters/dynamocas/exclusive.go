package dynamocas

import (
	"context"
	"crypto/rand"
	"errors"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/internal/ctxwait"
	"github.com/occkit/occkit/internal/holds"
)

// holdTokenLen is the length of an exclusive update's hold token.
const holdTokenLen = 16

// errHeld is the cause of a plain write refused while an exclusive update
// holds the key.
var errHeld = errors.New("dynamocas: the key is held by an exclusive update")

// nowMillis is this process's clock as a number attribute, in Unix
// milliseconds: the time holds are taken and checked against.
func nowMillis() types.AttributeValue {
	return &types.AttributeValueMemberN{Value: strconv.FormatInt(time.Now().UnixMilli(), 10)}
}

// sendUnheld sends a plain write (one whose condition asks that no
// exclusive update holds the key) and, while a hold refuses it, waits
// (polling) and sends it again with the clock read anew, as a writer waits
// for a row lock: a hold costs the other writers one wait each, not a
// burst of refused writes. Sending it again is safe: it was refused, so
// nothing applied. ctx bounds the wait.
func (s *Store) sendUnheld(ctx context.Context, w *write) (cas.Version, error) {
	return ctxwait.WhileHeld(ctx, errHeld, func() (cas.Version, error) {
		w.in.ExpressionAttributeValues[":now"] = nowMillis()
		return s.send(ctx, w)
	})
}

// UpdateExclusive implements cas.Exclusive with a hold kept in the key's
// item: a conditional UpdateItem takes it (a random token and its end,
// Config.ExclusiveTTL ahead by this process's clock; it waits, polling,
// while another update holds the key) and returns the item, fn runs, and
// the write, conditional on the token and the version, ends it.
// Meanwhile CompareAndSwap, CompareAndDelete and Commit of the key wait
// for the hold to end (then usually find their version gone: a conflict);
// CompareAndSwapFenced and a Table's Tx do not look at holds, and the
// holder's write then fails with a conflict.
//
// A holder that stops answering loses the key when its hold ends: the
// others take it or write, and the holder's late write is refused (its
// token or its version is gone). The clocks of the processes sharing the
// table decide when a hold has ended; skew between them shortens or
// lengthens holds, but no write is lost or applied twice by it: the
// holder's write is conditional on its token and version.
func (s *Store) UpdateExclusive(ctx context.Context, key string, fn func(cur cas.Item) ([]byte, bool, error)) (cas.Version, error) {
	if err := s.limits.Get(ctx, key); err != nil {
		return 0, err
	}
	token := make([]byte, holdTokenLen)
	_, _ = rand.Read(token)
	st, err := s.takeHold(ctx, key, token)
	if err != nil {
		return 0, err
	}
	next, write, err := holds.Next(ctx, s.limits, key, st.item, fn, func() { s.releaseHold(ctx, key, token) })
	if !write {
		return st.item.Version, err
	}
	return s.send(ctx, s.putWrite(key, st.item.Version, next, false, 0, token))
}

// takeHold takes key's hold with token, waiting while another update
// holds it, and returns the key's state.
func (s *Store) takeHold(ctx context.Context, key string, token []byte) (state, error) {
	av, err := takeHold(ctx, s.cli, s.table, s.keyAV(key), s.names.hold, s.names.holdUntil, token, s.ttl)
	if err != nil {
		return state{}, s.holdError(key, err)
	}
	return s.decode(key, av)
}

// holdError is the error of a hold that could not be taken.
func (s *Store) holdError(key string, err error) error {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return &cas.KeyError{Op: "update-exclusive", Key: key, Err: err}
	}
	return s.definiteError("update-exclusive", key, err)
}

// releaseHold ends key's hold if token still holds it, without writing.
func (s *Store) releaseHold(ctx context.Context, key string, token []byte) {
	releaseHold(ctx, s.cli, s.table, s.keyAV(key), s.names.hold, s.names.holdUntil, token, s.resolve)
}

// takeHold takes the hold of the item with key kav in table (attributes
// hold and until) with token for ttl, waiting (polling) while another
// holder's hold lasts, and returns the item as it is then (its key and
// hold only, when there was none). Taking it twice with one token is
// harmless, so a take whose answer was lost is sent again. It returns
// ctx's error when ctx ends first, or a definite error from the server.
func takeHold(ctx context.Context, cli *dynamodb.Client, table string, kav map[string]types.AttributeValue, hold, until string, token []byte, ttl time.Duration) (map[string]types.AttributeValue, error) {
	var poll ctxwait.Poll
	for {
		now := time.Now()
		end := &types.AttributeValueMemberN{Value: strconv.FormatInt(now.Add(ttl).UnixMilli(), 10)}
		out, err := cli.UpdateItem(ctx, &dynamodb.UpdateItemInput{
			TableName:                 aws.String(table),
			Key:                       kav,
			UpdateExpression:          aws.String("SET #h = :h, #u = :until"),
			ConditionExpression:       aws.String("attribute_not_exists(#u) OR #u < :now OR #h = :h"),
			ExpressionAttributeNames:  map[string]string{"#h": hold, "#u": until},
			ExpressionAttributeValues: map[string]types.AttributeValue{":h": bin(token), ":until": end, ":now": nowMillis()},
			ReturnValues:              types.ReturnValueAllNew,
		}, noSDKRetry)
		if err == nil {
			return out.Attributes, nil
		}
		var ccf *types.ConditionalCheckFailedException
		switch {
		case ctx.Err() != nil:
			return nil, ctx.Err()
		case errors.As(err, &ccf):
			// Held by another update: wait for it.
		case definite(err) && !Retryable(err):
			return nil, err
		}
		if poll.Wait(ctx) != nil {
			return nil, ctx.Err()
		}
	}
}

// releaseHold ends the hold token has on the item with key kav, for an
// update that writes nothing (a write ends it itself). A release that
// fails leaves the hold to end at its bound.
func releaseHold(ctx context.Context, cli *dynamodb.Client, table string, kav map[string]types.AttributeValue, hold, until string, token []byte, timeout time.Duration) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
	defer cancel()
	_, _ = cli.UpdateItem(rctx, &dynamodb.UpdateItemInput{
		TableName:                 aws.String(table),
		Key:                       kav,
		UpdateExpression:          aws.String("SET #u = :released"),
		ConditionExpression:       aws.String("#h = :h"),
		ExpressionAttributeNames:  map[string]string{"#h": hold, "#u": until},
		ExpressionAttributeValues: map[string]types.AttributeValue{":h": bin(token), ":released": num(0)},
	}, noSDKRetry)
}

// heldAt reports whether the item av is held (its hold's end, attribute
// until, not yet passed) by this process's clock.
func heldAt(av map[string]types.AttributeValue, until string) bool {
	end, err := numberAttr(av, until)
	return err == nil && int64(end) >= time.Now().UnixMilli()
}

var _ cas.ExclusiveCommitter = (*Store)(nil)

// CommitExclusive implements cas.ExclusiveCommitter with the holds of
// UpdateExclusive: it takes the hold of every key in key order (two
// callers cannot wait for each other), reads the items as it does, calls
// fn, and sends fn's ops as Commit does, every op on a held key also
// conditional on the hold's token, every write of one ending it (an op on
// a key not held is committed as Commit would); the holds of keys fn did
// not write end right after. It needs a server with
// TransactWriteItems (DynamoDB, minidyn; not dynalite).
func (s *Store) CommitExclusive(ctx context.Context, keys []string, fn func(cur []cas.Item) ([]cas.Op, error)) ([]cas.Version, error) {
	if err := s.limits.CommitExclusive(ctx, keys); err != nil {
		return nil, err
	}
	token := make([]byte, holdTokenLen)
	_, _ = rand.Read(token)
	return holds.Commit(keys,
		func(k string) (cas.Item, error) {
			st, err := s.takeHold(ctx, k, token)
			return st.item, err
		},
		fn,
		func(ops []cas.Op, cur map[string]cas.Item) ([]cas.Version, error) {
			if err := s.limits.Commit(ctx, ops); err != nil {
				return nil, err
			}
			return s.commit(ctx, ops, token, cur)
		},
		func(left []string) {
			for _, k := range left {
				s.releaseHold(ctx, k, token)
			}
		})
}
