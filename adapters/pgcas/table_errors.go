package pgcas

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/occkit/occkit/cas"
)

// keyIndex names a unique index (or the primary key or unique constraint
// it backs: they share its name) on a Table's key column alone, as a
// unique violation names it.
type keyIndex struct{ schema, table, index string }

// sqlKeyIndexes lists the keyIndexes of a table and of its partitions (a
// violation names the partition's index): $1 the quoted table, $2 the key
// column.
const sqlKeyIndexes = `WITH rels AS (
    SELECT $1::regclass::oid AS relid
    UNION SELECT relid FROM pg_partition_tree($1::regclass))
SELECT n.nspname::text, c.relname::text, ic.relname::text
FROM rels r
JOIN pg_class c ON c.oid = r.relid
JOIN pg_namespace n ON n.oid = c.relnamespace
JOIN pg_attribute a ON a.attrelid = c.oid AND a.attname = $2 AND NOT a.attisdropped
JOIN pg_index i ON i.indrelid = c.oid AND i.indisunique AND i.indnkeyatts = 1 AND i.indkey[0] = a.attnum
JOIN pg_class ic ON ic.oid = i.indexrelid`

// violatesKey reports whether pgErr, a unique violation of an INSERT into
// t's table, is the violation of a unique index on the key column alone
// (so a row with the key exists), and not of another unique column, or
// of a table a trigger wrote. The key's indexes are looked up on the
// first such violation and kept; a failed lookup is tried again next time.
func (t *Table[T]) violatesKey(ctx context.Context, pgErr *pgconn.PgError) (bool, error) {
	t.keys.mu.Lock()
	defer t.keys.mu.Unlock()
	if err := t.lookUpKeyIndexes(ctx); err != nil {
		return false, err
	}
	return slices.Contains(t.keys.idx, keyIndex{pgErr.SchemaName, pgErr.TableName, pgErr.ConstraintName}), nil
}

// lookUpKeyIndexes looks the key's unique indexes up unless they are
// known; t.keys.mu must be held.
//
// Inside the Table's own transaction (an exclusive update, a ModifyMany
// commit), whose connection this call holds, it does not wait for
// another connection of the pool, which transactions like it could all
// be holding: those look the indexes up before they begin (see
// knowKeyIndexes), and if that failed, the lookup runs on a connection of
// its own. (ModifyMany calls that read rows as absent from a lagging
// replica, all inserting them at once, waited for each other so.)
func (t *Table[T]) lookUpKeyIndexes(ctx context.Context) error {
	if t.keys.idx != nil {
		return nil
	}
	var rows pgx.Rows
	if t.q == querier(t.pool) {
		rows, _ = t.pool.Query(ctx, sqlKeyIndexes, t.name, t.layout.KeyColumn().Name)
	} else {
		conn, err := pgx.ConnectConfig(ctx, t.pool.Config().ConnConfig)
		if err != nil {
			return err
		}
		defer conn.Close(context.WithoutCancel(ctx))
		rows, _ = conn.Query(ctx, sqlKeyIndexes, t.name, t.layout.KeyColumn().Name)
	}
	idx, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (ki keyIndex, err error) {
		err = row.Scan(&ki.schema, &ki.table, &ki.index)
		return ki, err
	})
	if err != nil {
		return err
	}
	t.keys.idx = append([]keyIndex{}, idx...) // non-nil: looked up
	return nil
}

// knowKeyIndexes looks the key's unique indexes up, on the pool, before a
// transaction of the Table's own that may insert takes a connection, so
// that a unique violation inside it needs no second connection. A failure
// is left for violatesKey to meet again.
func (t *Table[T]) knowKeyIndexes(ctx context.Context) {
	t.keys.mu.Lock()
	defer t.keys.mu.Unlock()
	_ = t.lookUpKeyIndexes(ctx)
}

func (t *Table[T]) opError(op string, key any, err error) error {
	return fmt.Errorf("pgcas: %s %s key %v: %w", op, t.name, key, err)
}

// writeError maps the failure of a conditional write. A row of an
// application table carries no write id, so a lost reply stays ambiguous.
func (t *Table[T]) writeError(_ context.Context, op string, key any, err error) error {
	var pgErr *pgconn.PgError
	switch {
	case errors.As(err, &pgErr) && (pgErr.Code == codeSerializationFailure || pgErr.Code == codeDeadlockDetected):
		return &cas.ConflictError{Key: fmt.Sprint(key), Err: pgErr}
	case errors.As(err, &pgErr) && pgErr.Code == codeUndefinedTable && t.namesSequence(pgErr):
		return t.opError(op, key, t.missingSequence(err))
	case errors.As(err, &pgErr), !sent(err):
		return t.opError(op, key, err)
	}
	return &cas.AmbiguousError{Op: op, Key: fmt.Sprint(key), Err: err}
}

// sequenceName returns the parts (schema, name) of the version sequence,
// unquoted, from the nextval() the statements use.
func (t *Table[T]) sequenceName() []string {
	q := strings.TrimSuffix(strings.TrimPrefix(t.nextval, "nextval('"), "'::regclass)")
	return unquoteIdentifier(strings.ReplaceAll(q, "''", "'"))
}

// namesSequence reports whether pgErr, an undefined_table error, is about
// the version sequence (and not the table): PostgreSQL names the relation
// it did not find, qualified as it was written.
func (t *Table[T]) namesSequence(pgErr *pgconn.PgError) bool {
	return strings.Contains(pgErr.Message, `"`+strings.Join(t.sequenceName(), ".")+`"`)
}

// missingSequence wraps err, a write's failure for want of the version
// sequence, with what names the sequence and the migration that makes it.
func (t *Table[T]) missingSequence(err error) error {
	seq := pgx.Identifier(t.sequenceName()).Sanitize()
	return fmt.Errorf("version sequence %s does not exist (TableConfig.VersionSequence; empty means "+
		"\"<table>_<version column>_seq\", the sequence of a bigserial version column): create it in a migration, "+
		"CREATE SEQUENCE %s starting above the table's largest version (docs/postgres.md): %w", seq, seq, err)
}

// unquoteIdentifier splits a possibly qualified identifier whose parts
// are quoted as pgx.Identifier.Sanitize quotes them ("a"."b") into its
// unquoted parts.
func unquoteIdentifier(s string) []string {
	var parts []string
	var cur strings.Builder
	quoted := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' && quoted && i+1 < len(s) && s[i+1] == '"':
			cur.WriteByte('"')
			i++
		case c == '"':
			quoted = !quoted
		case c == '.' && !quoted:
			parts = append(parts, cur.String())
			cur.Reset()
		default:
			cur.WriteByte(c)
		}
	}
	return append(parts, cur.String())
}
