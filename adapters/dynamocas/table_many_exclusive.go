package dynamocas

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/internal/ctxwait"
	"github.com/occkit/occkit/internal/rowupdate"
)

// commitExclusive is ModifyMany's attempt for a transaction that keeps
// losing to other processes (the driver's CommitExclusive), the holds of
// exclusive over several items: it takes the hold of every item in key
// order (two such attempts cannot wait for each other), reads the items
// from the holds' replies, calls fn, and commits fn's writes in one
// transaction, each conditional on its hold and on the version read;
// replacing an item ends its hold. The holds of items fn did not write,
// and every hold when fn or the commit fails, are released at once (a
// release that fails leaves the hold to end at TableConfig.ExclusiveTTL).
// Meanwhile the table's plain writes and ModifyMany's commits of the
// items wait for the holds. It needs TransactWriteItems, as ModifyMany.
func (t *Table[T]) commitExclusive(ctx context.Context, keys []any, fn func(cur []rowupdate.Row[T]) ([]rowupdate.Write[T], error)) ([]rowupdate.Row[T], int, rowupdate.Row[T], error) {
	var none rowupdate.Row[T]
	if len(keys) == 0 {
		return nil, -1, none, fmt.Errorf("dynamocas: modify-many: %w: no keys", cas.ErrInvalidCommit)
	}
	type held struct {
		kav  map[string]types.AttributeValue
		ks   string // in errors
		text string // unambiguous: the order of the holds, the match of writes
		raw  int64  // the version attribute read: 0 never written, -b a tombstone
	}
	hs := make([]held, len(keys))
	for i, key := range keys {
		k, ok := key.(Key)
		if !ok {
			return nil, -1, none, fmt.Errorf("dynamocas: modify-many: key %v is a %T, not a Key", key, key)
		}
		kav, err := t.keyAV("modify-many", k)
		if err != nil {
			return nil, -1, none, err
		}
		hs[i] = held{kav: kav, ks: keyString(k), text: keyText(k)}
	}
	order := make([]int, len(keys))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return strings.Compare(hs[a].text, hs[b].text) })

	token := make([]byte, holdTokenLen)
	_, _ = rand.Read(token)
	var taken []int
	releaseAll := func(except map[int]bool) {
		for _, i := range taken {
			if !except[i] {
				releaseHold(ctx, t.cli, t.cfg.Table, hs[i].kav, t.cfg.HoldAttribute, t.cfg.HoldUntilAttribute, token, DefaultResolveTimeout)
			}
		}
	}
	cur := make([]rowupdate.Row[T], len(keys))
	for _, i := range order {
		av, err := takeHold(ctx, t.cli, t.cfg.Table, hs[i].kav, t.cfg.HoldAttribute, t.cfg.HoldUntilAttribute, token, t.cfg.ExclusiveTTL)
		if err != nil {
			releaseAll(nil)
			if ctx.Err() == nil {
				err = errors.Join(errors.New("dynamocas: taking the item's exclusive hold"), err)
			}
			return nil, -1, none, &cas.KeyError{Op: "modify-many", Key: hs[i].ks, Err: err}
		}
		taken = append(taken, i)
		raw, err := signedAttr(av, t.cfg.VersionAttribute)
		if err != nil {
			releaseAll(nil)
			return nil, -1, none, &cas.CodecError{Key: hs[i].ks, Decode: true, Err: err}
		}
		hs[i].raw = raw
		if raw > 0 {
			v, err := t.decodeItem(hs[i].ks, av)
			if err != nil {
				releaseAll(nil)
				return nil, -1, none, err
			}
			cur[i] = rowupdate.Row[T]{Value: v, Version: cas.Version(raw)}
		}
	}
	writes, _, err := ctxwait.Guard(func() { releaseAll(nil) }, func() ([]rowupdate.Write[T], struct{}, error) {
		w, err := fn(cur)
		return w, struct{}{}, err
	})
	if err != nil || len(writes) == 0 {
		releaseAll(nil)
		return nil, -1, none, err
	}
	tx := NewTx(t.cli)
	ws := make([]*tableWrite, len(writes))
	wrote := make(map[int]bool, len(writes))
	for j, w := range writes {
		i := slices.IndexFunc(hs, func(h held) bool { k, ok := w.Key.(Key); return ok && h.text == keyText(k) })
		if i < 0 || wrote[i] {
			releaseAll(nil)
			return nil, -1, none, fmt.Errorf("dynamocas: modify-many: a write of %v, which the attempt does not hold or writes twice", w.Key)
		}
		wrote[i] = true
		var tw *tableWrite
		row := w.Row
		if cur[i].Version == 0 {
			if tw, err = t.prepInsert("modify-many", row); err == nil && hs[i].raw < 0 {
				tw.onTombstone(cas.Version(-hs[i].raw)) // a create over the tombstone read
			}
		} else if err = t.setVersion(&row, cur[i].Version); err == nil {
			tw, err = t.prepUpdate("modify-many", row)
		}
		if err != nil {
			releaseAll(nil)
			return nil, -1, none, err
		}
		tw.unheld, tw.hold = false, token
		ws[j] = tw
		tx.add(txOp{w: tw, table: t.cfg.Table})
	}
	if _, err := tx.Commit(ctx); err != nil {
		releaseAll(nil)
		at, cur, err := t.refusedWrite(ctx, writes, ws, err)
		return nil, at, cur, err
	}
	releaseAll(wrote) // the items fn read and did not write
	stored := make([]rowupdate.Row[T], len(writes))
	for j, tw := range ws {
		v, err := t.decodeItem(tw.ks, tw.item)
		if err != nil {
			return nil, -1, none, err
		}
		stored[j] = rowupdate.Row[T]{Value: v, Version: tw.version}
	}
	return stored, -1, none, nil
}
