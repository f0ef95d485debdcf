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
package castest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
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

// wantItem checks that k holds value v at version ver.
func wantItem(t *testing.T, s cas.Store, k string, v string, ver cas.Version) {
	t.Helper()
	it, err := s.Get(context.Background(), k)
	if err != nil {
		t.Fatalf("get %q: %v", k, err)
	}
	if it.Key != k || string(it.Value) != v || it.Version != ver {
		t.Fatalf("get %q = {%q, %q, v%d}, want {%q, %q, v%d}", k, it.Key, it.Value, it.Version, k, v, ver)
	}
}

// wantAbsent checks that k does not exist.
func wantAbsent(t *testing.T, s cas.Store, k string) {
	t.Helper()
	it, err := s.Get(context.Background(), k)
	if !errors.Is(err, cas.ErrNotFound) {
		t.Fatalf("get %q = %+v, %v; want ErrNotFound", k, it, err)
	}
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
