package lab

import (
	"context"
	"errors"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/occkit/occkit/adapters/dynamocas"
	"github.com/occkit/occkit/adapters/pgcas"
	"github.com/occkit/occkit/adapters/sqlcas"
	"github.com/occkit/occkit/benchmarks/internal/backends"
	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/occ"
)

// The repository strategies over tables: the cell's data in a table of the
// application's own (a key, the workload's integer, a version column), not
// in the cell's store, read and written with the adapter's
// Table[T].Modify, as repository code does it: pgcas on postgres, sqlcas
// on mysql and sqlite, dynamocas on dynamodb. (gormocc.Update, the other
// repository path, is in strategies_gorm.go.)

var tableStrategies = []strategySpec{
	{
		Name:      "occ-table",
		Kind:      kindOptimistic,
		About:     "Table[T].Modify (pgcas, sqlcas, dynamocas) over a table of the application's own (id, n, version), with the lab's options only (no cache, no combiner): the repository's read-modify-write",
		SingleKey: true,
		OwnTable:  true,
		DefaultOn: func(b string, _ bool) bool { return tableBackends[b] },
		New: func(ctx context.Context, h *harness) (cellStrategy, error) {
			return newTableStrategy(ctx, h, false)
		},
	},
	{
		Name:      "occ-table-combine",
		Kind:      kindOptimistic,
		About:     "Table[T].Modify with occ.WithCombiner (one occ.NewCombiner per process per cell) and the table's version cache (Table.NewCache): concurrent Modify calls of one row in a process share one write, as occ-combine's updates do",
		SingleKey: true,
		OwnTable:  true,
		DefaultOn: func(b string, _ bool) bool { return tableBackends[b] },
		New: func(ctx context.Context, h *harness) (cellStrategy, error) {
			return newTableStrategy(ctx, h, true)
		},
	},
	tableTxnStrategy,
	tablesTxnStrategy,
	{
		Name:      "delta-table",
		Kind:      kindOptimistic,
		About:     "Table[T].Add (pgcas, sqlcas, dynamocas) of the n column of the application's own table: the repository's bounded delta, one statement (inventory: within cas.AtLeast(0)); no read, no conflict",
		SingleKey: true,
		OwnTable:  true,
		DefaultOn: func(b string, multiKey bool) bool { return !multiKey && tableBackends[b] },
		New:       newDeltaTable,
	},
}

// newDeltaTable makes a delta-table cell: the table made and seeded as
// occ-table's, every operation one Table.Add.
func newDeltaTable(ctx context.Context, h *harness) (cellStrategy, error) {
	if _, _, err := deltaOf(operation{w: h.Workload}); err != nil {
		return nil, err
	}
	ts, err := newTableStrategy(ctx, h, false)
	if err != nil {
		return nil, err
	}
	t := ts.(tableStrategy).t
	return deltaTableStrategy{tableStrategy: ts.(tableStrategy), add: t.add}, nil
}

// deltaTableStrategy performs an operation as one Table.Add of its row,
// and reads values as occ-table does.
type deltaTableStrategy struct {
	tableStrategy
	add func(ctx context.Context, key string, n int64, b cas.Bounds) (tableRow, error)
}

// Do adds the operation's delta to its row; a refusal is "sold out".
func (s deltaTableStrategy) Do(ctx context.Context, w int, op operation) error {
	n, b, _ := deltaOf(op)
	_, err := s.add(ctx, op.Keys[0], n, b)
	if errors.Is(err, cas.ErrBound) {
		return errDeclined
	}
	return err
}

// tableTxnStrategy is the repository path for multi-key workloads.
var tableTxnStrategy = strategySpec{
	Name:      "occ-table-txn",
	Kind:      kindOptimistic,
	About:     "Table[T].ModifyMany (pgcas, sqlcas) over a table of the application's own: a transfer between two rows as one optimistic transaction of the table, with the lab's options only",
	MultiKey:  true,
	OwnTable:  true,
	DefaultOn: func(b string, multiKey bool) bool { return multiKey && sqlTableBackends[b] },
	New: func(ctx context.Context, h *harness) (cellStrategy, error) {
		if !sqlTableBackends[h.Backend.System] {
			return nil, fmt.Errorf("ModifyMany runs on the SQL tables here (dynamocas's needs transactions, which dynalite has not): %w", errNotApplicable)
		}
		return newTableStrategy(ctx, h, false)
	},
}

// tablesTxnStrategy is the multi-table transaction API (pgcas.Txn,
// sqlcas.Txn) on the same transfers: what repository code that moves
// value between rows of several tables runs, here over one table so that
// it meets the same invariant.
var tablesTxnStrategy = strategySpec{
	Name:      "occ-tables-txn",
	Kind:      kindOptimistic,
	About:     "pgcas.Txn / sqlcas.Txn (TxPrefetch, TxGet, TxPut), the transaction over rows of several tables, moving the amount between two rows of the application's table, with the lab's options only (multi-key; default on the SQL backends)",
	MultiKey:  true,
	OwnTable:  true,
	DefaultOn: func(b string, multiKey bool) bool { return multiKey && sqlTableBackends[b] },
	New: func(ctx context.Context, h *harness) (cellStrategy, error) {
		if !sqlTableBackends[h.Backend.System] {
			return nil, fmt.Errorf("the transaction over several tables (pgcas.Txn, sqlcas.Txn) runs on the SQL tables: %w", errNotApplicable)
		}
		ts, err := newTableStrategy(ctx, h, false)
		if err != nil {
			return nil, err
		}
		t := ts.(tableStrategy)
		t.t.modifyMany = t.t.txn // every transfer through Txn
		return t, nil
	},
}

// sqlTableBackends are the backends of pgcas's and sqlcas's tables.
var sqlTableBackends = map[string]bool{backends.Postgres: true, backends.MySQL: true, backends.SQLite: true}

// tableBackends are the backends whose adapters have repository tables
// (Table[T]).
var tableBackends = map[string]bool{backends.Postgres: true, backends.MySQL: true, backends.SQLite: true, backends.DynamoDB: true}

// tableRow is a row of the repository strategies' table: the workload's
// value under its key, and the version the adapter checks. It is
// DynamoDB's item as it is; the SQL tables store it as a sqlRow.
type tableRow struct {
	ID      string      `dynamodbav:"id"`
	N       int64       `dynamodbav:"n"`
	Version cas.Version `dynamodbav:"version"`
}

// appTable is a cell's table of the application's own as the strategies
// call it: the backend adapter's Table[tableRow], its key made a string.
type appTable struct {
	modify     func(ctx context.Context, key string, mutate func(cur tableRow, exists bool) (tableRow, error), opts ...occ.Option) (tableRow, error)
	modifyMany func(ctx context.Context, keys []string, mutate func(cur []tableRow, exists []bool) ([]tableRow, error), opts ...occ.Option) ([]tableRow, error)
	get        func(ctx context.Context, key string) (tableRow, error)
	newCache   func(maxEntries int) *occ.Cache
	// add is Table.Add of the n column: a bounded delta of the row.
	add func(ctx context.Context, key string, n int64, b cas.Bounds) (tableRow, error)
	// txn is modifyMany through the package's Txn (the transaction over
	// several tables); nil where there is none.
	txn func(ctx context.Context, keys []string, mutate func(cur []tableRow, exists []bool) ([]tableRow, error), opts ...occ.Option) ([]tableRow, error)
}

// openAppTable returns the cell's table, <NS>_rows, over the backend's
// connections. It creates the table (dropped after the cell), unless
// the harness is a --procs child's, which works in its parent's.
func openAppTable(ctx context.Context, h *harness) (appTable, error) {
	if !tableBackends[h.Backend.System] {
		return appTable{}, fmt.Errorf("repository tables are pgcas's, sqlcas's and dynamocas's, not %s's: %w", h.Backend.System, errNotApplicable)
	}
	cli := h.Backend
	name := h.NS + "_rows"
	var (
		t      appTable
		create func(ctx context.Context) error
		drop   func(ctx context.Context) error
	)
	switch cli.System {
	case backends.Postgres:
		pool := cli.Postgres()
		tbl, err := pgcas.NewTable[sqlRow](pool, pgcas.TableConfig{Table: name})
		if err != nil {
			return appTable{}, err
		}
		t = sqlAppTable(tbl)
		t.txn = txnOver(pgcas.Txn,
			func(tx *pgcas.Tx, key any) (sqlRow, bool, error) { return pgcas.TxGet(tx, tbl, key) },
			func(tx *pgcas.Tx, keys ...any) error { return pgcas.TxPrefetch(tx, tbl, keys...) },
			func(tx *pgcas.Tx, row sqlRow) error { return pgcas.TxPut(tx, tbl, row) })
		// Versions from the bigserial's sequence, <table>_version_seq,
		// which pgcas.Table uses by default.
		q := cli.Table(name)
		create = func(ctx context.Context) error {
			_, err := pool.Exec(ctx, `CREATE TABLE `+q+` (id bigint PRIMARY KEY, n bigint NOT NULL, version bigserial NOT NULL)`)
			return err
		}
		drop = func(ctx context.Context) error {
			_, err := pool.Exec(ctx, `DROP TABLE IF EXISTS `+q)
			return err
		}
	case backends.MySQL, backends.SQLite:
		db := cli.SQL()
		dialect, columns := sqlcas.SQLite, `(id INTEGER PRIMARY KEY, n INTEGER NOT NULL, version INTEGER NOT NULL)`
		if cli.System == backends.MySQL {
			dialect, columns = sqlcas.MySQL, `(id BIGINT NOT NULL PRIMARY KEY, n BIGINT NOT NULL, version BIGINT NOT NULL) ENGINE=InnoDB`
		}
		tbl, err := sqlcas.NewTable[sqlRow](db, sqlcas.TableConfig{Dialect: dialect, Table: name})
		if err != nil {
			return appTable{}, err
		}
		t = sqlAppTable(tbl)
		t.txn = txnOver(sqlcas.Txn,
			func(tx *sqlcas.Tx, key any) (sqlRow, bool, error) { return sqlcas.TxGet(tx, tbl, key) },
			func(tx *sqlcas.Tx, keys ...any) error { return sqlcas.TxPrefetch(tx, tbl, keys...) },
			func(tx *sqlcas.Tx, row sqlRow) error { return sqlcas.TxPut(tx, tbl, row) })
		q := cli.Table(name)
		create = func(ctx context.Context) error {
			if _, err := db.ExecContext(ctx, `CREATE TABLE `+q+` `+columns); err != nil {
				return err
			}
			// Insert draws versions from the counter table's row for
			// this table.
			return tbl.CreateCounter(ctx)
		}
		drop = func(ctx context.Context) error {
			_, err := db.ExecContext(ctx, `DROP TABLE IF EXISTS `+q)
			if err == nil {
				_, err = db.ExecContext(ctx, `DELETE FROM `+cli.Table(sqlcas.DefaultCounterTable)+` WHERE name = ?`, name)
			}
			return err
		}
	case backends.DynamoDB:
		dyn := cli.DynamoDB()
		tbl, err := dynamocas.NewTable[tableRow](dyn, dynamocas.TableConfig{Table: name, PartitionKey: "id"})
		if err != nil {
			return appTable{}, err
		}
		t = appTable{
			modify: func(ctx context.Context, key string, mutate func(tableRow, bool) (tableRow, error), opts ...occ.Option) (tableRow, error) {
				return tbl.Modify(ctx, dynamocas.Key{Partition: key}, mutate, opts...)
			},
			get: func(ctx context.Context, key string) (tableRow, error) {
				return tbl.Get(ctx, dynamocas.Key{Partition: key})
			},
			newCache: tbl.NewCache,
			add: func(ctx context.Context, key string, n int64, b cas.Bounds) (tableRow, error) {
				return tbl.Add(ctx, dynamocas.Key{Partition: key}, "n", n, b)
			},
		}
		create = func(ctx context.Context) error {
			// A table whose partition key is the row's id: the
			// adapter's CreateTable makes it (on demand, waiting
			// until it is active) when its key attribute is "id".
			s, err := dynamocas.New(dyn, dynamocas.Config{Table: name, KeyAttribute: "id"})
			if err != nil {
				return err
			}
			return s.CreateTable(ctx)
		}
		drop = func(ctx context.Context) error {
			_, err := dyn.DeleteTable(ctx, &dynamodb.DeleteTableInput{TableName: aws.String(name)})
			return err
		}
	}
	if !h.Attached {
		if err := create(ctx); err != nil {
			return appTable{}, fmt.Errorf("creating the table %s: %w", name, err)
		}
		h.OnClose(drop)
	}
	return t, nil
}

// newTableStrategy makes an occ-table cell, or with combine an
// occ-table-combine cell: the table made and seeded (in a --procs child,
// the parent's), and the workers' options.
func newTableStrategy(ctx context.Context, h *harness, combine bool) (cellStrategy, error) {
	t, err := openAppTable(ctx, h)
	if err != nil {
		return nil, err
	}
	perWorker := h.withOptions()
	var seedOpts []occ.Option
	if combine {
		// One combiner and one cache per process, shared by its
		// workers, as a service would hold them. Seeding through the
		// cache starts it warm, as occ-combine's starts: the cell
		// measures a service that has been running a while.
		c := occ.NewCombiner()
		cache := t.newCache(2*len(h.Keys) + 16)
		seedOpts = []occ.Option{occ.WithCache(cache)}
		perWorker = h.withOptions(occ.WithCombiner(c), occ.WithCache(cache))
	}
	if !h.Attached {
		initial := h.Cell.Initial
		if err := parallel(ctx, h.Keys, func(ctx context.Context, k string) error {
			_, err := t.modify(ctx, k, func(cur tableRow, exists bool) (tableRow, error) {
				if exists {
					return cur, fmt.Errorf("row %s exists before seeding", k)
				}
				cur.N = initial
				return cur, nil
			}, seedOpts...)
			return err
		}); err != nil {
			return nil, fmt.Errorf("seeding %d rows: %w", len(h.Keys), err)
		}
	}
	return tableStrategy{t: t, opts: perWorker}, nil
}

// tableStrategy performs an operation as one Modify of its row.
type tableStrategy struct {
	t    appTable
	opts [][]occ.Option
}

// Do modifies op's row (rows, for a transfer: one ModifyMany): an absent
// row reads as 0, as occ.Update's mutate sees a missing key in the other
// strategies.
func (s tableStrategy) Do(ctx context.Context, w int, op operation) error {
	if len(op.Keys) > 1 {
		if s.t.modifyMany == nil {
			return fmt.Errorf("this table modifies one row at a time: %w", errNotApplicable)
		}
		_, err := s.t.modifyMany(ctx, op.Keys, func(cur []tableRow, _ []bool) ([]tableRow, error) {
			vals := make([]int64, len(cur))
			for i, r := range cur {
				vals[i] = r.N
			}
			if err := op.Apply(vals); err != nil {
				return nil, err
			}
			for i := range cur {
				cur[i].N = vals[i]
			}
			return cur, nil
		}, s.opts[w]...)
		return err
	}
	_, err := s.t.modify(ctx, op.Keys[0], func(cur tableRow, _ bool) (tableRow, error) {
		v := [1]int64{cur.N}
		if err := op.Apply(v[:]); err != nil {
			return cur, err
		}
		cur.N = v[0]
		return cur, nil
	}, s.opts[w]...)
	return err
}

// Close does nothing: the table is dropped after the invariant check.
func (tableStrategy) Close(context.Context) error { return nil }

// Value implements valueReader: the row's n.
func (s tableStrategy) Value(ctx context.Context, key string) (int64, error) {
	r, err := s.t.get(ctx, key)
	return r.N, err
}
