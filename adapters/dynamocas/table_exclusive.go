package dynamocas

import (
	"context"
	"crypto/rand"
	"errors"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/internal/ctxwait"
	"github.com/occkit/occkit/internal/rowupdate"
)

// sendUnheld sends w and, while an exclusive update's hold refuses it,
// waits (polling) and sends it again, as a writer waits for a row lock.
// Sending it again is safe: it was refused, so nothing applied. ctx bounds
// the wait.
func (t *Table[T]) sendUnheld(ctx context.Context, w *tableWrite) (map[string]types.AttributeValue, error) {
	return ctxwait.WhileHeld(ctx, errHeld, func() (map[string]types.AttributeValue, error) { return t.send(ctx, w) })
}

// exclusive is the exclusive read-modify-write of one item that Modify
// escalates to for a call that keeps losing to other processes (the
// table's cas.Exclusive): an UpdateItem takes a hold in the item (a
// token and its end, TableConfig.ExclusiveTTL ahead by this process's
// clock; it waits while another hold lasts) and returns the item, fn
// runs, and the write of what fn returned, conditional on the token and
// the version read, replaces the item and so ends the hold. Meanwhile the
// table's plain writes of the item wait for the hold to end. A holder
// that stops answering loses the item when its hold ends, and its late
// write is refused as a conflict.
func (t *Table[T]) exclusive(ctx context.Context, key any, fn func(cur rowupdate.Row[T]) (T, bool, error)) (rowupdate.Row[T], error) {
	k := key.(Key)
	kav, err := t.keyAV("modify", k)
	if err != nil {
		return rowupdate.Row[T]{}, err
	}
	ks := keyString(k)
	token := make([]byte, holdTokenLen)
	_, _ = rand.Read(token)
	av, err := takeHold(ctx, t.cli, t.cfg.Table, kav, t.cfg.HoldAttribute, t.cfg.HoldUntilAttribute, token, t.cfg.ExclusiveTTL)
	if err != nil {
		if ctx.Err() != nil {
			return rowupdate.Row[T]{}, &cas.KeyError{Op: "modify", Key: ks, Err: err}
		}
		return rowupdate.Row[T]{}, &cas.KeyError{Op: "modify", Key: ks, Err: errors.Join(errors.New("dynamocas: taking the item's exclusive hold"), err)}
	}
	raw, err := signedAttr(av, t.cfg.VersionAttribute)
	if err != nil {
		releaseHold(ctx, t.cli, t.cfg.Table, kav, t.cfg.HoldAttribute, t.cfg.HoldUntilAttribute, token, DefaultResolveTimeout)
		return rowupdate.Row[T]{}, &cas.CodecError{Key: ks, Decode: true, Err: err}
	}
	var cur rowupdate.Row[T]
	if raw > 0 {
		v, err := t.decodeItem(ks, av)
		if err != nil {
			releaseHold(ctx, t.cli, t.cfg.Table, kav, t.cfg.HoldAttribute, t.cfg.HoldUntilAttribute, token, DefaultResolveTimeout)
			return rowupdate.Row[T]{}, err
		}
		cur = rowupdate.Row[T]{Value: v, Version: cas.Version(raw)}
	}
	next, write, err := ctxwait.Guard(func() {
		releaseHold(ctx, t.cli, t.cfg.Table, kav, t.cfg.HoldAttribute, t.cfg.HoldUntilAttribute, token, DefaultResolveTimeout)
	}, func() (T, bool, error) { return fn(cur) })
	var w *tableWrite
	if err == nil && write {
		if cur.Version == 0 {
			if w, err = t.prepInsert("modify", next); err == nil && raw < 0 {
				w.onTombstone(cas.Version(-raw)) // a create over the tombstone read
			}
		} else if err = t.setVersion(&next, cur.Version); err == nil {
			w, err = t.prepUpdate("modify", next)
		}
	}
	if err != nil || !write {
		releaseHold(ctx, t.cli, t.cfg.Table, kav, t.cfg.HoldAttribute, t.cfg.HoldUntilAttribute, token, DefaultResolveTimeout)
		return cur, err
	}
	w.unheld, w.hold = false, token
	out, err := t.write(ctx, w)
	if err != nil {
		return rowupdate.Row[T]{}, err
	}
	return rowupdate.Row[T]{Value: out, Version: w.version}, nil
}

// commitMany is ModifyMany's commit: one transaction (Tx) of an insert or
// an update per item. A conflict names the item whose version changed;
// its current state is read for the retry.
func (t *Table[T]) commitMany(ctx context.Context, writes []rowupdate.Write[T]) ([]rowupdate.Row[T], int, rowupdate.Row[T], error) {
	tx := NewTx(t.cli)
	tx.unheld = true // an escalated Modify's hold on an item makes the commit wait
	ws := make([]*tableWrite, len(writes))
	for i, w := range writes {
		var (
			tw  *tableWrite
			err error
		)
		row := w.Row
		if w.Expected == 0 {
			tw, err = t.prepInsert("modify-many", row)
		} else if err = t.setVersion(&row, w.Expected); err == nil {
			tw, err = t.prepUpdate("modify-many", row)
		}
		if err != nil {
			return nil, -1, rowupdate.Row[T]{}, err
		}
		ws[i] = tw
		tx.add(txOp{w: tw, table: t.cfg.Table})
	}
	if _, err := tx.Commit(ctx); err != nil {
		at, cur, err := t.refusedWrite(ctx, writes, ws, err)
		return nil, at, cur, err
	}
	stored := make([]rowupdate.Row[T], len(writes))
	for i, tw := range ws {
		v, err := t.decodeItem(tw.ks, tw.item)
		if err != nil {
			return nil, -1, rowupdate.Row[T]{}, err
		}
		stored[i] = rowupdate.Row[T]{Value: v, Version: tw.version}
	}
	return stored, -1, rowupdate.Row[T]{}, nil
}

// refusedWrite maps the failure err of a commit of writes (sent as ws):
// on a conflict, the index of the write it names and that item's current
// state, read for the retry; otherwise err as is, at -1.
func (t *Table[T]) refusedWrite(ctx context.Context, writes []rowupdate.Write[T], ws []*tableWrite, err error) (int, rowupdate.Row[T], error) {
	var ce *cas.ConflictError
	if !errors.As(err, &ce) {
		return -1, rowupdate.Row[T]{}, err
	}
	for i, tw := range ws {
		if tw.ks != ce.Key {
			continue
		}
		v, ver, rerr := t.get(ctx, writes[i].Key.(Key))
		switch {
		case errors.Is(rerr, cas.ErrNotFound):
			return i, rowupdate.Row[T]{}, &cas.ConflictError{Key: ce.Key, Expected: writes[i].Expected, HasCurrent: true, Current: cas.Item{Key: ce.Key}, Err: err}
		case rerr == nil:
			return i, rowupdate.Row[T]{Value: v, Version: ver}, &cas.ConflictError{Key: ce.Key, Expected: writes[i].Expected, HasCurrent: true, Current: cas.Item{Key: ce.Key, Version: ver}, Err: err}
		}
		break
	}
	return -1, rowupdate.Row[T]{}, err
}
