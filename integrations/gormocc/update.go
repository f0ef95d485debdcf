package gormocc

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"
	"gorm.io/gorm/schema"

	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/internal/rowupdate"
	"github.com/occkit/occkit/occ"
)

// Update is a read-modify-write of one row with retry: it reads the row
// whose primary key key holds (key is a model with its primary key set;
// its other fields are ignored), calls mutate on it, and saves it with
// the version check. When another writer saved the row in between, the
// save fails with a conflict and Update calls mutate again on the current
// row, as occ.Update does over a store, on the same machinery: calls of
// one process take turns at a hot row, occ.WithCombiner(c) makes
// concurrent calls of one row share one save (each caller gets the model
// after its own mutate), and WithMaxAttempts, backoff, budgets and
// observers are occ's options. It returns the model as its mutate left
// it, with its new version.
//
// mutate may run several times and must depend only on the model it gets
// (it must not modify what the model's slices or maps refer to: a combined
// call hands one call's model to the next); an error from it ends the loop
// and is returned as is. A missing row fails with an error matching both
// cas.ErrNotFound and gorm.ErrRecordNotFound. db must have the Plugin
// registered; call Update outside a transaction (each attempt is its own;
// a db bound to a transaction takes no turns and combines nothing).
//
//	item, err := gormocc.Update(ctx, db, Item{ID: 42}, func(it *Item) error {
//		if it.Stock == 0 {
//			return ErrSoldOut // not retried
//		}
//		it.Stock--
//		return nil
//	})
func Update[T any](ctx context.Context, db *gorm.DB, key T, mutate func(m *T) error, opts ...occ.Option) (T, error) {
	var zero T
	if _, ok := db.Config.Plugins[Plugin{}.Name()]; !ok {
		return zero, errors.New("gormocc: Update needs db.Use(gormocc.Plugin{})")
	}
	r, err := rowsFor[T](db, &key)
	if err != nil {
		return zero, err
	}
	text, err := r.keyText(ctx, &key)
	if err != nil {
		return zero, err
	}
	return r.rows.Modify(ctx, rowupdate.Key[T]{Text: text, Value: key}, func(cur T, exists bool) (T, error) {
		if !exists {
			return cur, fmt.Errorf("gormocc: update %s: %w: %w", text, cas.ErrNotFound, gorm.ErrRecordNotFound)
		}
		err := mutate(&cur)
		return cur, err
	}, opts...)
}

// modelRows is the bridge of one model's table in one database onto occ.
type modelRows[T any] struct {
	rows    *rowupdate.Rows[T]
	schema  *schema.Schema
	version *schema.Field
}

// bridgeKey names a bridge: one per database (its config and connection
// pool), model type and table.
type bridgeKey struct {
	config *gorm.Config
	pool   gorm.ConnPool
	model  reflect.Type
	table  string
}

var bridges sync.Map // bridgeKey → *modelRows[T]

// rowsFor returns the bridge of T's table in db: the one the process
// shares, or a bridge of its own for a db bound to a transaction (rows of
// two transactions never share a write) or whose pool cannot be a key.
func rowsFor[T any](db *gorm.DB, model *T) (*modelRows[T], error) {
	stmt := &gorm.Statement{DB: db}
	if err := stmt.Parse(model); err != nil {
		return nil, fmt.Errorf("gormocc: Update: %w", err)
	}
	vf := versionField(stmt.Schema)
	if vf == nil {
		return nil, fmt.Errorf("gormocc: Update: %s has no field of type gormocc.Version", stmt.Schema.Name)
	}
	if len(stmt.Schema.PrimaryFields) == 0 {
		return nil, fmt.Errorf("gormocc: Update: %s has no primary key", stmt.Schema.Name)
	}
	table := stmt.Table
	if db.Statement != nil && db.Statement.Table != "" {
		table = db.Statement.Table
	}
	pool := db.Statement.ConnPool
	_, inTx := pool.(gorm.TxCommitter)
	shared := !inTx && pool != nil && reflect.TypeOf(pool).Comparable()
	k := bridgeKey{config: db.Config, pool: pool, model: reflect.TypeFor[T](), table: table}
	if shared {
		if r, ok := bridges.Load(k); ok {
			return r.(*modelRows[T]), nil
		}
	}
	r := &modelRows[T]{schema: stmt.Schema, version: vf}
	// The bridge reads and writes through a session of its own (the
	// caller's may carry conditions of a chain), on the caller's table.
	base := db.Session(&gorm.Session{NewDB: true})
	if db.Statement.Table != "" {
		base = base.Table(table).Session(&gorm.Session{})
	}
	db = base
	d := rowupdate.Driver[T]{
		Read: func(ctx context.Context, key any) (rowupdate.Row[T], error) { return r.read(ctx, db, key.(T)) },
		Write: func(ctx context.Context, key any, expected cas.Version, next T) (rowupdate.Row[T], rowupdate.Row[T], error) {
			return r.write(ctx, db, key.(T), expected, next)
		},
		SetVersion: r.setVersion,
	}
	switch db.Dialector.Name() {
	case "postgres", "mysql":
		// A call that keeps losing holds the row (SELECT ... FOR UPDATE)
		// for one attempt; SQLite has a single writer anyway.
		d.Exclusive = func(ctx context.Context, key any, fn func(rowupdate.Row[T]) (T, bool, error)) (rowupdate.Row[T], error) {
			return r.exclusive(ctx, db, key.(T), fn)
		}
	}
	r.rows = rowupdate.New(d)
	if shared {
		got, _ := bridges.LoadOrStore(k, r)
		return got.(*modelRows[T]), nil
	}
	return r, nil
}

// keyText is the row's table and primary key values, as rowKey makes
// them.
func (r *modelRows[T]) keyText(ctx context.Context, m *T) (string, error) {
	rv := reflect.ValueOf(m).Elem()
	parts := []string{r.schema.Table}
	for _, pf := range r.schema.PrimaryFields {
		v, zero := pf.ValueOf(ctx, rv)
		if zero {
			return "", &cas.KeyError{Op: "update", Key: strings.Join(parts, "/"), Err: fmt.Errorf("%w: the model's primary key field %s is not set", cas.ErrInvalidKey, pf.Name)}
		}
		parts = append(parts, fmt.Sprint(v))
	}
	return strings.Join(parts, "/"), nil
}

func (r *modelRows[T]) versionOf(ctx context.Context, m *T) cas.Version {
	v, _ := r.version.ValueOf(ctx, reflect.ValueOf(m).Elem())
	n, _ := v.(Version)
	return n.CAS()
}

func (r *modelRows[T]) setVersion(m *T, v cas.Version) error {
	return r.version.Set(context.Background(), reflect.ValueOf(m).Elem(), Version(v))
}

// read takes the row key names; absent: version 0.
func (r *modelRows[T]) read(ctx context.Context, db *gorm.DB, key T) (rowupdate.Row[T], error) {
	m := key
	if err := db.WithContext(ctx).Take(&m).Error; err != nil {
		if errors.Is(err, gorm.ErrRecordNotFound) {
			return rowupdate.Row[T]{}, nil
		}
		return rowupdate.Row[T]{}, err
	}
	return rowupdate.Row[T]{Value: m, Version: r.versionOf(ctx, &m)}, nil
}

// write saves next if the row is at version expected; a conflict carries
// the current row, read after the refused save.
func (r *modelRows[T]) write(ctx context.Context, db *gorm.DB, key T, expected cas.Version, next T) (rowupdate.Row[T], rowupdate.Row[T], error) {
	if expected == 0 {
		// Update never creates: the mutate of an absent row fails first.
		return rowupdate.Row[T]{}, rowupdate.Row[T]{}, fmt.Errorf("gormocc: update: %w: %w", cas.ErrNotFound, gorm.ErrRecordNotFound)
	}
	if err := r.setVersion(&next, expected); err != nil {
		return rowupdate.Row[T]{}, rowupdate.Row[T]{}, err
	}
	err := db.WithContext(ctx).Save(&next).Error
	if err == nil {
		return rowupdate.Row[T]{Value: next, Version: r.versionOf(ctx, &next)}, rowupdate.Row[T]{}, nil
	}
	var ce *cas.ConflictError
	if !errors.As(err, &ce) {
		return rowupdate.Row[T]{}, rowupdate.Row[T]{}, err
	}
	cur, rerr := r.read(ctx, db, key)
	if rerr != nil {
		// The conflict stands; occ reads again after its wait.
		ce.HasCurrent = false
		return rowupdate.Row[T]{}, rowupdate.Row[T]{}, err
	}
	ce.HasCurrent, ce.Current.Version = true, cur.Version
	return rowupdate.Row[T]{}, cur, err
}

// exclusiveTimeout bounds, on PostgreSQL, how long an exclusive attempt
// may hold the row while its holder does not answer: the server ends a
// session idle in its transaction for longer, which frees the row.
const exclusiveTimeout = "2000" // ms

// exclusive is the attempt Update escalates to for a call that keeps
// losing to writers in other processes: in one transaction it reads the
// row FOR UPDATE (other writers wait for the lock, then find their
// version gone), calls fn, and saves what fn returns.
func (r *modelRows[T]) exclusive(ctx context.Context, db *gorm.DB, key T, fn func(rowupdate.Row[T]) (T, bool, error)) (rowupdate.Row[T], error) {
	var out rowupdate.Row[T]
	err := db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if tx.Dialector.Name() == "postgres" {
			if err := tx.Exec("SELECT set_config('idle_in_transaction_session_timeout', ?, true)", exclusiveTimeout).Error; err != nil {
				return err
			}
		}
		m := key
		var cur rowupdate.Row[T]
		switch err := tx.Clauses(clause.Locking{Strength: "UPDATE"}).Take(&m).Error; {
		case errors.Is(err, gorm.ErrRecordNotFound):
		case err != nil:
			return err
		default:
			cur = rowupdate.Row[T]{Value: m, Version: r.versionOf(ctx, &m)}
		}
		next, write, err := fn(cur)
		if err != nil {
			return err
		}
		if !write {
			out = cur
			return nil
		}
		if cur.Version == 0 {
			return fmt.Errorf("gormocc: update: %w: %w", cas.ErrNotFound, gorm.ErrRecordNotFound)
		}
		if err := r.setVersion(&next, cur.Version); err != nil {
			return err
		}
		if err := tx.Save(&next).Error; err != nil {
			return err
		}
		out = rowupdate.Row[T]{Value: next, Version: r.versionOf(ctx, &next)}
		return nil
	})
	if err != nil {
		return rowupdate.Row[T]{}, err
	}
	return out, nil
}
