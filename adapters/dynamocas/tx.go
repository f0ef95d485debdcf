package dynamocas

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/occkit/occkit/cas"
)

// Tx is a transaction of versioned writes on one or more Tables, committed
// atomically with one TransactWriteItems: every put, delete and check is
// conditional on its item's version, and either all apply or none does.
// Add operations with TxPut, TxDelete and TxCheck (of any Table, even of
// different item types), then call Commit.
//
// A Tx carries a ClientRequestToken chosen when it is made. After a
// *cas.AmbiguousError (the answer was lost), calling Commit again sends the
// same request with the same token, which DynamoDB applies at most once
// within ten minutes; Commit does so by itself first while the key it
// checks is unchanged.
//
// A Tx is safe for concurrent use, but its operations are meant to be
// added by one goroutine.
type Tx struct {
	cli   *dynamodb.Client
	token string

	mu       sync.Mutex
	items    []types.TransactWriteItem
	keys     []string
	expected []cas.Version
	versions []cas.Version
	vattrs   []string // each operation's version attribute
	tables   []string
	kavs     []map[string]types.AttributeValue
	bytes    int
}

// NewTx returns an empty transaction sent through cli.
func NewTx(cli *dynamodb.Client) *Tx {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(fmt.Sprintf("dynamocas: reading random bytes: %v", err))
	}
	return &Tx{cli: cli, token: hex.EncodeToString(b[:])}
}

// Token returns the transaction's ClientRequestToken.
func (tx *Tx) Token() string { return tx.token }

// Len returns the number of operations added.
func (tx *Tx) Len() int {
	tx.mu.Lock()
	defer tx.mu.Unlock()
	return len(tx.items)
}

func (tx *Tx) add(it types.TransactWriteItem, w *tableWrite, table, vattr string, size int) {
	tx.mu.Lock()
	defer tx.mu.Unlock()
	tx.items = append(tx.items, it)
	tx.keys = append(tx.keys, w.ks)
	tx.expected = append(tx.expected, w.expected)
	tx.versions = append(tx.versions, w.version)
	tx.vattrs = append(tx.vattrs, vattr)
	tx.tables = append(tx.tables, table)
	tx.kavs = append(tx.kavs, w.kav)
	tx.bytes += size
}

// TxPut adds to tx a put of item conditional on version expected (0: the
// item must be absent), as Put does. Its version in Commit's result is
// expected + 1.
func (t *Table[T]) TxPut(tx *Tx, item T, expected cas.Version) error {
	w, err := t.prepPut(item, expected)
	if err != nil {
		return err
	}
	tx.add(types.TransactWriteItem{Put: &types.Put{
		TableName:                           aws.String(t.cfg.Table),
		Item:                                w.item,
		ConditionExpression:                 aws.String(w.cond),
		ExpressionAttributeNames:            w.names,
		ExpressionAttributeValues:           w.values,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	}}, w, t.cfg.Table, t.cfg.VersionAttribute, itemSize(w.item))
	return nil
}

// TxDelete adds to tx a delete of the item with key at version expected
// (not 0).
func (t *Table[T]) TxDelete(tx *Tx, key Key, expected cas.Version) error {
	w, err := t.prepDelete("delete", key, expected)
	if err != nil {
		return err
	}
	tx.add(types.TransactWriteItem{Delete: &types.Delete{
		TableName:                           aws.String(t.cfg.Table),
		Key:                                 w.kav,
		ConditionExpression:                 aws.String(w.cond),
		ExpressionAttributeNames:            w.names,
		ExpressionAttributeValues:           w.values,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	}}, w, t.cfg.Table, t.cfg.VersionAttribute, itemSize(w.kav))
	return nil
}

// TxCheck adds to tx a check that the item with key is at version
// expected (0: absent), writing nothing. Its version in Commit's result is
// expected.
func (t *Table[T]) TxCheck(tx *Tx, key Key, expected cas.Version) error {
	w, err := t.prepDelete("check", key, expected)
	if err != nil {
		return err
	}
	w.version = expected
	tx.add(types.TransactWriteItem{ConditionCheck: &types.ConditionCheck{
		TableName:                           aws.String(t.cfg.Table),
		Key:                                 w.kav,
		ConditionExpression:                 aws.String(w.cond),
		ExpressionAttributeNames:            w.names,
		ExpressionAttributeValues:           w.values,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	}}, w, t.cfg.Table, t.cfg.VersionAttribute, itemSize(w.kav))
	return nil
}

// Commit sends the transaction and returns one version per operation, in
// the order they were added: the new version of a put, the checked
// version of a check, 0 for a delete. A transaction over 100 operations or
// 4 MB fails with cas.ErrTooLarge before anything is sent. A refused
// condition is a *cas.ConflictError naming the first such item (its
// partition key, "/" and its sort key) with the stored version when the
// server returned it; a transaction cancelled because of another one on
// the same items (TransactionConflict) or throttling is Retryable.
func (tx *Tx) Commit(ctx context.Context) ([]cas.Version, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	tx.mu.Lock()
	defer tx.mu.Unlock()
	switch {
	case len(tx.items) == 0:
		return nil, fmt.Errorf("dynamocas: commit: %w: no operations", cas.ErrInvalidCommit)
	case len(tx.items) > MaxTransactItems:
		return nil, fmt.Errorf("dynamocas: commit: %w: %d operations, limit %d", cas.ErrTooLarge, len(tx.items), MaxTransactItems)
	case tx.bytes > MaxTransactBytes:
		return nil, fmt.Errorf("dynamocas: commit: %w: %d bytes of items, limit %d", cas.ErrTooLarge, tx.bytes, MaxTransactBytes)
	}
	in := &dynamodb.TransactWriteItemsInput{TransactItems: tx.items, ClientRequestToken: aws.String(tx.token)}
	amb := &cas.AmbiguousError{Op: "commit", Key: tx.keys[0], WriteID: tx.token}
	for resends := 0; ; resends++ {
		_, err := tx.cli.TransactWriteItems(ctx, in, noSDKRetry)
		if err == nil {
			return append([]cas.Version(nil), tx.versions...), nil
		}
		var tce *types.TransactionCanceledException
		switch {
		case errors.As(err, &tce) && resends > 0 && !cancelledTransiently(tce):
			// Refused on a resend: by the first send, which applied, or by
			// another writer. Only the token's idempotency (DynamoDB)
			// would have told.
			amb.Err = errors.Join(amb.Err, err)
			return nil, amb
		case errors.As(err, &tce):
			return nil, tx.cancelled(ctx, tce, err)
		case definite(err) && resends == 0:
			return nil, fmt.Errorf("dynamocas: commit (first key %q): %w", truncate(tx.keys[0], 64), err)
		case definite(err) && !Retryable(err):
			// A resend refused outright: the first send stays unknown.
			amb.Err = errors.Join(amb.Err, err)
			return nil, amb
		}
		// No answer, a server error, or a resend refused for a reason that
		// may pass (throttling, or a refusal whose body was cut): the
		// token makes sending again safe.
		amb.Err = errors.Join(amb.Err, err)
		if ctx.Err() != nil || resends == maxResends {
			return nil, amb
		}
		if sleep(ctx, 50*time.Millisecond) != nil {
			return nil, amb
		}
	}
}

// cancelled maps a cancelled transaction: the first operation whose
// condition failed is the conflict, with the stored version the server
// returned or, when it returned none, a consistent read found.
func (tx *Tx) cancelled(ctx context.Context, tce *types.TransactionCanceledException, cause error) error {
	for i, r := range tce.CancellationReasons {
		if i >= len(tx.keys) || aws.ToString(r.Code) != "ConditionalCheckFailed" {
			continue
		}
		ce := &cas.ConflictError{Key: tx.keys[i], Expected: tx.expected[i], Current: cas.Item{Key: tx.keys[i]}, Err: cause}
		item := r.Item
		if len(item) == 0 {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), DefaultResolveTimeout)
			out, err := tx.cli.GetItem(rctx, &dynamodb.GetItemInput{
				TableName: aws.String(tx.tables[i]), Key: tx.kavs[i], ConsistentRead: aws.Bool(true)})
			cancel()
			if err != nil {
				return ce
			}
			item = out.Item
		}
		if v, err := numberAttr(item, tx.vattrs[i]); err == nil && v != tx.expected[i] {
			ce.Current.Version, ce.HasCurrent = v, true
		}
		return ce
	}
	return fmt.Errorf("dynamocas: commit of %d operations (first key %q) cancelled: %w", len(tx.items), truncate(tx.keys[0], 64), cause)
}
