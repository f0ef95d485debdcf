package sqlcas

import (
	"context"
	"database/sql"
	"runtime"
	"sync"
	"sync/atomic"
)

// maxPrepared bounds the statement texts a store prepares: the texts of a
// commit or a batched read grow with their number of keys, so a store
// sees a few hundred at most; past the bound, texts run unprepared.
const maxPrepared = 512

// prepared holds the statements a store or table prepared on its own *sql.DB. Only
// on SQLite: modernc.org/sqlite parses a statement's text on every call
// made with the text and finalizes it when its rows close, which for a
// short write costs as much as the write (docs/performance.md); a
// prepared *sql.Stmt is parsed once per connection. MySQL with
// interpolateParams and PostgreSQL's drivers send a text in one round
// trip already. Statements run on what With was given (a caller's
// transaction or connection) are not prepared. Safe for concurrent use.
type prepared struct {
	db *sql.DB
	*stmtSet
}

// stmtSet is what a prepared holds; closed by a cleanup once its
// prepared (the store or table, and every copy With made) is gone, so
// that stores made and dropped do not leave statements open on the
// database's connections.
type stmtSet struct {
	stmts sync.Map // text → *sql.Stmt
	n     atomic.Int32
}

// close closes every statement of the set.
func (set *stmtSet) close() {
	set.stmts.Range(func(_, st any) bool {
		_ = st.(*sql.Stmt).Close()
		openPrepared.Add(-1)
		return true
	})
}

// openPrepared counts the statements prepared and not closed yet, and
// preparedTotal those ever prepared, in all stores and tables (for
// tests).
var openPrepared, preparedTotal atomic.Int64

// stmt returns text prepared on the store's database, or nil when q is
// not that database, the bound is reached, or preparing failed (the
// caller then runs the text on q, which reports the same error).
func (p *prepared) stmt(ctx context.Context, q Querier, text string) *sql.Stmt {
	if p == nil || q != Querier(p.db) {
		return nil
	}
	if st, ok := p.stmts.Load(text); ok {
		return st.(*sql.Stmt)
	}
	if p.n.Load() >= maxPrepared {
		return nil
	}
	st, err := p.db.PrepareContext(ctx, text)
	if err != nil {
		return nil
	}
	if prev, loaded := p.stmts.LoadOrStore(text, st); loaded {
		_ = st.Close()
		return prev.(*sql.Stmt)
	}
	p.n.Add(1)
	openPrepared.Add(1)
	preparedTotal.Add(1)
	return st
}

// queryRow runs text on q, prepared where it can be.
func (p *prepared) queryRow(ctx context.Context, q Querier, text string, args ...any) *sql.Row {
	if st := p.stmt(ctx, q, text); st != nil {
		row := st.QueryRowContext(ctx, args...)
		runtime.KeepAlive(p) // its cleanup closes st: not before st ran
		return row
	}
	return q.QueryRowContext(ctx, text, args...)
}

// query runs text on q, prepared where it can be.
func (p *prepared) query(ctx context.Context, q Querier, text string, args ...any) (*sql.Rows, error) {
	if st := p.stmt(ctx, q, text); st != nil {
		rows, err := st.QueryContext(ctx, args...)
		runtime.KeepAlive(p) // its cleanup closes st: not before st ran
		return rows, err
	}
	return q.QueryContext(ctx, text, args...)
}

// exec runs text on q, prepared where it can be.
func (p *prepared) exec(ctx context.Context, q Querier, text string, args ...any) (sql.Result, error) {
	if st := p.stmt(ctx, q, text); st != nil {
		res, err := st.ExecContext(ctx, args...)
		runtime.KeepAlive(p) // its cleanup closes st: not before st ran
		return res, err
	}
	return q.ExecContext(ctx, text, args...)
}

// newPrepared returns the prepared statements of a store or table of
// dialect d on db: nil (none) but on SQLite.
func newPrepared(d Dialect, db *sql.DB) *prepared {
	if d != SQLite {
		return nil
	}
	p := &prepared{db: db, stmtSet: &stmtSet{}}
	runtime.AddCleanup(p, (*stmtSet).close, p.stmtSet)
	return p
}
