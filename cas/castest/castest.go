// Package castest is the conformance suite every cas.Store adapter runs:
// the semantics and errors of each method, input validation, contexts,
// multi-key commits, fenced writes, and concurrency checks (occ.Update
// increments that must all be counted, and a linearizability check of a
// recorded concurrent history with porcupine).
//
// An adapter's test calls [Run] with a [Harness] that makes fresh, empty
// stores on a real backend:
//
//	func TestConformance(t *testing.T) {
//		castest.Run(t, castest.Harness{
//			NewStore:       func(t *testing.T) cas.Store { return newStoreOnFreshTable(t) },
//			ReturnsCurrent: true,
//			Limits:         store.Limits(),
//		})
//	}
//
// Capabilities the store lacks (cas.Committer, cas.FencedStore) skip their
// tests with t.Skip and the reason, so they show in go test -v output.
//
// A store that reads from a follower or a replica sets
// Harness.StaleReads: the suite then waits for its writes to show
// instead of expecting the next read to see them, checks that every read
// returned a state its key really had, and checks that stale reads cost
// conflicts, never updates (Concurrency/StaleReadsAreSafe).
//
// Fault tests of an adapter reuse the linearizability check: a [History]
// records the calls made through the stores it wraps (occ.Update's
// included), and [CheckHistory] checks them against [Model], resolving
// ambiguous writes with what the test found out afterwards.
package castest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/occkit/occkit/cas"
)

// Harness describes the store under test.
type Harness struct {
	// NewStore returns a store over an empty keyspace private to this test
	// (a fresh table, prefix or process), releasing it with t.Cleanup. It
	// is called once per subtest and fails the test if it cannot make one.
	NewStore func(t *testing.T) cas.Store

	// ReturnsCurrent says that every conflict carries the key's current
	// state (ConflictError.HasCurrent). When false, the suite still checks
	// that a current state, if returned, is right.
	ReturnsCurrent bool

	// Limits are the limits the store enforces (zero fields: defaults).
	Limits cas.Limits

	// Reopen, if set, returns another store over the same keys as s, as
	// another process would open it (a new Store value on the same table
	// or prefix): the cross-process tests run their calls through several
	// such stores, whose calls take no turns with each other's.
	Reopen func(t *testing.T, s cas.Store) cas.Store

	// ShortHold, if set, returns another store over the same keys as s
	// whose exclusive hold (cas.Exclusive) ends after the returned bound
	// when its holder stops answering (a short timeout or TTL), for the
	// pause test. Without it that test is skipped.
	ShortHold func(t *testing.T, s cas.Store) (cas.Store, time.Duration)

	// Workers and OpsPerWorker size the concurrency tests (defaults 8 and
	// 40). Slow backends may lower them.
	Workers, OpsPerWorker int

	// StaleReads says that Get and GetMany may return a state older than
	// the latest acknowledged write (a follower or a replica answers
	// them). Each read must still return a state its key had (a value
	// with the version it was written at, or absent), from a write made
	// before the read returned, and reads must catch up with the writes
	// within a few seconds once writing stops. Writes, and the current
	// state a conflict carries, stay current. The suite then polls its
	// read-backs (for up to five seconds) until the writes show, checks
	// reads apart from the linearizable history of the writes
	// (Concurrency/Linearizable), and runs Concurrency/StaleReadsAreSafe.
	StaleReads bool
}

// SameKeys returns a Harness's Reopen and ShortHold from open, which
// returns another store over the keys of s, as another process would
// open it, whose exclusive holds end after hold when their holder stops
// answering (hold 0: the store's default). Reopen opens with hold 0;
// ShortHold opens with shortHold and returns it as the bound.
func SameKeys(shortHold time.Duration, open func(t *testing.T, s cas.Store, hold time.Duration) cas.Store) (
	reopen func(t *testing.T, s cas.Store) cas.Store,
	short func(t *testing.T, s cas.Store) (cas.Store, time.Duration),
) {
	return func(t *testing.T, s cas.Store) cas.Store { return open(t, s, 0) },
		func(t *testing.T, s cas.Store) (cas.Store, time.Duration) { return open(t, s, shortHold), shortHold }
}

// capability returns s as a C, one of the optional interfaces of cas
// (cas.Adder, cas.Exclusive, ...), or skips the test, visibly, when s
// does not implement it.
func capability[C any](t *testing.T, s cas.Store) C {
	t.Helper()
	c, ok := s.(C)
	if !ok {
		t.Skipf("skipped: %T does not implement %v", s, reflect.TypeFor[C]())
	}
	return c
}

// processes returns n stores over the keys of s, standing for as many
// processes: s and n-1 stores from Harness.Reopen. Without Reopen it
// skips the test, visibly.
func processes(t *testing.T, h *Harness, s cas.Store, n int) []cas.Store {
	t.Helper()
	if h.Reopen == nil {
		t.Skip("skipped: Harness.Reopen is not set (no second store of the same keys)")
	}
	stores := []cas.Store{s}
	for range n - 1 {
		stores = append(stores, h.Reopen(t, s))
	}
	return stores
}

// runWorkers runs work on each of the harness's workers at once, with the
// worker's number, and returns when all are done.
func (h *Harness) runWorkers(work func(w int)) {
	var wg sync.WaitGroup
	for w := range h.workers() {
		wg.Go(func() { work(w) })
	}
	wg.Wait()
}

func (h *Harness) workers() int {
	if h.Workers > 0 {
		return h.Workers
	}
	return 8
}

func (h *Harness) opsPerWorker() int {
	if h.OpsPerWorker > 0 {
		return h.OpsPerWorker
	}
	return 40
}

type test struct {
	name string
	run  func(t *testing.T, h *Harness, s cas.Store)
}

// Run runs the whole suite against the stores h makes.
func Run(t *testing.T, h Harness) {
	t.Helper()
	if h.NewStore == nil {
		t.Fatal("castest: Harness.NewStore is nil")
	}
	h.Limits = h.Limits.WithDefaults()
	groups := []struct {
		name  string
		tests []test
	}{
		{"Basic", basicTests},
		{"Input", inputTests},
		{"Commit", commitTests},
		{"CommitShapes", commitShapesTests},
		{"Fenced", fencedTests},
		{"Concurrency", concurrencyTests},
		{"Exclusive", exclusiveTests},
		{"GetMany", getManyTests},
		{"ExclusiveCommit", exclusiveCommitTests},
		{"Delta", deltaTests},
		{"Lister", listerTests},
	}
	for _, g := range groups {
		t.Run(g.name, func(t *testing.T) {
			for _, tc := range g.tests {
				t.Run(tc.name, func(t *testing.T) {
					tc.run(t, &h, h.NewStore(t))
				})
			}
		})
	}
}

func mustCreate(t *testing.T, s cas.Store, k string, v string) cas.Version {
	t.Helper()
	ver, err := s.CompareAndSwap(context.Background(), k, 0, []byte(v))
	if err != nil {
		t.Fatalf("create %q: %v", k, err)
	}
	if ver == 0 {
		t.Fatalf("create %q returned version 0", k)
	}
	return ver
}

func mustSwap(t *testing.T, s cas.Store, k string, expected cas.Version, v string) cas.Version {
	t.Helper()
	ver, err := s.CompareAndSwap(context.Background(), k, expected, []byte(v))
	if err != nil {
		t.Fatalf("compare-and-swap %q at %d: %v", k, expected, err)
	}
	if ver <= expected {
		t.Fatalf("compare-and-swap %q at %d returned version %d, want > %d", k, expected, ver, expected)
	}
	return ver
}

// staleReadWait bounds how long a read-back of a store with
// Harness.StaleReads polls for the state the test wrote.
const staleReadWait = 5 * time.Second

// unexplained marks a read-back failure that no stale read explains: a
// state the key cannot have had, or an error. Settle gives up on it at
// once.
type unexplained struct{ error }

func (e unexplained) Unwrap() error { return e.error }

// Unexplained returns a read-back failure that no stale read explains (a
// state the key never had, an error), for the check given to Settle.
func Unexplained(format string, args ...any) error {
	return unexplained{fmt.Errorf(format, args...)}
}

// wrong is Unexplained.
func wrong(format string, args ...any) error { return Unexplained(format, args...) }

// Settle runs check, which reads a store (or a table: cas/tabletest uses
// it too) and returns what is wrong (nil: nothing). When reads are
// current (staleReads false) it runs once. Otherwise it runs again every
// 10 ms while it fails with an error a stale read explains (any error but
// one made by Unexplained), for up to 5 s. t fails with check's last
// error.
func Settle(t testing.TB, staleReads bool, check func() error) {
	t.Helper()
	deadline := time.Now().Add(staleReadWait)
	for polls := 1; ; polls++ {
		err := check()
		if err == nil {
			return
		}
		var ue unexplained
		switch {
		case !staleReads || errors.As(err, &ue):
			t.Fatal(err)
		case time.Now().After(deadline):
			t.Fatalf("%v (still after %d reads in %v: reads that never catch up)", err, polls, staleReadWait)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// settle is Settle with the harness's StaleReads.
func (h *Harness) settle(t *testing.T, check func() error) {
	t.Helper()
	Settle(t, h.StaleReads, check)
}

// wantItem checks that k holds value v at version ver. With StaleReads,
// reads of older states (absent, or a lower version) are read again.
func wantItem(t *testing.T, h *Harness, s cas.Store, k string, v string, ver cas.Version) {
	t.Helper()
	h.settle(t, func() error {
		it, err := s.Get(context.Background(), k)
		switch {
		case errors.Is(err, cas.ErrNotFound):
			return fmt.Errorf("get %q: %w; want {%q, v%d}", k, err, v, ver)
		case err != nil:
			return wrong("get %q: %w", k, err)
		case it.Key == k && string(it.Value) == v && it.Version == ver:
			return nil
		case it.Key == k && it.Version < ver:
			return fmt.Errorf("get %q = {%q, %q, v%d}, want {%q, %q, v%d}", k, it.Key, it.Value, it.Version, k, v, ver)
		}
		return wrong("get %q = {%q, %q, v%d}, want {%q, %q, v%d}", k, it.Key, it.Value, it.Version, k, v, ver)
	})
}

// getAt reads k and returns what the read returned; with StaleReads it
// reads again while the read shows a state older than version ver (for
// up to staleReadWait).
func getAt(h *Harness, s cas.Store, k string, ver cas.Version) (cas.Item, error) {
	deadline := time.Now().Add(staleReadWait)
	for {
		it, err := s.Get(context.Background(), k)
		older := errors.Is(err, cas.ErrNotFound) || (err == nil && it.Version < ver)
		if !h.StaleReads || !older || time.Now().After(deadline) {
			return it, err
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// wantLatest checks that k holds value v, at whatever version: after
// concurrent writers, when the test knows the value it must end at but
// not the version. With StaleReads, other values are read again.
func wantLatest(t *testing.T, h *Harness, s cas.Store, k string, v string) {
	t.Helper()
	h.settle(t, func() error {
		it, err := s.Get(context.Background(), k)
		switch {
		case errors.Is(err, cas.ErrNotFound):
			return fmt.Errorf("get %q: %w; want %q", k, err, v)
		case err != nil:
			return wrong("get %q: %w", k, err)
		case it.Key != k:
			return wrong("get %q returned key %q", k, it.Key)
		case string(it.Value) != v:
			return fmt.Errorf("get %q = %q at v%d, want %q", k, it.Value, it.Version, v)
		}
		return nil
	})
}

// wantAbsent checks that k does not exist. With StaleReads, a read that
// still finds k is read again.
func wantAbsent(t *testing.T, h *Harness, s cas.Store, k string) {
	t.Helper()
	h.settle(t, func() error {
		it, err := s.Get(context.Background(), k)
		switch {
		case errors.Is(err, cas.ErrNotFound):
			return nil
		case err != nil:
			return wrong("get %q = %+v, %v; want ErrNotFound", k, it, err)
		}
		return fmt.Errorf("get %q = %+v; want ErrNotFound", k, it)
	})
}

// wantConflict checks that err is a *ConflictError for k and, when the
// store returns current state, that it describes (curVer, curVal).
func wantConflict(t *testing.T, h *Harness, err error, k string, expected, curVer cas.Version, curVal string) {
	t.Helper()
	if !errors.Is(err, cas.ErrConflict) {
		t.Fatalf("err = %v, want ErrConflict", err)
	}
	var ce *cas.ConflictError
	if !errors.As(err, &ce) {
		t.Fatalf("err = %T %v, want a *cas.ConflictError", err, err)
	}
	if ce.Key != k || ce.Expected != expected {
		t.Fatalf("conflict names key %q expected %d, want key %q expected %d", ce.Key, ce.Expected, k, expected)
	}
	if h.ReturnsCurrent && !ce.HasCurrent {
		t.Fatalf("conflict on %q carries no current state, but the harness says the store returns it", k)
	}
	if !ce.HasCurrent {
		return
	}
	if ce.Current.Version != curVer {
		t.Fatalf("conflict's current version = %d, want %d", ce.Current.Version, curVer)
	}
	if curVer != 0 && (ce.Current.Key != k || !bytes.Equal(ce.Current.Value, []byte(curVal))) {
		t.Fatalf("conflict's current item = {%q, %q}, want {%q, %q}", ce.Current.Key, ce.Current.Value, k, curVal)
	}
	if got := errors.Is(err, cas.ErrNotFound); got != (curVer == 0) {
		t.Fatalf("errors.Is(conflict, ErrNotFound) = %v with current version %d", got, curVer)
	}
}

func describe(b []byte) string {
	if len(b) > 40 {
		return fmt.Sprintf("%d bytes %q...", len(b), b[:40])
	}
	return fmt.Sprintf("%q", b)
}
