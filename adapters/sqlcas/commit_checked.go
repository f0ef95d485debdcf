package sqlcas

// Checked commits (MySQL/MariaDB): the commit of ops that all write keys
// expected live as one UPDATE that checks every version (commitChecked;
// on MariaDB commitStrict, with no transaction), and the compound
// statements that MariaDB runs (blockOf for the tables' commits).

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/internal/writeid"
)

// checkedApplies reports whether a commit can skip the locking read:
// every op writes (a put or a delete) a key expected live.
func checkedApplies(ops []cas.Op) bool {
	for _, op := range ops {
		if op.Kind == cas.OpCheck || op.Expected == 0 {
			return false
		}
	}
	return true
}

// commitChecked is the commit of ops that all write keys expected live,
// in one statement instead of a locking read and a write (MySQL/MariaDB):
// the UPDATE writes the rows still at their expected versions (a row lock
// on each, taken in key order as InnoDB looks the IN list up) and counts
// them. All of
// them: done. Fewer: errCheckedShort, on which Commit rolls back and
// reads the conflict's current item (checkedConflict).
func (s *Store) commitChecked(ctx context.Context, q Querier, ops []cas.Op, id writeid.ID) (vs []cas.Version, stage string, err error) {
	vs, args, puts := checkedArgs(ops, id)
	res, err := q.ExecContext(ctx, s.cm.applyChecked(len(ops), puts), args...)
	if err != nil {
		return nil, "write", err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return nil, "write", err
	}
	if n == int64(len(ops)) {
		return vs, "", nil
	}
	return nil, "", errCheckedShort
}

// checkedArgs returns the arguments of applyChecked for ops, how many of
// them are puts, and the versions the commit gives them if it applies.
func checkedArgs(ops []cas.Op, id writeid.ID) (vs []cas.Version, args []any, puts int) {
	vs = make([]cas.Version, len(ops))
	var writeArgs, putArgs, inArgs, checkArgs []any
	for i, op := range ops {
		v := op.Value
		if op.Kind == cas.OpDelete {
			v = nil
		} else if v == nil {
			v = []byte{}
		}
		writeArgs = append(writeArgs, op.Key, v)
		if op.Kind == cas.OpPut {
			putArgs = append(putArgs, op.Key)
			vs[i] = op.Expected + 1
		}
		inArgs = append(inArgs, op.Key)
		checkArgs = append(checkArgs, op.Key, int64(op.Expected))
	}
	return vs, slices.Concat(writeArgs, putArgs, []any{id[:]}, inArgs, checkArgs), len(putArgs)
}

// errCheckedShort is commitChecked's error when some row was not at its
// expected version: Commit rolls back, then reads the conflict's current
// item (checkedConflict). Read before the rollback, the rows the UPDATE
// did write would show its own uncommitted state.
var errCheckedShort = errors.New("sqlcas: commit: a row was not at its expected version")

// checkedConflict is the conflict of a commit that commitChecked refused:
// the first op in ops order whose key moved, with its current item.
func (s *Store) checkedConflict(ctx context.Context, ops []cas.Op) error {
	keys := make([]string, len(ops))
	for i, op := range ops {
		keys[i] = op.Key
	}
	cur, err := s.GetMany(ctx, keys)
	if err != nil {
		return &cas.ConflictError{Key: ops[0].Key, Expected: ops[0].Expected, Err: fmt.Errorf("%w (reading the current items: %w)", errCheckedShort, err)}
	}
	for i, op := range ops {
		if cur[i].Version != op.Expected {
			return &cas.ConflictError{Key: op.Key, Expected: op.Expected, Current: cur[i], HasCurrent: true}
		}
	}
	// Every key is back at its expected version... which versions that
	// never repeat rule out, unless the rows moved on and were read
	// stale: a conflict without a current item.
	return &cas.ConflictError{Key: ops[0].Key, Expected: ops[0].Expected, Err: errCheckedShort}
}

// Store.blocks and Store.strict (likewise Table.blocks): whether the
// server runs MariaDB's compound statements, and its SET STATEMENT ... FOR.
const (
	blocksUnknown int32 = iota
	blocksRun           // MariaDB
	blocksRefused       // MySQL: a syntax error, nothing ran
)

// noConnError is the failure to take a connection from the pool before a
// block: the block was not sent (notSent).
type noConnError struct{ err error }

func (e *noConnError) Error() string { return "sqlcas: no connection: " + e.err.Error() }
func (e *noConnError) Unwrap() error { return e.err }

// onConn runs f on a connection taken from q first when q is a pool (q
// itself otherwise), so that a failure to get one, which a statement sent
// on the pool would not tell from a lost reply (a deadline that ended
// while it waited for a connection), is a *noConnError: certainly not
// sent.
func onConn(ctx context.Context, q Querier, f func(Querier) error) error {
	p, ok := q.(pooled)
	if !ok {
		return f(q)
	}
	c, err := p.Conn(ctx)
	if err != nil {
		return &noConnError{err}
	}
	defer c.Close()
	return f(c)
}

// refusesBlocks reports whether err is the server's refusal of a block
// (MySQL's syntax error: nothing ran) on a store or table that has not
// run one, and then marks blocks refused.
func refusesBlocks(err error, blocks *atomic.Int32) bool {
	if me, ok := asMySQL(err); !ok || me.Number != 1064 || blocks.Load() == blocksRun { // ER_PARSE_ERROR
		return false
	}
	blocks.Store(blocksRefused)
	return true
}

// blockHandler starts a block's transaction, after an exit handler that
// rolls it back on any server error and raises the error as it was (so
// that no transaction stays open on the connection).
const blockHandler = heldHandler + "START TRANSACTION;\n"

// heldHandler is blockHandler for a block that runs in a transaction
// already open on its connection.
const heldHandler = "DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN ROLLBACK; RESIGNAL; END;\n"

// sendBlock runs blockOf(stmts) on a connection of q, unless blocks says
// the server refuses blocks: ran is false then, or when this one was
// refused (MySQL: nothing ran), and the caller commits another way.
// short is the index of the statement that wrote too few rows, -1 when
// the block committed.
func sendBlock(ctx context.Context, q Querier, blocks *atomic.Int32, stmts []blockStmt) (short int, ran bool, err error) {
	if blocks.Load() == blocksRefused {
		return 0, false, nil
	}
	text, args := blockOf(stmts)
	err = onConn(ctx, q, func(q Querier) error { return q.QueryRowContext(ctx, text, args...).Scan(&short) })
	switch {
	case err == nil:
		blocks.Store(blocksRun)
		return short, true, nil
	case refusesBlocks(err, blocks):
		return 0, false, nil
	}
	return 0, true, err
}

// blockStmt is a statement of a block and the rows it must write.
type blockStmt struct {
	text string
	args []any
	rows int
}

// blockOf returns one compound statement (MariaDB's BEGIN NOT ATOMIC)
// that runs stmts in a transaction of its own and stops at the first that
// wrote fewer rows than it must: it then rolls back and answers that
// statement's index; when every one wrote its rows it commits and answers
// -1. A server error inside rolls back and is raised as it was.
func blockOf(stmts []blockStmt) (string, []any) { return blockIn(stmts, true) }

// blockIn is blockOf; with start false the block runs in the transaction
// already open on its connection (one that holds the rows' locks) instead
// of starting its own, and commits or rolls back that one.
func blockIn(stmts []blockStmt, start bool) (string, []any) {
	var b strings.Builder
	var args []any
	head := blockHandler
	if !start {
		head = heldHandler
	}
	b.WriteString("BEGIN NOT ATOMIC\nDECLARE r INT DEFAULT -1;\n" + head)
	for i, st := range stmts {
		if i > 0 {
			b.WriteString("IF r < 0 THEN ")
		}
		fmt.Fprintf(&b, "%s; IF ROW_COUNT() <> %d THEN SET r = %d; END IF;", st.text, st.rows, i)
		if i > 0 {
			b.WriteString(" END IF;")
		}
		b.WriteString("\n")
		args = append(args, st.args...)
	}
	b.WriteString("IF r < 0 THEN COMMIT; ELSE ROLLBACK; END IF;\nSELECT r;\nEND")
	return b.String(), args
}
