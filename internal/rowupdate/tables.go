package rowupdate

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"

	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/occ"
)

// Tables is the bridge of a transaction over rows of several tables of
// one database onto occ.Txn: a cas.Store and cas.Committer whose keys
// name a row of one Member ("<member id>\x1f<key>") and whose values are
// that member's row handles. An adapter keeps one Tables for the life of
// the process, so that the turns of its calls meet at hot rows, as they
// do for one table's ModifyMany. The zero Tables is ready to use.
type Tables struct{}

var (
	_ cas.Store              = (*Tables)(nil)
	_ cas.Committer          = (*Tables)(nil)
	_ cas.BatchGetter        = (*Tables)(nil)
	_ cas.ExclusiveCommitter = (*Tables)(nil)
)

// KeepValues tells occ not to keep the states of Tables' keys past the
// call that wrote them: Update never runs on Tables (see Rows.KeepValues).
func (*Tables) KeepValues() bool { return false }

// ref is what a bridge key names: a member's row.
type ref struct {
	m   member
	key any
}

// refs are the bridge keys one Txn call named, for its reads and commit.
type refs struct {
	mu sync.Mutex
	m  map[string]ref
	tx any // the transaction of an exclusive attempt while it runs fn: reads go through it
}

func (r *refs) setTx(tx any) {
	r.mu.Lock()
	r.tx = tx
	r.mu.Unlock()
}

// openTx returns the transaction of ctx's exclusive attempt, or nil.
func openTx(ctx context.Context) any {
	if r, ok := ctx.Value(refsCtx{}).(*refs); ok {
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.tx
	}
	return nil
}

func (r *refs) add(text string, v ref) {
	r.mu.Lock()
	r.m[text] = v
	r.mu.Unlock()
}

func (r *refs) get(text string) (ref, bool) {
	r.mu.Lock()
	v, ok := r.m[text]
	r.mu.Unlock()
	return v, ok
}

type refsCtx struct{}

// refOf returns what key names in ctx's call.
func refOf(ctx context.Context, key string) (ref, error) {
	if r, ok := ctx.Value(refsCtx{}).(*refs); ok {
		if v, ok := r.get(key); ok {
			return v, nil
		}
	}
	return ref{}, &cas.KeyError{Op: "txn", Key: key, Err: errors.New("rowupdate: the tables' rows are read and written only through Txn")}
}

// TablesTx is one attempt of a Txn: the rows it reads and writes.
type TablesTx struct {
	tx    *occ.Tx
	refs  *refs
	read  map[string]bool // rows read (TxGet, TxPrefetch), by bridge key
	wrote map[string]bool // rows written (TxPut)
}

// Txn runs fn as one optimistic transaction over rows of the members'
// tables, as occ.Txn does over a store's keys: the rows fn reads are read
// at their versions, the rows it writes are written in one transaction
// of the database when none of the rows read has changed since, and
// otherwise fn runs again (turns at hot rows, backoff, the retry budget
// and every occ.Option as occ.Txn, except WithCombiner: transactions over
// table rows are not combined). A row fn reads and does not write is
// written back as read, so that the commit checks and locks it (its
// version moves); a row read as absent and not written is checked absent
// at the commit. The commit writes tables in name order and rows in key
// order, so that concurrent transactions lock rows in one order.
func (b *Tables) Txn(ctx context.Context, fn func(tx *TablesTx) error, opts ...occ.Option) error {
	rs := &refs{m: map[string]ref{}}
	if ctx != nil {
		ctx = context.WithValue(ctx, refsCtx{}, rs)
	}
	// Not combined: a batch would run every member's fn under its
	// leader's context, whose refs know none of the other members' rows.
	opts = append(slices.Clone(opts), occ.WithCombiner(nil))
	return occ.Txn(ctx, b, func(otx *occ.Tx) error {
		tx := &TablesTx{tx: otx, refs: rs, read: map[string]bool{}, wrote: map[string]bool{}}
		if err := fn(tx); err != nil {
			return err
		}
		for k := range tx.read {
			if tx.wrote[k] {
				continue
			}
			// Read already: no round trip. A row read as absent stays a
			// check of its absence.
			b, ok, err := otx.Get(k)
			if err != nil {
				return err
			}
			if ok {
				otx.Put(k, b)
			}
		}
		return nil
	}, opts...)
}

// TxGet reads the row of m's table with key in tx; exists is false (and
// the row is the zero T with its key set) when there is none.
func TxGet[T any](tx *TablesTx, m *Member[T], key any) (row T, exists bool, err error) {
	k, err := m.rows.key(key, "txn-get")
	if err != nil {
		return row, false, err
	}
	text := m.text(k.Text)
	tx.refs.add(text, ref{m: m, key: k.Value})
	b, ok, err := tx.tx.Get(text)
	if err != nil {
		return row, false, err
	}
	tx.read[text] = true
	if !ok {
		return k.Absent, false, nil
	}
	if err := m.rows.Unmarshal(b, &row); err != nil {
		return row, false, err
	}
	return row, true, nil
}

// TxPrefetch reads the rows of m's table with keys in one round trip
// where the table can, so that the TxGet calls of them that follow cost
// nothing: a transaction that knows its rows up front calls it first.
func TxPrefetch[T any](tx *TablesTx, m *Member[T], keys ...any) error {
	texts := make([]string, len(keys))
	for i, key := range keys {
		k, err := m.rows.key(key, "txn-prefetch")
		if err != nil {
			return err
		}
		texts[i] = m.text(k.Text)
		tx.refs.add(texts[i], ref{m: m, key: k.Value})
		tx.read[texts[i]] = true
	}
	return tx.tx.Prefetch(texts...)
}

// TxPut writes row (its key in its key field) to m's table when tx
// commits: an update of the row at the version the transaction read, or
// an insert when it has none. The version field of row is ignored.
func TxPut[T any](tx *TablesTx, m *Member[T], row T) error {
	kf := reflect.ValueOf(&row).Elem().FieldByIndex(m.rows.keyIndex)
	k, err := m.rows.writtenKey(kf.Interface(), "txn-put")
	if err != nil {
		return err
	}
	text := m.text(k.Text)
	tx.refs.add(text, ref{m: m, key: k.Value})
	tx.tx.Put(text, m.rows.hold(row))
	tx.wrote[text] = true
	return nil
}

// Get implements cas.Store.
func (b *Tables) Get(ctx context.Context, key string) (cas.Item, error) {
	r, err := refOf(ctx, key)
	if err != nil {
		return cas.Item{}, err
	}
	var row Row[[]byte]
	if tx := openTx(ctx); tx != nil {
		// Inside an exclusive attempt: through its transaction, not
		// another connection, which the held locks could starve.
		row, err = r.m.readTx(ctx, tx, r.key)
	} else {
		row, err = r.m.read(ctx, r.key)
	}
	if err != nil {
		return cas.Item{}, err
	}
	if row.Version == 0 {
		return cas.Item{}, &cas.KeyError{Op: "get", Key: key, Err: cas.ErrNotFound}
	}
	return cas.Item{Key: key, Value: row.Value, Version: row.Version}, nil
}

// GetMany implements cas.BatchGetter: one read per table, of all its rows
// at once where the table can.
func (b *Tables) GetMany(ctx context.Context, keys []string) ([]cas.Item, error) {
	out := make([]cas.Item, len(keys))
	if tx := openTx(ctx); tx != nil {
		// Inside an exclusive attempt: through its transaction.
		for i, k := range keys {
			r, err := refOf(ctx, k)
			if err != nil {
				return nil, err
			}
			row, err := r.m.readTx(ctx, tx, r.key)
			if err != nil {
				return nil, err
			}
			out[i] = cas.Item{Key: k, Value: row.Value, Version: row.Version}
		}
		return out, nil
	}
	byMember := map[member][]int{}
	var order []member
	refsOf := make([]ref, len(keys))
	for i, k := range keys {
		r, err := refOf(ctx, k)
		if err != nil {
			return nil, err
		}
		refsOf[i] = r
		if _, ok := byMember[r.m]; !ok {
			order = append(order, r.m)
		}
		byMember[r.m] = append(byMember[r.m], i)
	}
	for _, m := range order {
		idx := byMember[m]
		vals := make([]any, len(idx))
		for j, i := range idx {
			vals[j] = refsOf[i].key
		}
		rows, err := m.readMany(ctx, vals)
		if err != nil {
			return nil, err
		}
		for j, i := range idx {
			out[i] = cas.Item{Key: keys[i], Value: rows[j].Value, Version: rows[j].Version}
		}
	}
	return out, nil
}

// CompareAndSwap implements cas.Store as a commit of one put.
func (b *Tables) CompareAndSwap(ctx context.Context, key string, expected cas.Version, value []byte) (cas.Version, error) {
	vs, err := b.Commit(ctx, []cas.Op{cas.Put(key, expected, value)})
	if err != nil {
		return 0, err
	}
	return vs[0], nil
}

// CompareAndDelete implements cas.Store; a Txn deletes no rows.
func (b *Tables) CompareAndDelete(context.Context, string, cas.Version) error {
	return errors.ErrUnsupported
}

// Commit implements cas.Committer: in one transaction of the database
// (begun through the first member's), each put is its member's Insert
// (Expected 0) or Update at Expected, and each check of an absent row a
// read, in the order of table names and then keys. The first conflict
// rolls everything back and is returned with the row's current state.
// A commit of updates only, on tables that all have a Pipeline, goes in
// one round trip and COMMIT.
func (b *Tables) Commit(ctx context.Context, ops []cas.Op) ([]cas.Version, error) {
	if len(ops) == 0 {
		return nil, fmt.Errorf("rowupdate: txn: %w: no rows", cas.ErrInvalidCommit)
	}
	rs, order, err := resolve(ctx, ops)
	if err != nil {
		return nil, err
	}
	vs, conflict, ok, err := commitPipelined(ctx, ops, rs, order)
	switch {
	case ok && conflict != nil:
		return nil, conflict
	case ok:
		return vs, err
	}
	var keep []func()
	err = rs[order[0]].m.begin(ctx, func(tx any) error {
		vs, keep, conflict, err = apply(ctx, tx, ops, rs, order)
		if conflict != nil {
			return conflict
		}
		return err
	})
	if err != nil {
		if conflict != nil && errors.Is(err, conflict) {
			return nil, conflict
		}
		return nil, err
	}
	for _, done := range keep {
		done()
	}
	return vs, nil
}

// CommitExclusive implements cas.ExclusiveCommitter, the attempt occ.Txn
// escalates a transaction that keeps losing to: in one transaction of the
// database it reads the rows of keys locking them (SELECT ... FOR UPDATE,
// in the order of table names and then keys, so that two such commits
// cannot deadlock), calls fn with them, and applies fn's ops as Commit
// does before the locks are released. A row that does not exist is not
// locked (an insert of it meets a concurrent one at the key's index).
func (b *Tables) CommitExclusive(ctx context.Context, keys []string, fn func(cur []cas.Item) ([]cas.Op, error)) ([]cas.Version, error) {
	if len(keys) == 0 {
		return nil, fmt.Errorf("rowupdate: txn: %w: no rows", cas.ErrInvalidCommit)
	}
	checks := make([]cas.Op, len(keys))
	for i, k := range keys {
		checks[i] = cas.Check(k, 0)
	}
	rs, order, err := resolve(ctx, checks)
	if err != nil {
		return nil, err
	}
	var (
		vs       []cas.Version
		keep     []func()
		conflict *cas.ConflictError
		fnErr    error
	)
	err = rs[order[0]].m.begin(ctx, func(tx any) error {
		cur := make([]cas.Item, len(keys))
		for _, i := range order {
			row, err := rs[i].m.lock(ctx, tx, rs[i].key)
			if err != nil {
				return err
			}
			cur[i] = cas.Item{Key: keys[i], Value: row.Value, Version: row.Version}
		}
		// fn reads rows not among keys through this transaction: on
		// another connection they could wait for a pool that holders of
		// these locks have filled.
		rsx, _ := ctx.Value(refsCtx{}).(*refs)
		if rsx != nil {
			rsx.setTx(tx)
		}
		ops, err := fn(cur)
		if rsx != nil {
			rsx.setTx(nil)
		}
		if err != nil {
			fnErr = err
			return err
		}
		if len(ops) == 0 {
			return nil
		}
		ors, oorder, err := resolve(ctx, ops)
		if err != nil {
			return err
		}
		vs, keep, conflict, err = apply(ctx, tx, ops, ors, oorder)
		if conflict != nil {
			return conflict
		}
		return err
	})
	switch {
	case err == nil:
		for _, done := range keep {
			done()
		}
		return vs, nil
	case fnErr != nil && errors.Is(err, fnErr):
		return nil, fnErr
	case conflict != nil && errors.Is(err, conflict):
		return nil, conflict
	}
	return nil, err
}

// resolve returns what each op's key names and the order to apply ops
// in: by table name, then by key. Every row must be of one database, and
// reached through one Table.
func resolve(ctx context.Context, ops []cas.Op) ([]ref, []int, error) {
	rs := make([]ref, len(ops))
	type row struct {
		table, key string
	}
	through := map[row]member{}
	for i, op := range ops {
		r, err := refOf(ctx, op.Key)
		if err != nil {
			return nil, nil, err
		}
		switch {
		case op.Kind == cas.OpPut:
		case op.Kind == cas.OpCheck && op.Expected == 0:
		default:
			return nil, nil, fmt.Errorf("rowupdate: txn: op %d on %q: %w", i, op.Key, errors.ErrUnsupported)
		}
		if i > 0 && r.m.database() != rs[0].m.database() {
			return nil, nil, fmt.Errorf("rowupdate: txn: %s and %s are tables of different databases (pools): one transaction writes one database", rs[0].m.tableName(), r.m.tableName())
		}
		k := row{r.m.tableName(), fmt.Sprint(r.key)}
		if m, ok := through[k]; ok && m != r.m {
			return nil, nil, fmt.Errorf("rowupdate: txn: the row %v of %s is read or written through two Table values: use one Table per table", r.key, k.table)
		}
		through[k] = r.m
		rs[i] = r
	}
	order := make([]int, len(ops))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(x, y int) int {
		if c := strings.Compare(rs[x].m.tableName(), rs[y].m.tableName()); c != 0 {
			return c
		}
		return CmpKeys(rs[x].key, rs[y].key)
	})
	return rs, order, nil
}

// apply applies ops in tx, in order. The first conflict ends it, under the
// key occ asked for, with the current row as a handle, to retry from.
// keep makes the written rows' handles hold them as stored: to call once
// tx committed.
func apply(ctx context.Context, tx any, ops []cas.Op, rs []ref, order []int) ([]cas.Version, []func(), *cas.ConflictError, error) {
	vs := make([]cas.Version, len(ops))
	var keep []func()
	for _, i := range order {
		op, r := ops[i], rs[i]
		var (
			cur Row[[]byte]
			err error
		)
		if op.Kind == cas.OpCheck {
			cur, err = r.m.absent(ctx, tx, r.key)
			if err == nil && cur.Version != 0 {
				err = &cas.ConflictError{Key: op.Key, HasCurrent: true}
			}
		} else {
			if op.Expected == 0 {
				err = r.m.lockAbsent(ctx, tx, r.key)
			}
			if err == nil {
				var done func()
				vs[i], done, cur, err = r.m.write(ctx, tx, r.key, op.Expected, op.Value)
				if err == nil {
					keep = append(keep, done)
				}
			}
		}
		var ce *cas.ConflictError
		if errors.As(err, &ce) {
			hint := *ce
			hint.Key, hint.Expected = op.Key, op.Expected
			hint.Current = cas.Item{Key: op.Key, Value: cur.Value, Version: cur.Version}
			return nil, nil, &hint, nil
		}
		if err != nil {
			return nil, nil, nil, err
		}
	}
	return vs, keep, nil, nil
}
