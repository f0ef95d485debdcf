package rowupdate

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"

	"github.com/occkit/occkit/cas"
)

// Member is one table as a transaction of Tables reads and writes it.
// Make it once per table (NewMember) and keep it with the table.
type Member[T any] struct {
	id    string // the key prefix: distinct per member
	name  string // the table's name: the commit's order of tables
	db    any    // the database's identity (its pool): one per transaction
	rows  *TableRows[T]
	bind  func(ctx context.Context, tx any) Table[T]
	runTx func(ctx context.Context, fn func(tx any) error) error
	// pipeline, if set, sends a commit of updates in one round trip.
	pipeline *Pipeline[T]
}

// memberIDs numbers the members of the process.
var memberIDs atomic.Uint64

// NewMember returns the member of a table whose bridge is rows and whose
// name (for the order in which a commit writes its tables) is name; db
// names its database (its pool or *sql.DB, compared with ==): the rows of
// one transaction must all be of one database. bind
// returns the table bound to tx, a transaction runTx began (its Get,
// Insert and Update run in it); runTx begins a transaction of the
// table's database, runs fn in it and commits it when fn returns nil, or
// rolls it back.
func NewMember[T any](name string, db any, rows *TableRows[T], bind func(ctx context.Context, tx any) Table[T], runTx func(ctx context.Context, fn func(tx any) error) error) *Member[T] {
	return &Member[T]{id: strconv.FormatUint(memberIDs.Add(1), 10), name: name, db: db, rows: rows, bind: bind, runTx: runTx}
}

// member is a Member with its row type erased, as the commit drives it.
type member interface {
	tableName() string
	database() any
	read(ctx context.Context, key any) (Row[[]byte], error)
	readMany(ctx context.Context, keys []any) ([]Row[[]byte], error)
	write(ctx context.Context, tx any, key any, expected cas.Version, value []byte) (cas.Version, func(), Row[[]byte], error)
	readTx(ctx context.Context, tx any, key any) (Row[[]byte], error)
	absent(ctx context.Context, tx any, key any) (Row[[]byte], error)
	lockAbsent(ctx context.Context, tx any, key any) error
	lock(ctx context.Context, tx any, key any) (Row[[]byte], error)
	begin(ctx context.Context, fn func(tx any) error) error
	pipelined() bool
	pipe(ctx context.Context, queue func(batch any) error, scan func(results any) error) error
	queueWrite(batch any, expected cas.Version, value []byte) error
	scanWrite(results any, value []byte) (cas.Version, func(), Row[[]byte], error)
}

func (m *Member[T]) tableName() string { return m.name }
func (m *Member[T]) database() any     { return m.db }

// read reads the row with key, as a handle (Version 0: absent).
func (m *Member[T]) read(ctx context.Context, key any) (Row[[]byte], error) {
	row, err := m.rows.d.Read(ctx, key)
	switch {
	case errors.Is(err, cas.ErrNotFound):
		return Row[[]byte]{}, nil
	case err != nil:
		return Row[[]byte]{}, err
	}
	return m.held(row), nil
}

func (m *Member[T]) held(row Row[T]) Row[[]byte] {
	if row.Version == 0 {
		return Row[[]byte]{}
	}
	return Row[[]byte]{Value: m.rows.hold(row.Value), Version: row.Version}
}

// readMany reads the rows with keys, in one round trip where the table
// can.
func (m *Member[T]) readMany(ctx context.Context, keys []any) ([]Row[[]byte], error) {
	out := make([]Row[[]byte], len(keys))
	if m.rows.d.ReadMany == nil {
		for i, k := range keys {
			r, err := m.read(ctx, k)
			if err != nil {
				return nil, err
			}
			out[i] = r
		}
		return out, nil
	}
	rows, err := m.rows.d.ReadMany(ctx, keys)
	if err != nil {
		return nil, err
	}
	for i, r := range rows {
		out[i] = m.held(r)
	}
	return out, nil
}

// write writes the row value is a handle of at version expected (0: an
// insert) in tx, and returns its new version and keep, which makes the
// handle hold the row as stored (to call once tx committed); on a
// conflict, the current row.
func (m *Member[T]) write(ctx context.Context, tx any, key any, expected cas.Version, value []byte) (cas.Version, func(), Row[[]byte], error) {
	p, id, err := m.rows.held.load(value)
	if err != nil {
		return 0, nil, Row[[]byte]{}, err
	}
	in := m.bind(ctx, tx)
	out, err := in.WriteAt(ctx, expected, *p)
	if err != nil {
		var ce *cas.ConflictError
		if errors.As(err, &ce) && ce.HasCurrent {
			return 0, nil, m.held(Row[T]{Value: out, Version: ce.Current.Version}), err
		}
		return 0, nil, Row[[]byte]{}, err
	}
	return in.VersionOf(&out), func() { m.rows.held.replace(id, &out) }, Row[[]byte]{}, nil
}

// readTx reads the row with key in tx, without a lock.
func (m *Member[T]) readTx(ctx context.Context, tx any, key any) (Row[[]byte], error) {
	in := m.bind(ctx, tx)
	return m.readIn(ctx, in, in.Get, key)
}

// absent checks in tx that the row with key does not exist, and keeps it
// so until tx ends: under the key's absent-row lock (LockAbsent) and, where
// the table has one, with a locking read (on MySQL a gap lock); when the
// row exists, it returns it.
func (m *Member[T]) absent(ctx context.Context, tx any, key any) (Row[[]byte], error) {
	in := m.bind(ctx, tx)
	if err := m.lockAbsentIn(ctx, in, key); err != nil {
		return Row[[]byte]{}, err
	}
	if in.LockRow != nil {
		return m.readIn(ctx, in, in.LockRow, key)
	}
	return m.readIn(ctx, in, in.Get, key)
}

// lockAbsent takes, in tx, the lock that an insert of key and a check of
// its absence share, where the table has one (LockAbsent).
func (m *Member[T]) lockAbsent(ctx context.Context, tx any, key any) error {
	return m.lockAbsentIn(ctx, m.bind(ctx, tx), key)
}

func (m *Member[T]) lockAbsentIn(ctx context.Context, in Table[T], key any) error {
	if in.LockAbsent == nil {
		return nil
	}
	return in.LockAbsent(ctx, key)
}

// lock reads the row with key in tx, locking it until tx ends.
func (m *Member[T]) lock(ctx context.Context, tx any, key any) (Row[[]byte], error) {
	in := m.bind(ctx, tx)
	if in.LockRow == nil {
		return Row[[]byte]{}, fmt.Errorf("rowupdate: %s locks no rows: %w", m.name, errors.ErrUnsupported)
	}
	row, err := m.readIn(ctx, in, in.LockRow, key)
	if err == nil && row.Version == 0 {
		err = m.lockAbsentIn(ctx, in, key) // no row to lock: its absence
	}
	return row, err
}

// readIn reads the row with key through read, a method of in, as a handle
// (Version 0: absent).
func (m *Member[T]) readIn(ctx context.Context, in Table[T], read func(ctx context.Context, key any) (T, error), key any) (Row[[]byte], error) {
	row, err := read(ctx, key)
	switch {
	case errors.Is(err, cas.ErrNotFound):
		return Row[[]byte]{}, nil
	case err != nil:
		return Row[[]byte]{}, err
	}
	return m.held(Row[T]{Value: row, Version: in.VersionOf(&row)}), nil
}

func (m *Member[T]) begin(ctx context.Context, fn func(tx any) error) error { return m.runTx(ctx, fn) }

// text returns the bridge's key of the row whose key text is key.
func (m *Member[T]) text(key string) string { return m.id + "\x1f" + key }
