package leasefaults

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/occkit/occkit/adapters/memcas"
	"github.com/occkit/occkit/benchmarks/internal/backends"
	"github.com/occkit/occkit/benchmarks/internal/linearcheck"
	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/hybrid"
	"github.com/occkit/occkit/internal/etcdtest"
)

func TestMain(m *testing.M) {
	// Embedded etcd's peer HTTP connections outlive its shutdown briefly
	// (as in adapters/etcdcas and hybrid).
	etcdtest.VerifyTestMain(m)
}

// open returns the Target of system on the test servers, on a fresh
// namespace removed when the test ends. Redis and PostgreSQL come from
// OCCKIT_REDIS_URL and OCCKIT_PG_URL (set by `make test`); a missing one
// fails the test, naming the variable. etcd runs in process.
func open(t *testing.T, system string, ttl time.Duration) Target {
	t.Helper()
	ctx := context.Background()
	srv, err := backends.Env{}.Reach(ctx, system)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close(ctx) })
	// Lock waiters pin a connection each on PostgreSQL: a pool of their
	// own, so that they cannot starve the store.
	var clients [2]*backends.Client
	for i := range clients {
		if clients[i], err = srv.Connect(ctx, backends.ClientOptions{Conns: 16}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = clients[i].Close() })
	}
	var r [4]byte
	_, _ = rand.Read(r[:])
	ns := "leasefaults_" + hex.EncodeToString(r[:])
	b, err := Open(ctx, clients[0], clients[1], ns, ttl)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := clients[0].Drop(ctx, ns); err != nil {
			t.Errorf("dropping %s: %v", ns, err)
		}
	})
	return b
}

// testBackends are the four systems with a lease lock on the test servers.
var testBackends = []string{backends.Memory, backends.Redis, backends.Etcd, backends.Postgres}

// TestFaults runs both faults on every backend and checks that stale
// writes were sent and every one was refused, and that no increment was
// lost or applied twice. Then it runs the mutant, whose rogue holders
// write without the fence, and checks that the same run catches it.
func TestFaults(t *testing.T) {
	for _, system := range testBackends {
		t.Run(system, func(t *testing.T) {
			b := open(t, system, 300*time.Millisecond)
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()

			results, err := Run(ctx, Config{Targets: []Target{b}, Duration: 1500 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			if len(results) != 2 {
				t.Fatalf("%d results, want one per fault", len(results))
			}
			for _, r := range results {
				t.Logf("%s/%s: %d ops (%d ok, %d ambiguous, %d failed), final %d, lost %d, duplicated %d; %d disturbed; stale writes: %d rejected, %d accepted, %d other; linearizable %s (%d calls on %d keys, %.2f s) %s; expiry: %s; errors: %q",
					r.Backend, r.Fault, r.Ops, r.Succeeded, r.Ambiguous, r.Failed, r.Final, r.Lost, r.Duplicated,
					r.Disturbed, r.StaleWritesRejected, r.StaleWritesAccepted, r.StaleWritesOther,
					linearcheck.FormatVerdict(r.Linearizable), r.CheckedCalls, r.CheckedKeys, r.CheckSeconds, r.LinearizabilityNote, r.Expiry, r.Errors)
				if err := r.Check(); err != nil {
					t.Errorf("%v", err)
				}
				// Each increment reads and writes: at least two calls each.
				if r.CheckedCalls < 2*int(r.Succeeded) {
					t.Errorf("%s: %d calls checked for %d increments", r.Fault, r.CheckedCalls, r.Succeeded)
				}
				if r.StaleWritesRejected == 0 {
					t.Errorf("%s: no stale write was refused with ErrFenced: the fence was not tested", r.Fault)
				}
				if r.Succeeded == 0 {
					t.Errorf("%s: no increment succeeded", r.Fault)
				}
			}

			mutants, err := Run(ctx, Config{Targets: []Target{b}, Duration: time.Second, unfenced: true})
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range mutants {
				t.Logf("mutant %s/%s: %d ops, final %d, lost %d, duplicated %d; stale writes: %d accepted, %d rejected, %d other",
					r.Backend, r.Fault, r.Ops, r.Final, r.Lost, r.Duplicated, r.StaleWritesAccepted, r.StaleWritesRejected, r.StaleWritesOther)
				if r.StaleWritesAccepted == 0 || r.Lost == 0 {
					t.Errorf("mutant %s: %d stale writes accepted, %d increments lost; want both > 0: the run cannot tell an unfenced write",
						r.Fault, r.StaleWritesAccepted, r.Lost)
				}
				if err := r.Check(); !errors.Is(err, ErrUnsafe) {
					t.Errorf("mutant %s: Check = %v, want ErrUnsafe", r.Fault, err)
				}
				// The store did nothing wrong: its history is linearizable
				// (the check accuses no correct store).
				if r.Linearizable == nil || !*r.Linearizable {
					t.Errorf("mutant %s: linearizable %s (%s), want true: the unfenced writes were the client's, the store was right",
						r.Fault, linearcheck.FormatVerdict(r.Linearizable), r.LinearizabilityNote)
				}
			}
		})
	}
}

func TestCheck(t *testing.T) {
	yes, no := true, false
	ok := Result{Backend: "b", Fault: PausedHolder, Ops: 10, Succeeded: 10, Final: 10, StaleWritesRejected: 1, Linearizable: &yes}
	if err := ok.Check(); err != nil {
		t.Errorf("Check of a clean run: %v", err)
	}
	for name, r := range map[string]Result{
		"accepted":                         {StaleWritesAccepted: 1, StaleWritesRejected: 1, Linearizable: &yes},
		"lost":                             {Lost: 1, StaleWritesRejected: 1, Linearizable: &yes},
		"duplicated":                       {Duplicated: 1, StaleWritesRejected: 1, Linearizable: &yes},
		"not linearizable":                 {StaleWritesRejected: 1, Linearizable: &no},
		"not linearizable, nothing tested": {Linearizable: &no},
	} {
		var ce *CheckError
		if err := r.Check(); !errors.Is(err, ErrUnsafe) || !errors.As(err, &ce) {
			t.Errorf("%s: Check = %v, want a *CheckError matching ErrUnsafe", name, err)
		}
	}
	if err := (Result{Ops: 10, Succeeded: 10, Final: 10, Linearizable: &yes}).Check(); !errors.Is(err, ErrVacuous) {
		t.Errorf("Check of a run without stale writes = %v, want ErrVacuous", err)
	}
	if err := (Result{Ops: 10, Succeeded: 10, Final: 10, StaleWritesRejected: 1}).Check(); !errors.Is(err, ErrVacuous) {
		t.Errorf("Check of a run whose history was not checked = %v, want ErrVacuous", err)
	}
}

// buggyStore is a memcas store with one deliberate bug, striking every
// bugEvery-th time it can.
type buggyStore struct {
	*memcas.Store
	bug  string
	n    atomic.Int64
	mu   sync.Mutex
	last map[string]cas.Item // the previous answer of Get, per key
}

const bugEvery = 20

func (s *buggyStore) strikes(bug string) bool { return s.bug == bug && s.n.Add(1)%bugEvery == 0 }

func (s *buggyStore) Get(ctx context.Context, key string) (cas.Item, error) {
	it, err := s.Store.Get(ctx, key)
	if s.bug != "stale-read" || err != nil {
		return it, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	prev, seen := s.last[key]
	s.last[key] = it
	if seen && prev.Version != it.Version && s.strikes("stale-read") {
		return prev, nil
	}
	return it, nil
}

func (s *buggyStore) CompareAndSwapFenced(ctx context.Context, key string, expected cas.Version, token uint64, value []byte) (cas.Version, error) {
	switch {
	case s.strikes("acknowledged-not-applied"):
		return expected + 1_000_000, nil
	case s.bug == "token-ignored":
		return s.Store.CompareAndSwap(ctx, key, expected, value)
	}
	return s.Store.CompareAndSwapFenced(ctx, key, expected, token, value)
}

// TestHistoryCatchesBuggyStores: a lease run against a store with a bug —
// it acknowledges fenced writes it drops, serves stale reads, or ignores
// fencing tokens — finds its history not linearizable, and Check reports
// ErrUnsafe. The stale reads break no count (a write that read one is
// refused by its version): only the history shows them. The check is not
// vacuous on the lease path.
func TestHistoryCatchesBuggyStores(t *testing.T) {
	for _, bug := range []string{"acknowledged-not-applied", "stale-read", "token-ignored"} {
		t.Run(bug, func(t *testing.T) {
			t.Parallel() // mostly waiting
			inner := memcas.New()
			b := open(t, backends.Memory, 100*time.Millisecond)
			b.Name, b.Store, b.Direct = "buggy", &buggyStore{Store: inner, bug: bug, last: map[string]cas.Item{}}, inner
			results, err := Run(context.Background(), Config{Targets: []Target{b}, Faults: []string{ClockJump}, Duration: 500 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			r := results[0]
			t.Logf("%d ops, lost %d, duplicated %d, stale writes %d accepted, %d refused; linearizable %s: %s",
				r.Ops, r.Lost, r.Duplicated, r.StaleWritesAccepted, r.StaleWritesRejected, linearcheck.FormatVerdict(r.Linearizable), r.LinearizabilityNote)
			if r.Linearizable == nil || *r.Linearizable {
				t.Fatalf("linearizable %s, want false: the bug went unnoticed by the history check", linearcheck.FormatVerdict(r.Linearizable))
			}
			if err := r.Check(); !errors.Is(err, ErrUnsafe) || !strings.Contains(err.Error(), "not linearizable") {
				t.Fatalf("Check = %v, want ErrUnsafe naming the history", err)
			}
			if err := r.VisualizeHistory(filepath.Join(t.TempDir(), "bad.html")); err != nil {
				t.Fatalf("VisualizeHistory: %v", err)
			}
		})
	}
}

func TestRunErrors(t *testing.T) {
	ctx := context.Background()
	if _, err := Run(ctx, Config{}); err == nil {
		t.Error("Run without backends: nil error")
	}
	m := open(t, backends.Memory, 100*time.Millisecond)
	_, err := Run(ctx, Config{Targets: []Target{m}, Faults: []string{"meteor"}})
	var re *RunError
	if !errors.As(err, &re) || re.Backend != "memory" || re.Fault != "meteor" {
		t.Errorf("unknown fault: %v, want a *RunError naming it", err)
	}
	m.RunsOut = false
	_, err = Run(ctx, Config{Targets: []Target{m}, Faults: []string{PausedHolder}})
	if !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("a backend whose grants can neither run out nor be ended: %v, want ErrUnsupported", err)
	}
}

// sessionLocker hands out leases that do not say when they expire, as
// PostgreSQL's session locks do: hybrid.NewLocalLocker's leases with
// their Expires hidden.
type sessionLocker struct{ hybrid.Locker }

type sessionLease struct{ hybrid.Lease }

func (l sessionLocker) Acquire(ctx context.Context, key string) (hybrid.Lease, error) {
	g, err := l.Locker.Acquire(ctx, key)
	if err != nil {
		return nil, err
	}
	return sessionLease{g}, nil
}

// TestHolderExpiry: a holder's lease knows its expiry (shifted by the
// holder's skew) exactly when the inner lease does; one that does not is
// no hybrid.ExpiringLease (none is invented), and looksValid checks no
// time on it, as hybrid.Update does not.
func TestHolderExpiry(t *testing.T) {
	ctx := t.Context()
	const skew = time.Hour
	h := &holder{inner: hybrid.NewLocalLocker(time.Second), skew: skew}
	g, err := h.Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	e, ok := g.(hybrid.ExpiringLease)
	if !ok {
		t.Fatalf("%T over a local lease is no hybrid.ExpiringLease", g)
	}
	if left := time.Until(e.Expires()); left < skew || left > skew+time.Second {
		t.Errorf("a skewed lease has %v left, want the inner lease's second plus the skew", left)
	}
	if !looksValid(g, time.Minute) {
		t.Error("looksValid: a lease with an hour left fails a margin of a minute")
	}
	if err := g.Release(ctx); err != nil {
		t.Fatal(err)
	}

	h = &holder{inner: sessionLocker{hybrid.NewLocalLocker(time.Second)}, skew: skew}
	if g, err = h.Acquire(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = g.Release(ctx) }()
	if _, ok := g.(hybrid.ExpiringLease); ok {
		t.Fatalf("%T over a lease without an expiry is a hybrid.ExpiringLease: an expiry was invented", g)
	}
	if !looksValid(g, 24*time.Hour) {
		t.Error("looksValid checked the time left of a lease that does not know it")
	}
}
