package rowupdate

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"

	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/occ"
)

// Write is one row of a Driver's Commit: write Row if the row with Key
// is at version Expected (0: absent, an insert).
type Write[T any] struct {
	Key      any
	Expected cas.Version
	Row      T
}

// keysCtx carries a ModifyMany call's keys (text → Key.Value) to the
// bridge's reads and its commit.
type keysCtx struct{}

// keyValue returns the key value of key text from ctx: ModifyMany's map,
// or Modify's single key.
func keyValue(ctx context.Context, key string) (any, error) {
	if m, ok := ctx.Value(keysCtx{}).(map[string]any); ok {
		if k, ok := m[key]; ok {
			return k, nil
		}
	}
	return keyOf(ctx, key)
}

// keyValues returns the key values of key texts from ctx (keyValue).
func keyValues(ctx context.Context, keys []string) ([]any, error) {
	vals := make([]any, len(keys))
	for i, k := range keys {
		v, err := keyValue(ctx, k)
		if err != nil {
			return nil, err
		}
		vals[i] = v
	}
	return vals, nil
}

// GetMany implements cas.BatchGetter: one Driver.ReadMany when the table
// has it, one Get per key otherwise.
func (r *Rows[T]) GetMany(ctx context.Context, keys []string) ([]cas.Item, error) {
	out := make([]cas.Item, len(keys))
	if r.d.ReadMany == nil {
		for i, k := range keys {
			it, err := r.Get(ctx, k)
			switch {
			case errors.Is(err, cas.ErrNotFound):
				it = cas.Item{Key: k}
			case err != nil:
				return nil, err
			}
			out[i] = it
		}
		return out, nil
	}
	vals, err := keyValues(ctx, keys)
	if err != nil {
		return nil, err
	}
	rows, err := r.d.ReadMany(ctx, vals)
	if err != nil {
		return nil, err
	}
	for i, row := range rows {
		out[i] = cas.Item{Key: keys[i], Version: row.Version}
		if row.Version != 0 {
			out[i].Value = r.hold(row.Value)
		}
	}
	return out, nil
}

// Commit implements cas.Committer over Driver.Commit: every op is a put
// of a row handle (ModifyMany writes every row it read), applied in one
// transaction of the table, in key order.
func (r *Rows[T]) Commit(ctx context.Context, ops []cas.Op) ([]cas.Version, error) {
	if r.d.Commit == nil {
		return nil, fmt.Errorf("rowupdate: the table commits no multi-row transaction: %w", errors.ErrUnsupported)
	}
	writes, ids, err := r.writesOf(ctx, ops)
	if err != nil {
		return nil, err
	}
	stored, at, cur, err := r.d.Commit(ctx, writes)
	return r.committed(ops, ids, stored, at, cur, err)
}

// writesOf returns the rows ops write (each a put of a row handle) and
// their handles' ids.
func (r *Rows[T]) writesOf(ctx context.Context, ops []cas.Op) ([]Write[T], []uint64, error) {
	writes := make([]Write[T], len(ops))
	ids := make([]uint64, len(ops))
	for i, op := range ops {
		if op.Kind != cas.OpPut {
			return nil, nil, fmt.Errorf("rowupdate: a table transaction writes every row it reads (op %d on %q is not a put): %w", i, op.Key, errors.ErrUnsupported)
		}
		k, err := keyValue(ctx, op.Key)
		if err != nil {
			return nil, nil, err
		}
		p, id, err := r.held.load(op.Value)
		if err != nil {
			return nil, nil, err
		}
		writes[i], ids[i] = Write[T]{Key: k, Expected: op.Expected, Row: *p}, id
	}
	return writes, ids, nil
}

// committed maps the outcome of a commit of ops: the versions written
// (the handles then hold the rows as stored), or the conflict under the
// key text occ asked for, with the current row as a handle, to retry
// from.
func (r *Rows[T]) committed(ops []cas.Op, ids []uint64, stored []Row[T], at int, cur Row[T], err error) ([]cas.Version, error) {
	if err != nil {
		var ce *cas.ConflictError
		if errors.As(err, &ce) && at >= 0 && at < len(ops) {
			hint := *ce
			hint.Key, hint.Expected = ops[at].Key, ops[at].Expected
			hint.Current, hint.HasCurrent = cas.Item{Key: ops[at].Key, Version: cur.Version}, ce.HasCurrent
			if cur.Version != 0 {
				hint.Current.Value = r.hold(cur.Value)
			}
			return nil, &hint
		}
		return nil, err
	}
	vs := make([]cas.Version, len(ops))
	for i := range ops {
		r.held.replace(ids[i], &stored[i].Value)
		vs[i] = stored[i].Version
	}
	return vs, nil
}

// exclusiveCommitRows is the bridge of a table whose driver has Exclusive
// and CommitExclusive: a cas.ExclusiveCommitter, so that occ.Txn
// escalates a ModifyMany that keeps losing.
type exclusiveCommitRows[T any] struct{ exclusiveRows[T] }

// CommitExclusive implements cas.ExclusiveCommitter through
// Driver.CommitExclusive.
func (x exclusiveCommitRows[T]) CommitExclusive(ctx context.Context, keys []string, fn func(cur []cas.Item) ([]cas.Op, error)) ([]cas.Version, error) {
	r := x.Rows
	vals, err := keyValues(ctx, keys)
	if err != nil {
		return nil, err
	}
	var (
		ops []cas.Op
		ids []uint64
	)
	stored, at, cur, err := r.d.CommitExclusive(ctx, vals, func(rows []Row[T]) ([]Write[T], error) {
		items := make([]cas.Item, len(rows))
		for i, row := range rows {
			items[i] = cas.Item{Key: keys[i], Version: row.Version}
			if row.Version != 0 {
				items[i].Value = r.hold(row.Value)
			}
		}
		var err error
		if ops, err = fn(items); err != nil {
			return nil, err
		}
		var writes []Write[T]
		writes, ids, err = r.writesOf(ctx, ops)
		return writes, err
	})
	return r.committed(ops, ids, stored, at, cur, err)
}

// ModifyMany is Modify over several rows at once, as one optimistic
// transaction (occ.Txn): it reads the rows of ks, calls mutate with them
// (cur[i] is ks[i].Absent and exists[i] false for a row that does not
// exist), and writes every row mutate returned, in one transaction of
// the table, if none of them changed since it was read; otherwise it runs
// again, as occ.Txn does (turns at hot rows included). It returns the
// rows as stored, with their new versions. The keys must be distinct;
// mutate must return one row per key, each with its key.
func (r *Rows[T]) ModifyMany(ctx context.Context, ks []Key[T], mutate func(cur []T, exists []bool) ([]T, error), opts ...occ.Option) ([]T, error) {
	if r.d.Commit == nil {
		return nil, fmt.Errorf("rowupdate: the table commits no multi-row transaction: %w", errors.ErrUnsupported)
	}
	if len(ks) == 0 {
		return nil, fmt.Errorf("rowupdate: modify-many: %w: no rows", cas.ErrInvalidCommit)
	}
	texts := make([]string, len(ks))
	byText := make(map[string]any, len(ks))
	for i, k := range ks {
		if _, dup := byText[k.Text]; dup {
			return nil, &cas.KeyError{Op: "modify-many", Key: k.Text, Err: fmt.Errorf("%w: the key appears twice", cas.ErrInvalidKey)}
		}
		texts[i], byText[k.Text] = k.Text, k.Value
	}
	if ctx != nil {
		ctx = context.WithValue(ctx, keysCtx{}, byText)
	}
	var handles [][]byte
	err := occ.Txn(ctx, r.store, func(tx *occ.Tx) error {
		if err := tx.Prefetch(texts...); err != nil {
			return err
		}
		cur := make([]T, len(ks))
		exists := make([]bool, len(ks))
		for i, k := range texts {
			b, ok, err := tx.Get(k)
			if err != nil {
				return err
			}
			cur[i], exists[i] = ks[i].Absent, ok
			if ok {
				if err := r.Unmarshal(b, &cur[i]); err != nil {
					return err
				}
			}
		}
		next, err := mutate(cur, exists)
		if err != nil {
			return err
		}
		if len(next) != len(ks) {
			return occ.Permanent(fmt.Errorf("rowupdate: modify-many: mutate returned %d rows for %d keys", len(next), len(ks)))
		}
		handles = make([][]byte, len(ks))
		for i := range next {
			if ks[i].Check != nil {
				if err := ks[i].Check(&next[i]); err != nil {
					return err
				}
			}
			handles[i] = r.hold(next[i])
			tx.Put(texts[i], handles[i])
		}
		return nil
	}, opts...)
	if err != nil {
		return nil, err
	}
	out := make([]T, len(ks))
	for i, h := range handles {
		if err := r.Unmarshal(h, &out[i]); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// ModifyMany is ModifyMany of a SQL repository table: keys must fit T's
// key field, and mutate must keep each row's key.
func (tr *TableRows[T]) ModifyMany(ctx context.Context, keys []any, mutate func(cur []T, exists []bool) ([]T, error), opts ...occ.Option) ([]T, error) {
	ks := make([]Key[T], len(keys))
	var zeros []int // the keys that are their field's zero value
	for i, key := range keys {
		k, err := tr.key(key, "modify-many")
		if err != nil {
			return nil, err
		}
		ks[i] = k
		if reflect.ValueOf(k.Value).IsZero() {
			zeros = append(zeros, i)
		}
	}
	if zeros != nil {
		inner := mutate
		mutate = func(cur []T, exists []bool) ([]T, error) {
			for _, i := range zeros {
				if !exists[i] {
					return nil, occ.Permanent(zeroKeyError("modify-many", ks[i].Text))
				}
			}
			return inner(cur, exists)
		}
	}
	return tr.Rows.ModifyMany(ctx, ks, mutate, opts...)
}

// zeroKeyError refuses to insert a row whose key is its field's zero
// value: Insert leaves a zero key out for the database to generate one,
// so a Modify, ModifyMany or TxPut would write a row under a key it never
// returns. (A row that exists with such a key is Modify's to update.)
func zeroKeyError(op, key string) error {
	return &cas.KeyError{Op: op, Key: key, Err: fmt.Errorf("%w: the key is zero and the row is absent: insert rows whose key the database generates with Insert", cas.ErrInvalidKey)}
}

// writtenKey is key for TxPut, which writes the row whether or not it
// exists: the zero key is refused (zeroKeyError).
func (tr *TableRows[T]) writtenKey(key any, op string) (Key[T], error) {
	k, err := tr.key(key, op)
	if err == nil && reflect.ValueOf(k.Value).IsZero() {
		return Key[T]{}, zeroKeyError(op, k.Text)
	}
	return k, err
}

// key builds the Key of a SQL table's row: key converted to T's key
// field, a check that the row keeps it.
func (tr *TableRows[T]) key(key any, op string) (Key[T], error) {
	var absent T
	kf := reflect.ValueOf(&absent).Elem().FieldByIndex(tr.keyIndex)
	kv, err := ConvertKey(op, key, kf.Type())
	if err != nil {
		return Key[T]{}, err
	}
	kf.Set(kv)
	want := kf.Interface()
	ks := fmt.Sprint(want)
	return Key[T]{
		Text:   ks,
		Value:  want,
		Absent: absent,
		Check: func(next *T) error {
			if got := reflect.ValueOf(next).Elem().FieldByIndex(tr.keyIndex).Interface(); !reflect.DeepEqual(got, want) {
				return occ.Permanent(&cas.KeyError{Op: op, Key: ks, Err: fmt.Errorf("%w: mutate changed the row's key to %v", cas.ErrInvalidKey, got)})
			}
			return nil
		},
	}, nil
}

// CommitInOrder is the Commit of a SQL table's bridge: in one
// transaction (runTx), each write is an Insert (Expected 0) or an Update
// at Expected, in key order so that concurrent transactions lock rows in
// one order. A conflict ends it (runTx rolls back) with the write's index
// and the current row.
func CommitInOrder[T any](ctx context.Context, t Table[T], writes []Write[T]) (stored []Row[T], at int, cur Row[T], err error) {
	at = -1
	err = t.RunTx(ctx, func(in Table[T]) error {
		var err error
		stored, at, cur, err = writeInOrder(ctx, in, writes)
		return err
	})
	if err != nil {
		return nil, at, cur, err
	}
	return stored, -1, Row[T]{}, nil
}

// writeInOrder writes writes through in (a table bound to a
// transaction), in key order; the first conflict ends it with the
// write's index and the current row.
func writeInOrder[T any](ctx context.Context, in Table[T], writes []Write[T]) ([]Row[T], int, Row[T], error) {
	stored := make([]Row[T], len(writes))
	for _, i := range KeyOrder(writes) {
		w := writes[i]
		out, err := in.WriteAt(ctx, w.Expected, w.Row)
		if err != nil {
			var ce *cas.ConflictError
			if errors.As(err, &ce) {
				return nil, i, Row[T]{Value: out, Version: ce.Current.Version}, err
			}
			return nil, -1, Row[T]{}, err
		}
		stored[i] = Row[T]{Value: out, Version: in.VersionOf(&out)}
	}
	return stored, -1, Row[T]{}, nil
}

// CommitExclusiveFor is the Driver.CommitExclusive of t, nil when t has
// no RunTx or no LockRow: in one transaction, the rows of keys read with
// LockRow in key order, fn, and fn's writes in key order.
func CommitExclusiveFor[T any](t Table[T]) func(ctx context.Context, keys []any, fn func(cur []Row[T]) ([]Write[T], error)) ([]Row[T], int, Row[T], error) {
	if t.RunTx == nil || t.LockRow == nil {
		return nil
	}
	return func(ctx context.Context, keys []any, fn func(cur []Row[T]) ([]Write[T], error)) ([]Row[T], int, Row[T], error) {
		order := make([]int, len(keys))
		for i := range order {
			order[i] = i
		}
		slices.SortFunc(order, func(a, b int) int { return CmpKeys(keys[a], keys[b]) })
		var (
			stored []Row[T]
			at     = -1
			cur    Row[T]
			fnErr  error
		)
		err := t.RunTx(ctx, func(in Table[T]) error {
			rows := make([]Row[T], len(keys))
			for _, i := range order {
				v, err := in.LockRow(ctx, keys[i])
				switch {
				case errors.Is(err, cas.ErrNotFound):
					continue // absent: an insert of it meets a rival at the key's index
				case err != nil:
					return err
				}
				rows[i] = Row[T]{Value: v, Version: in.VersionOf(&v)}
			}
			writes, err := fn(rows)
			if err != nil {
				fnErr = err
				return err
			}
			stored, at, cur, err = writeInOrder(ctx, in, writes)
			return err
		})
		switch {
		case err == nil:
			return stored, -1, Row[T]{}, nil
		case fnErr != nil && errors.Is(err, fnErr):
			return nil, -1, Row[T]{}, fnErr
		}
		return nil, at, cur, err
	}
}

// KeyOrder returns the indexes of writes in key order (CmpKeys).
func KeyOrder[T any](writes []Write[T]) []int {
	order := make([]int, len(writes))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return CmpKeys(writes[a].Key, writes[b].Key) })
	return order
}

// CmpKeys orders key values: numbers by value, anything else by its text.
func CmpKeys(a, b any) int {
	av, bv := reflect.ValueOf(a), reflect.ValueOf(b)
	switch {
	case av.CanInt() && bv.CanInt():
		return cmpOrdered(av.Int(), bv.Int())
	case av.CanUint() && bv.CanUint():
		return cmpOrdered(av.Uint(), bv.Uint())
	}
	return cmpOrdered(fmt.Sprint(a), fmt.Sprint(b))
}

func cmpOrdered[V int64 | uint64 | string](a, b V) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
