// Package sqlrows reads what the SQL adapters read alike: pgcas (pgx) and
// sqlcas (database/sql) both get their result rows as a set with Next,
// Scan and Err (a single row with Scan), so the reads of one key (Get),
// the loops over the rows of a batch read (GetMany) and
// of a commit's read-back (resolving a lost reply by write id) and of a
// repository table's batch read (All) are
// written once, here. Each adapter still sends its own statement and
// wraps the errors in its own.
package sqlrows

import (
	"database/sql"
	"errors"

	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/internal/writeid"
)

// Rows is a result set as pgx.Rows and *sql.Rows both are. The caller
// closes it.
type Rows interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
}

// Row is a one-row result as pgx.Row and *sql.Row both are.
type Row interface {
	Scan(dest ...any) error
}

// Item reads row, the (value, version) of key, as a Store's Get returns
// it: no row is an error matching cas.ErrNotFound (pgx.ErrNoRows wraps
// sql.ErrNoRows), a NULL value reads as empty, and any other failure is
// returned wrapped by readError.
func Item(key string, row Row, readError func(err error) error) (cas.Item, error) {
	var (
		value   []byte
		version int64
	)
	err := row.Scan(&value, &version)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return cas.Item{}, &cas.KeyError{Op: "get", Key: key, Err: cas.ErrNotFound}
	case err != nil:
		return cas.Item{}, readError(err)
	}
	if value == nil {
		value = []byte{}
	}
	return cas.Item{Key: key, Value: value, Version: cas.Version(version)}, nil
}

// Items reads rows of (key, value, version), the rows of keys that exist,
// into the items of keys in keys' order: a key without a row stays an
// absent cas.Item{Key: key}, a NULL value reads as empty, and a row whose
// key is not one of keys (a collation that matched another spelling) is
// passed over.
func Items(keys []string, rows Rows) ([]cas.Item, error) {
	out := make([]cas.Item, len(keys))
	at := make(map[string]int, len(keys))
	for i, k := range keys {
		out[i] = cas.Item{Key: k}
		at[k] = i
	}
	for rows.Next() {
		var (
			k       string
			value   []byte
			version int64
		)
		if err := rows.Scan(&k, &value, &version); err != nil {
			return nil, err
		}
		i, ok := at[k]
		if !ok {
			continue
		}
		if value == nil {
			value = []byte{}
		}
		out[i] = cas.Item{Key: k, Value: value, Version: cas.Version(version)}
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return out, nil
}

// All reads every row of rows into a T, through the scan targets targets
// returns for it: the rows of a repository table's batch read, whole.
func All[T any](rows Rows, targets func(row *T) []any) ([]T, error) {
	var out []T
	for rows.Next() {
		var row T
		if err := rows.Scan(targets(&row)...); err != nil {
			return nil, err
		}
		out = append(out, row)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return out, nil
}

// WrittenKeys returns the keys ops put or delete, in ops' order.
func WrittenKeys(ops []cas.Op) []string {
	var keys []string
	for _, op := range ops {
		if op.Kind != cas.OpCheck {
			keys = append(keys, op.Key)
		}
	}
	return keys
}

// Resolve reads rows of (key, version, deleted, write id), the read-back
// of the keys a commit tagged id wrote (WrittenKeys), and reports whether
// the commit applied: a commit is atomic, so id on every written key,
// each a tombstone exactly where the commit deleted it, proves it did.
// The versions it returns, one per op as Committer.Commit returns them,
// are known only if no key was written since, and the outcome counts as
// resolved (true) only then; a scan that fails resolves nothing. The
// write id column may be a PostgreSQL uuid (pgx gives it as [16]byte) or
// bytes (a BINARY(16), BLOB or bytea column).
func Resolve(ops []cas.Op, id writeid.ID, rows Rows) ([]cas.Version, bool) {
	type row struct {
		version int64
		deleted bool
		id      writeid.ID
	}
	found := map[string]row{}
	for rows.Next() {
		var (
			k   string
			r   row
			raw any
		)
		if err := rows.Scan(&k, &r.version, &r.deleted, &raw); err != nil {
			return nil, false
		}
		r.id = idOf(raw)
		found[k] = r
	}
	if rows.Err() != nil {
		return nil, false
	}
	out := make([]cas.Version, len(ops))
	for i, op := range ops {
		switch op.Kind {
		case cas.OpCheck:
			out[i] = op.Expected
		case cas.OpPut, cas.OpDelete:
			r, ok := found[op.Key]
			if !ok || r.id != id || r.deleted != (op.Kind == cas.OpDelete) {
				return nil, false
			}
			if op.Kind == cas.OpPut {
				out[i] = cas.Version(r.version)
			}
		}
	}
	return out, true
}

// ResolveOne reads row, the (version, deleted, write id) of the key a
// single write tagged id read back, and reports whether that write
// applied, with the version it made: id on the row, a tombstone exactly
// where the write was a delete (del; its version is then 0). A scan that
// fails resolves nothing. The write id column is as Resolve's.
func ResolveOne(row Row, id writeid.ID, del bool) (cas.Version, bool) {
	var (
		version int64
		deleted bool
		raw     any
	)
	if err := row.Scan(&version, &deleted, &raw); err != nil {
		return 0, false
	}
	if idOf(raw) != id || deleted != del {
		return 0, false
	}
	if del {
		return 0, true
	}
	return cas.Version(version), true
}

// idOf is a write id column's value as scanned into an any: a PostgreSQL
// uuid ([16]byte from pgx) or bytes of the id's length; anything else (a
// NULL) is the zero id, which no write has.
func idOf(raw any) writeid.ID {
	switch raw := raw.(type) {
	case [writeid.Len]byte:
		return raw
	case []byte:
		if len(raw) == writeid.Len {
			return writeid.ID(raw)
		}
	}
	return writeid.ID{}
}
