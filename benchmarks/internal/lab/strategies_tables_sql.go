package lab

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/occ"
)

// The SQL tables of the repository strategies: their rows (integer ids),
// the conversion from the lab's keys and rows, and the Txn of pgcas and
// sqlcas over them.

// sqlRow is a tableRow in the SQL tables, whose ids are integers, as most
// applications' are (and as MySQL's one-UPDATE commits need): key "k17"
// is id 18 (a zero id is the tables' "let the database assign it").
type sqlRow struct {
	ID      int64       `db:"id"`
	N       int64       `db:"n"`
	Version cas.Version `db:"version"`
}

func (r sqlRow) row() tableRow {
	return tableRow{ID: "k" + strconv.FormatInt(r.ID-1, 10), N: r.N, Version: r.Version}
}

func toSQLRow(r tableRow) (sqlRow, error) {
	id, err := rowID(r.ID)
	return sqlRow{ID: id, N: r.N, Version: r.Version}, err
}

// rowID is the SQL id of a lab key ("k17": 18).
func rowID(key string) (int64, error) {
	n, err := strconv.ParseInt(strings.TrimPrefix(key, "k"), 10, 64)
	if err != nil || n < 0 || !strings.HasPrefix(key, "k") {
		return 0, fmt.Errorf("lab key %q is not k<n>, n ≥ 0, which the SQL tables' integer ids need", key)
	}
	return n + 1, nil
}

// rowIDs is rowID of each key, as the tables' keys.
func rowIDs(keys []string) ([]any, error) {
	ks := make([]any, len(keys))
	for i, k := range keys {
		id, err := rowID(k)
		if err != nil {
			return nil, err
		}
		ks[i] = id
	}
	return ks, nil
}

// sqlMutate is mutate over a SQL table's rows.
func sqlMutate(mutate func(tableRow, bool) (tableRow, error)) func(sqlRow, bool) (sqlRow, error) {
	return func(cur sqlRow, exists bool) (sqlRow, error) {
		next, err := mutate(cur.row(), exists)
		if err != nil {
			return cur, err
		}
		return toSQLRow(next)
	}
}

// txnOver returns an appTable's txn over a table of a package whose Txn
// API is run, get, prefetch and put: the rows of keys read (in one round
// trip), mutate, and the rows it returns written.
func txnOver[X any](run func(ctx context.Context, fn func(tx X) error, opts ...occ.Option) error,
	get func(tx X, key any) (sqlRow, bool, error), prefetch func(tx X, keys ...any) error, put func(tx X, row sqlRow) error,
) func(ctx context.Context, keys []string, mutate func([]tableRow, []bool) ([]tableRow, error), opts ...occ.Option) ([]tableRow, error) {
	return func(ctx context.Context, keys []string, mutate func([]tableRow, []bool) ([]tableRow, error), opts ...occ.Option) ([]tableRow, error) {
		ks, err := rowIDs(keys)
		if err != nil {
			return nil, err
		}
		var out []tableRow
		err = run(ctx, func(tx X) error {
			if err := prefetch(tx, ks...); err != nil {
				return err
			}
			cur := make([]tableRow, len(ks))
			exists := make([]bool, len(ks))
			for i, k := range ks {
				r, ok, err := get(tx, k)
				if err != nil {
					return err
				}
				cur[i], exists[i] = r.row(), ok
			}
			next, err := mutate(cur, exists)
			if err != nil {
				return err
			}
			for _, r := range next {
				sr, err := toSQLRow(r)
				if err != nil {
					return err
				}
				if err := put(tx, sr); err != nil {
					return err
				}
			}
			out = next
			return nil
		}, opts...)
		return out, err
	}
}

// anyKeyTable is the method set pgcas.Table and sqlcas.Table share (keys
// of type any) that an appTable uses.
type anyKeyTable interface {
	Modify(ctx context.Context, key any, mutate func(sqlRow, bool) (sqlRow, error), opts ...occ.Option) (sqlRow, error)
	ModifyMany(ctx context.Context, keys []any, mutate func([]sqlRow, []bool) ([]sqlRow, error), opts ...occ.Option) ([]sqlRow, error)
	Get(ctx context.Context, key any) (sqlRow, error)
	NewCache(maxEntries int) *occ.Cache
	Add(ctx context.Context, key any, column string, n int64, b cas.Bounds) (sqlRow, error)
}

// sqlAppTable is the appTable of a pgcas or sqlcas table.
func sqlAppTable(tbl anyKeyTable) appTable {
	return appTable{
		modify: func(ctx context.Context, key string, mutate func(tableRow, bool) (tableRow, error), opts ...occ.Option) (tableRow, error) {
			id, err := rowID(key)
			if err != nil {
				return tableRow{}, err
			}
			r, err := tbl.Modify(ctx, id, sqlMutate(mutate), opts...)
			return r.row(), err
		},
		modifyMany: func(ctx context.Context, keys []string, mutate func([]tableRow, []bool) ([]tableRow, error), opts ...occ.Option) ([]tableRow, error) {
			ks, err := rowIDs(keys)
			if err != nil {
				return nil, err
			}
			rows, err := tbl.ModifyMany(ctx, ks, func(cur []sqlRow, exists []bool) ([]sqlRow, error) {
				in := make([]tableRow, len(cur))
				for i, r := range cur {
					in[i] = r.row()
				}
				next, err := mutate(in, exists)
				if err != nil {
					return nil, err
				}
				out := make([]sqlRow, len(next))
				for i, r := range next {
					if out[i], err = toSQLRow(r); err != nil {
						return nil, err
					}
				}
				return out, nil
			}, opts...)
			out := make([]tableRow, len(rows))
			for i, r := range rows {
				out[i] = r.row()
			}
			return out, err
		},
		get: func(ctx context.Context, key string) (tableRow, error) {
			id, err := rowID(key)
			if err != nil {
				return tableRow{}, err
			}
			r, err := tbl.Get(ctx, id)
			return r.row(), err
		},
		newCache: tbl.NewCache,
		add: func(ctx context.Context, key string, n int64, b cas.Bounds) (tableRow, error) {
			id, err := rowID(key)
			if err != nil {
				return tableRow{}, err
			}
			r, err := tbl.Add(ctx, id, "n", n, b)
			return r.row(), err
		},
	}
}
