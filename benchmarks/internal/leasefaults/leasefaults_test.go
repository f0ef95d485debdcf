package leasefaults

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/occkit/occkit/internal/etcdtest"
	"github.com/occkit/occkit/internal/pgtest"
	"github.com/occkit/occkit/internal/redistest"
)

func TestMain(m *testing.M) {
	// Embedded etcd's peer HTTP connections outlive its shutdown briefly
	// (as in adapters/etcdcas and hybrid).
	goleak.VerifyTestMain(m,
		goleak.IgnoreAnyFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreAnyFunction("net/http.(*persistConn).writeLoop"),
		goleak.IgnoreAnyFunction("net/http.(*conn).serve"),
	)
}

// testBackends are the four backends on the test servers. Redis and
// PostgreSQL come from OCCKIT_REDIS_URL and OCCKIT_PG_URL (set by `make
// test`); a missing one fails the test, naming the variable.
var testBackends = []struct {
	name  string
	setup func(t *testing.T) Backend
}{
	{"memory", func(*testing.T) Backend { return Memory(300 * time.Millisecond) }},
	{"redis", func(t *testing.T) Backend {
		b, err := Redis(redistest.Client(t), redistest.Prefix(t), 300*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}},
	{"etcd", func(t *testing.T) Backend {
		b, err := Etcd(etcdtest.Start(t, etcdtest.Options{}).Client(), "leasefaults/")
		if err != nil {
			t.Fatal(err)
		}
		return b
	}},
	{"postgres", func(t *testing.T) Backend {
		pool := pgtest.Pool(t)
		// Lock waiters pin a connection each: a pool of their own, so
		// that they cannot starve the store.
		lcfg := pool.Config()
		lcfg.MaxConns = 16
		lockPool := pgtest.Open(t, lcfg)
		b, err := Postgres(context.Background(), pool, lockPool, "counters")
		if err != nil {
			t.Fatal(err)
		}
		return b
	}},
}

// TestFaults runs both faults on every backend and checks that stale
// writes were sent and every one was refused, and that no increment was
// lost or applied twice. Then it runs the mutant, whose rogue holders
// write without the fence, and checks that the same run catches it.
func TestFaults(t *testing.T) {
	for _, tb := range testBackends {
		t.Run(tb.name, func(t *testing.T) {
			b := tb.setup(t)
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()

			results, err := Run(ctx, Config{Backends: []Backend{b}, Duration: 1500 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			if len(results) != 2 {
				t.Fatalf("%d results, want one per fault", len(results))
			}
			for _, r := range results {
				t.Logf("%s/%s: %d ops (%d ok, %d ambiguous, %d failed), final %d, lost %d, duplicated %d; %d disturbed; stale writes: %d rejected, %d accepted, %d other; expiry: %s; errors: %q",
					r.Backend, r.Fault, r.Ops, r.Succeeded, r.Ambiguous, r.Failed, r.Final, r.Lost, r.Duplicated,
					r.Disturbed, r.StaleWritesRejected, r.StaleWritesAccepted, r.StaleWritesOther, r.Expiry, r.Errors)
				if err := r.Check(); err != nil {
					t.Errorf("%v", err)
				}
				if r.StaleWritesRejected == 0 {
					t.Errorf("%s: no stale write was refused with ErrFenced: the fence was not tested", r.Fault)
				}
				if r.Succeeded == 0 {
					t.Errorf("%s: no increment succeeded", r.Fault)
				}
			}

			mutants, err := Run(ctx, Config{Backends: []Backend{b}, Duration: time.Second, unfenced: true})
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
			}
		})
	}
}

func TestCheck(t *testing.T) {
	ok := Result{Backend: "b", Fault: PausedHolder, Ops: 10, Succeeded: 10, Final: 10, StaleWritesRejected: 1}
	if err := ok.Check(); err != nil {
		t.Errorf("Check of a clean run: %v", err)
	}
	for name, r := range map[string]Result{
		"accepted":   {StaleWritesAccepted: 1, StaleWritesRejected: 1},
		"lost":       {Lost: 1, StaleWritesRejected: 1},
		"duplicated": {Duplicated: 1, StaleWritesRejected: 1},
	} {
		var ce *CheckError
		if err := r.Check(); !errors.Is(err, ErrUnsafe) || !errors.As(err, &ce) {
			t.Errorf("%s: Check = %v, want a *CheckError matching ErrUnsafe", name, err)
		}
	}
	if err := (Result{Ops: 10, Succeeded: 10, Final: 10}).Check(); !errors.Is(err, ErrVacuous) {
		t.Errorf("Check of a run without stale writes = %v, want ErrVacuous", err)
	}
}

func TestRunErrors(t *testing.T) {
	ctx := context.Background()
	if _, err := Run(ctx, Config{}); err == nil {
		t.Error("Run without backends: nil error")
	}
	m := Memory(100 * time.Millisecond)
	_, err := Run(ctx, Config{Backends: []Backend{m}, Faults: []string{"meteor"}})
	var re *RunError
	if !errors.As(err, &re) || re.Backend != "memory" || re.Fault != "meteor" {
		t.Errorf("unknown fault: %v, want a *RunError naming it", err)
	}
	m.RunsOut = false
	_, err = Run(ctx, Config{Backends: []Backend{m}, Faults: []string{PausedHolder}})
	if !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("a backend whose grants can neither run out nor be ended: %v, want ErrUnsupported", err)
	}
}
