package dynamocas

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/internal/ctxwait"
	"github.com/occkit/occkit/internal/writeid"
)

// Tx is a transaction of versioned writes on one or more Tables, committed
// atomically with one TransactWriteItems: every write and check is
// conditional on its item's version, and either all apply or none does.
// Add operations with TxInsert, TxUpdate, TxDelete and TxCheck (of any
// Table, even of different item types), then call Commit.
//
// A Tx carries a ClientRequestToken chosen when it is made. After a
// *cas.AmbiguousError (the answer was lost), calling Commit again sends the
// same request with the same token, which DynamoDB applies at most once
// within ten minutes; Commit does so by itself first while the key it
// checks is unchanged. (Commit draws a new token only when a tombstone
// refused one of its creates outright: that request applied nothing, and
// the one sent instead differs.)
//
// A Tx is safe for concurrent use, but its operations are meant to be
// added by one goroutine.
type Tx struct {
	cli   *dynamodb.Client
	token string
	// unheld: every write also asks that no exclusive update holds its
	// item, and a transaction refused only by a hold waits for it and is
	// sent anew with a new token (ModifyMany's; a Tx of NewTx ignores
	// holds).
	unheld bool

	mu    sync.Mutex
	ops   []txOp
	bytes int
}

// txOp is one operation of a Tx: a conditional write (a Put, also for a
// delete, which writes a tombstone) or a check, of one item of one table.
type txOp struct {
	w     *tableWrite
	table string
	check bool
}

// transactItem is the TransactWriteItem that sends op.
func (op txOp) transactItem() types.TransactWriteItem {
	cond, names, values := op.w.condition()
	if op.check {
		return types.TransactWriteItem{ConditionCheck: &types.ConditionCheck{
			TableName:                           aws.String(op.table),
			Key:                                 op.w.kav,
			ConditionExpression:                 aws.String(cond),
			ExpressionAttributeNames:            names,
			ExpressionAttributeValues:           values,
			ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
		}}
	}
	return types.TransactWriteItem{Put: &types.Put{
		TableName:                           aws.String(op.table),
		Item:                                op.w.item,
		ConditionExpression:                 aws.String(cond),
		ExpressionAttributeNames:            names,
		ExpressionAttributeValues:           values,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	}}
}

// NewTx returns an empty transaction sent through cli.
func NewTx(cli *dynamodb.Client) *Tx {
	return &Tx{cli: cli, token: writeid.Random()}
}

// Token returns the transaction's ClientRequestToken.
func (tx *Tx) Token() string {
	tx.mu.Lock()
	defer tx.mu.Unlock()
	return tx.token
}

// Len returns the number of operations added.
func (tx *Tx) Len() int {
	tx.mu.Lock()
	defer tx.mu.Unlock()
	return len(tx.ops)
}

func (tx *Tx) add(op txOp) {
	tx.mu.Lock()
	defer tx.mu.Unlock()
	// A Tx of NewTx does not look at exclusive holds (the holder's write
	// fails as a conflict if the transaction wrote first); ModifyMany's
	// waits for them (a resend after a lost answer sends the same request,
	// clock included; one sent after a hold is a new request).
	op.w.unheld = tx.unheld && !op.check
	tx.ops = append(tx.ops, op)
	if op.check {
		tx.bytes += itemSize(op.w.kav)
	} else {
		tx.bytes += itemSize(op.w.item)
	}
}

// TxInsert adds to tx the create of item, as Insert does: at version 1,
// or, when the key has a tombstone, one above the deleted version (Commit
// then sends the transaction again over the tombstone). Its version is in
// Commit's result.
func (t *Table[T]) TxInsert(tx *Tx, item T) error {
	w, err := t.prepInsert("insert", item)
	if err != nil {
		return err
	}
	tx.add(txOp{w: w, table: t.cfg.Table})
	return nil
}

// TxUpdate adds to tx the replace of item conditional on the version in
// its version field, as Update does. Its version in Commit's result is
// that version + 1.
func (t *Table[T]) TxUpdate(tx *Tx, item T) error {
	w, err := t.prepUpdate("update", item)
	if err != nil {
		return err
	}
	tx.add(txOp{w: w, table: t.cfg.Table})
	return nil
}

// TxDelete adds to tx the delete of the item with key at version expected
// (not 0), as Delete does (it leaves a tombstone).
func (t *Table[T]) TxDelete(tx *Tx, key Key, expected cas.Version) error {
	w, err := t.prepDelete(key, expected)
	if err != nil {
		return err
	}
	tx.add(txOp{w: w, table: t.cfg.Table})
	return nil
}

// TxCheck adds to tx a check that the item with key is at version
// expected (0: absent, or deleted), writing nothing. Its version in
// Commit's result is expected.
func (t *Table[T]) TxCheck(tx *Tx, key Key, expected cas.Version) error {
	w, err := t.prepCheck(key, expected)
	if err != nil {
		return err
	}
	tx.add(txOp{w: w, table: t.cfg.Table, check: true})
	return nil
}

// Commit sends the transaction and returns one version per operation, in
// the order they were added: the new version of an insert or an update,
// the checked version of a check, 0 for a delete. An insert of a key that
// has a tombstone is refused by it first; Commit then sends the
// transaction again, with a new token, creating over the tombstone. A transaction over 100 operations or
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
	case len(tx.ops) == 0:
		return nil, fmt.Errorf("dynamocas: commit: %w: no operations", cas.ErrInvalidCommit)
	case len(tx.ops) > MaxTransactItems:
		return nil, fmt.Errorf("dynamocas: commit: %w: %d operations, limit %d", cas.ErrTooLarge, len(tx.ops), MaxTransactItems)
	case tx.bytes > MaxTransactBytes:
		return nil, fmt.Errorf("dynamocas: commit: %w: %d bytes of items, limit %d", cas.ErrTooLarge, tx.bytes, MaxTransactBytes)
	}
	var poll ctxwait.Poll
	for round := 0; ; round++ {
		err := tx.send(ctx)
		if errors.Is(err, errHeld) {
			// Refused by an exclusive update's hold only (nothing
			// applied): wait for it, then send a new request (the clock
			// read again, a new token).
			if werr := poll.Wait(ctx); werr != nil {
				return nil, fmt.Errorf("dynamocas: commit (first key %q) waiting for an exclusive hold: %w", truncate(tx.ops[0].w.ks, 64), werr)
			}
			tx.token = writeid.Random()
			round--
			continue
		}
		var tomb *tombstoneRefusal
		if errors.As(err, &tomb) && round < maxTombstoneRounds {
			// A create refused by a tombstone: create over it, in a new
			// request (with a new token: the first was refused outright).
			tx.ops[tomb.op].w.onTombstone(tomb.deleted)
			tx.token = writeid.Random()
			continue
		}
		if err != nil {
			return nil, err
		}
		vs := make([]cas.Version, len(tx.ops))
		for i, op := range tx.ops {
			vs[i] = op.w.version
		}
		return vs, nil
	}
}

// tombstoneRefusal is the cancellation of a transaction by the tombstone
// of a key one of its creates assumed never existed.
type tombstoneRefusal struct {
	op      int
	deleted cas.Version
	err     error
}

func (e *tombstoneRefusal) Error() string { return e.err.Error() }
func (e *tombstoneRefusal) Unwrap() error { return e.err }

// send sends the transaction, resending it with the same token while its
// outcome is unknown.
func (tx *Tx) send(ctx context.Context) error {
	items := make([]types.TransactWriteItem, len(tx.ops))
	for i, op := range tx.ops {
		items[i] = op.transactItem()
	}
	first := tx.ops[0].w.ks
	in := &dynamodb.TransactWriteItemsInput{TransactItems: items, ClientRequestToken: aws.String(tx.token)}
	amb := &cas.AmbiguousError{Op: "commit", Key: first, WriteID: tx.token}
	for resends := 0; ; resends++ {
		_, err := tx.cli.TransactWriteItems(ctx, in, noSDKRetry)
		if err == nil {
			return nil
		}
		var tce *types.TransactionCanceledException
		switch {
		case errors.As(err, &tce) && resends > 0 && !cancelledTransiently(tce):
			// Refused on a resend: by the first send, which applied, or by
			// another writer. Only the token's idempotency (DynamoDB)
			// would have told.
			amb.Err = errors.Join(amb.Err, err)
			return amb
		case errors.As(err, &tce):
			return tx.cancelled(ctx, tce, err)
		case definite(err) && resends == 0:
			return fmt.Errorf("dynamocas: commit (first key %q): %w", truncate(first, 64), err)
		case definite(err) && !Retryable(err):
			// A resend refused outright: the first send stays unknown.
			amb.Err = errors.Join(amb.Err, err)
			return amb
		}
		// No answer, a server error, or a resend refused for a reason that
		// may pass (throttling, or a refusal whose body was cut): the
		// token makes sending again safe.
		amb.Err = errors.Join(amb.Err, err)
		if ctx.Err() != nil || resends == maxResends {
			return amb
		}
		if ctxwait.Sleep(ctx, 50*time.Millisecond) != nil {
			return amb
		}
	}
}

// cancelled maps a cancelled transaction: the first operation whose
// condition failed is the conflict, with the stored version the server
// returned or, when it returned none, a consistent read found; a create
// refused by a tombstone is a *tombstoneRefusal, for Commit to go on.
func (tx *Tx) cancelled(ctx context.Context, tce *types.TransactionCanceledException, cause error) error {
	for i, r := range tce.CancellationReasons {
		if i >= len(tx.ops) || aws.ToString(r.Code) != "ConditionalCheckFailed" {
			continue
		}
		w := tx.ops[i].w
		ce := &cas.ConflictError{Key: w.ks, Expected: w.expected, Current: cas.Item{Key: w.ks}, Err: cause}
		item := r.Item
		if len(item) == 0 {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), DefaultResolveTimeout)
			out, err := tx.cli.GetItem(rctx, &dynamodb.GetItemInput{
				TableName: aws.String(tx.ops[i].table), Key: w.kav, ConsistentRead: aws.Bool(true)})
			cancel()
			if err != nil {
				return ce
			}
			item = out.Item
		}
		raw, err := signedAttr(item, w.verAttr)
		switch {
		case err == nil && raw == w.base && w.unheld && heldAt(item, w.untilAttr):
			ce.Err = errors.Join(errHeld, cause) // an exclusive update holds the item: Commit waits
		case err != nil || raw == w.base:
		case raw < 0 && w.expected == 0 && !tx.ops[i].check:
			return &tombstoneRefusal{op: i, deleted: cas.Version(-raw), err: ce}
		default:
			ce.Current.Version, ce.HasCurrent = cas.Version(max(raw, 0)), true
		}
		return ce
	}
	return fmt.Errorf("dynamocas: commit of %d operations (first key %q) cancelled: %w", len(tx.ops), truncate(tx.ops[0].w.ks, 64), cause)
}
