// Package tabletest is the conformance suite for repository tables
// (pgcas.Table, sqlcas.Table, dynamocas.Table), as package castest is for
// stores: one method set, one set of errors, versions never reused across
// a delete and a later insert, and Modify on the same machinery as
// occ.Update over a store (turns at a hot row, a shared combiner, a
// version cache), checked against a real server.
//
// An adapter runs it with a Harness that makes empty tables of Row:
//
//	func TestTableConformance(t *testing.T) {
//		tabletest.Run(t, tabletest.Harness[any]{
//			New: func(t *testing.T) tabletest.Table[any] { ... a fresh table of tabletest.Row ... },
//			Key: func(id string) any { return id },
//		})
//	}
//
// A table that reads from a replica sets Harness.StaleReads, as a store
// that does sets castest's: the suite then waits for its writes to show
// instead of expecting the next read to see them.
package tabletest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/occ"
)

// Row is the row of the suite's tables: a text key in column (attribute)
// "id", an integer "n" and the version in "version". A SQL harness makes
// the table as
//
//	CREATE TABLE <name> (id <text type> PRIMARY KEY, n BIGINT NOT NULL, version BIGINT NOT NULL)
//
// with whatever makes its versions (a sequence, a counter).
type Row struct {
	ID      string      `db:"id" dynamodbav:"id"`
	N       int64       `db:"n" dynamodbav:"n"`
	Version cas.Version `db:"version" dynamodbav:"version"`
}

// Table is the method set every repository table shares (docs/tables.md),
// over rows of type Row, with keys of type K.
type Table[K any] interface {
	Get(ctx context.Context, key K) (Row, error)
	Insert(ctx context.Context, row Row) (Row, error)
	Update(ctx context.Context, row Row) (Row, error)
	Modify(ctx context.Context, key K, mutate func(cur Row, exists bool) (Row, error), opts ...occ.Option) (Row, error)
	Delete(ctx context.Context, key K, expected cas.Version) error
	NewCache(maxEntries int) *occ.Cache
	VersionOf(row Row) cas.Version
}

// Harness is what an adapter gives the suite.
type Harness[K any] struct {
	// New returns an empty table of Row private to this test, released
	// with t.Cleanup; it fails the test if it cannot make one.
	New func(t *testing.T) Table[K]
	// Key converts a row's ID to the table's key type.
	Key func(id string) K
	// InTx, if set, begins a transaction of the caller's own, calls fn
	// with tbl bound to it, and rolls the transaction back, returning
	// fn's error. A backend without one skips that test, visibly.
	InTx func(t *testing.T, tbl Table[K], fn func(tx Table[K]) error) error
	// Reopen, if set, returns another table over the same rows as tbl, as
	// another process would make it (NewTable again): the cross-process
	// test runs its calls through several such tables, whose calls take
	// no turns with each other's. Without it that test is skipped.
	Reopen func(t *testing.T, tbl Table[K]) Table[K]
	// Workers and Ops size the contention tests: Workers goroutines of
	// Ops updates each of one row (defaults 16 and 50, the shape of the
	// issue that asked for no give-ups at default options).
	Workers, Ops int
	// StaleReads says that Get and the reads of Modify and ModifyMany
	// may return an older state of a row than the latest acknowledged
	// write (a replica answers them), as castest.Harness.StaleReads says
	// of a store: each read returns a state the row had, and reads catch
	// up with the writes within a few seconds once writing stops. Writes,
	// and the current row a conflict carries, stay current. The suite
	// then reads its writes back until they show (for up to five seconds;
	// a state no stale read explains fails at once), and the mutate
	// functions that check the state they are given have an older one
	// read again (a retryable error) instead of failing.
	StaleReads bool
	// EscalatesMany says that the table's ModifyMany escalates a
	// transaction that keeps losing commits to one that holds its rows
	// (as Modify escalates to the row's exclusive path): the test of
	// ModifyMany across processes (with Reopen) runs only then.
	EscalatesMany bool
}

// Run runs every test of the suite.
func Run[K any](t *testing.T, h Harness[K]) {
	if h.New == nil || h.Key == nil {
		t.Fatal("tabletest: Harness.New and Harness.Key are required")
	}
	if h.Workers <= 0 {
		h.Workers = 16
	}
	if h.Ops <= 0 {
		h.Ops = 50
	}
	t.Run("MethodSet", h.methodSet)
	t.Run("VersionsNeverReused", h.versionsNeverReused)
	t.Run("ModifyCreatesAndRefuses", h.modifyCreatesAndRefuses)
	t.Run("ModifyHotRowDefaults", func(t *testing.T) { h.modifyHot(t) })
	t.Run("ModifyHotRowCombined", func(t *testing.T) {
		cb := occ.NewCombiner()
		h.modifyHot(t, occ.WithCombiner(cb))
		st := cb.Stats()
		if st.Writes >= st.Updates {
			t.Fatalf("the combiner wrote %d times for %d updates: nothing was combined", st.Writes, st.Updates)
		}
		t.Logf("combiner: %+v", st)
	})
	t.Run("ModifyHotRowAcrossProcesses", h.modifyAcrossProcesses)
	t.Run("ModifyCached", h.modifyCached)
	t.Run("ModifyCancelled", h.modifyCancelled)
	t.Run("CallersTransactionRolledBack", h.rolledBack)
	t.Run("ModifyMany", h.modifyMany)
	t.Run("ModifyManyTransfers", h.modifyManyTransfers)
	t.Run("ModifyManyAcrossProcesses", h.modifyManyAcrossProcesses)
	t.Run("Add", h.add)
}

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func (h Harness[K]) methodSet(t *testing.T) {
	ctx := ctxFor(t)
	tbl := h.New(t)
	if _, err := tbl.Get(ctx, h.Key("none")); !errors.Is(err, cas.ErrNotFound) {
		t.Fatalf("Get of a missing row: %v, want cas.ErrNotFound", err)
	}
	in, err := tbl.Insert(ctx, Row{ID: "a", N: 10, Version: 99})
	if err != nil {
		t.Fatal(err)
	}
	if in.Version == 0 || in.Version == 99 || in.N != 10 || in.ID != "a" {
		t.Fatalf("Insert returned %+v, want the row with a version of the table's own", in)
	}
	var ce *cas.ConflictError
	if _, err := tbl.Insert(ctx, Row{ID: "a", N: 1}); !errors.As(err, &ce) || ce.Expected != 0 {
		t.Fatalf("Insert of an existing row: %v, want a *cas.ConflictError expecting 0", err)
	}
	h.wantRow(ctx, t, tbl, "a", in, "as inserted")
	got := in
	if v := tbl.VersionOf(got); v != got.Version {
		t.Fatalf("VersionOf(%+v) = %d", got, v)
	}
	got.N = 9
	up, err := tbl.Update(ctx, got)
	if err != nil || up.Version <= in.Version || up.N != 9 {
		t.Fatalf("Update = %+v, %v; want n 9 at a version above %d", up, err, in.Version)
	}
	stale := in
	stale.N = 0
	cur, err := tbl.Update(ctx, stale)
	if !errors.As(err, &ce) || errors.Is(err, cas.ErrNotFound) || ce.Expected != in.Version {
		t.Fatalf("stale Update: %v, want a *cas.ConflictError expecting %d (and not ErrNotFound)", err, in.Version)
	}
	if ce.HasCurrent && (ce.Current.Version != up.Version || cur != up) {
		t.Fatalf("the conflict carried %+v at version %d, want the current row %+v", cur, ce.Current.Version, up)
	}
	if _, err := tbl.Update(ctx, Row{ID: "a", N: 5}); !errors.Is(err, cas.ErrInvalidVersion) {
		t.Fatalf("Update of a row with version 0: %v, want cas.ErrInvalidVersion", err)
	}
	if _, err := tbl.Update(ctx, Row{ID: "none", N: 5, Version: 1}); !errors.Is(err, cas.ErrConflict) || !errors.Is(err, cas.ErrNotFound) {
		t.Fatalf("Update of a missing row: %v, want cas.ErrConflict and cas.ErrNotFound", err)
	}
	if err := tbl.Delete(ctx, h.Key("a"), 0); !errors.Is(err, cas.ErrInvalidVersion) {
		t.Fatalf("Delete at version 0: %v, want cas.ErrInvalidVersion", err)
	}
	if err := tbl.Delete(ctx, h.Key("a"), in.Version); !errors.Is(err, cas.ErrConflict) || errors.Is(err, cas.ErrNotFound) {
		t.Fatalf("stale Delete: %v, want cas.ErrConflict only", err)
	}
	if err := tbl.Delete(ctx, h.Key("none"), 1); !errors.Is(err, cas.ErrConflict) || !errors.Is(err, cas.ErrNotFound) {
		t.Fatalf("Delete of a missing row: %v, want cas.ErrConflict and cas.ErrNotFound", err)
	}
	if err := tbl.Delete(ctx, h.Key("a"), up.Version); err != nil {
		t.Fatal(err)
	}
	h.wantAbsent(ctx, t, tbl, "a")
}

// versionsNeverReused deletes a row and inserts it again three times: a
// write or delete holding a version of an earlier row is refused, and
// every new version is above every earlier one.
func (h Harness[K]) versionsNeverReused(t *testing.T) {
	ctx := ctxFor(t)
	tbl := h.New(t)
	old, err := tbl.Insert(ctx, Row{ID: "k", N: 1})
	if err != nil {
		t.Fatal(err)
	}
	old.N++
	if old, err = tbl.Update(ctx, old); err != nil {
		t.Fatal(err)
	}
	seen := []cas.Version{old.Version}
	for range 3 {
		if err := tbl.Delete(ctx, h.Key("k"), old.Version); err != nil {
			t.Fatal(err)
		}
		again, err := tbl.Insert(ctx, Row{ID: "k", N: 1})
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range seen {
			if again.Version <= v {
				t.Fatalf("re-inserted at version %d, not above the earlier %v", again.Version, seen)
			}
		}
		stale := old
		stale.N = 1000
		if _, err := tbl.Update(ctx, stale); !errors.Is(err, cas.ErrConflict) {
			t.Fatalf("Update with the deleted row's version %d: %v, want cas.ErrConflict", old.Version, err)
		}
		if err := tbl.Delete(ctx, h.Key("k"), old.Version); !errors.Is(err, cas.ErrConflict) {
			t.Fatalf("Delete with the deleted row's version %d: %v, want cas.ErrConflict", old.Version, err)
		}
		h.wantRow(ctx, t, tbl, "k", again, "the new row, untouched")
		seen, old = append(seen, again.Version), again
	}
}

var errMine = errors.New("tabletest: mutate's own error")

// modifyCreatesAndRefuses: Modify creates an absent row from the zero row
// with its key set, updates a present one, and writes nothing when mutate
// fails or changes the key.
func (h Harness[K]) modifyCreatesAndRefuses(t *testing.T) {
	ctx := ctxFor(t)
	tbl := h.New(t)
	created, err := tbl.Modify(ctx, h.Key("m"), func(cur Row, exists bool) (Row, error) {
		if exists || cur.ID != "m" || cur.N != 0 || cur.Version != 0 {
			return cur, fmt.Errorf("absent row seen as %+v (exists %v), want the zero row with its key set", cur, exists)
		}
		cur.N = 7
		return cur, nil
	})
	if err != nil || created.N != 7 || created.Version == 0 {
		t.Fatalf("Modify create = %+v, %v", created, err)
	}
	h.wantRow(ctx, t, tbl, "m", created, "as Modify created it")
	updated, err := tbl.Modify(ctx, h.Key("m"), func(cur Row, exists bool) (Row, error) {
		if !exists || cur != created {
			return cur, h.stale(!exists || cur.Version < created.Version, func() error {
				return fmt.Errorf("present row seen as %+v (exists %v), want %+v", cur, exists, created)
			})
		}
		cur.N++
		return cur, nil
	}, h.retryStale()...)
	if err != nil || updated.N != 8 || updated.Version <= created.Version {
		t.Fatalf("Modify update = %+v, %v", updated, err)
	}
	if _, err := tbl.Modify(ctx, h.Key("m"), func(cur Row, _ bool) (Row, error) {
		cur.N = 100
		return cur, errMine
	}); err != errMine {
		t.Fatalf("Modify whose mutate failed: %v, want mutate's error as is", err)
	}
	if _, err := tbl.Modify(ctx, h.Key("m"), func(cur Row, _ bool) (Row, error) {
		cur.ID, cur.N = "other", 100
		return cur, nil
	}); !errors.Is(err, cas.ErrInvalidKey) {
		t.Fatalf("Modify whose mutate changed the key: %v, want cas.ErrInvalidKey", err)
	}
	h.wantRow(ctx, t, tbl, "m", updated, "after the refused calls")
	if _, err := tbl.Get(ctx, h.Key("other")); !errors.Is(err, cas.ErrNotFound) {
		t.Fatalf("the changed key was written: %v", err)
	}
	// The zero key of an absent row: an insert would leave it out for the
	// database to generate one, writing a row under a key the call never
	// returns.
	called := false
	if got, err := tbl.Modify(ctx, h.Key(""), func(cur Row, _ bool) (Row, error) {
		called = true
		cur.N = 1
		return cur, nil
	}); !errors.Is(err, cas.ErrInvalidKey) || called {
		t.Fatalf("Modify of the zero key = %+v, %v (mutate called: %v), want cas.ErrInvalidKey before anything runs", got, err, called)
	}
	if _, err := tbl.Get(ctx, h.Key("")); !errors.Is(err, cas.ErrNotFound) && !errors.Is(err, cas.ErrInvalidKey) {
		t.Fatalf("after the refused Modify of the zero key, Get: %v, want no row", err)
	}
}
