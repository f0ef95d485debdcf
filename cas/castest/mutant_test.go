package castest_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/cas/castest"
	"github.com/occkit/occkit/internal/mutanttest"
)

// The suite is only worth something if it fails for broken stores. Each
// mutant below is a small in-memory store with one deliberate bug; the test
// runs the suite against it in a child process and expects the named
// subtest to fail. The control (no bug) must pass the same subtests.

type bug string

const (
	bugNone          bug = ""
	bugReuseVersions bug = "reuse-versions"    // per-key versions restart after delete (ABA)
	bugLostUpdate    bug = "lost-update"       // compare and write are not atomic
	bugTornCommit    bug = "torn-commit"       // commit applies ops until the first mismatch
	bugIgnoreFence   bug = "ignore-fence"      // fenced writes do not check tokens
	bugNoValidation  bug = "no-key-validation" // keys are not validated
	bugStaleRead     bug = "stale-read"        // Get sometimes returns the previous state
	bugNoCurrent     bug = "wrong-current"     // conflicts carry a wrong current version
	bugTornRead      bug = "torn-read"         // a stale Get pairs the current value with the previous version
	bugStuckRead     bug = "stuck-read"        // Get returns the key's first state written, forever
)

var mutants = []mutanttest.Case{
	{Mutant: string(bugReuseVersions), Subtests: []string{"Basic/NoABAAfterDeleteAndRecreate"}},
	{Mutant: string(bugLostUpdate), Subtests: []string{"Concurrency/UpdateCountsEveryIncrement", "Concurrency/Linearizable"}},
	{Mutant: string(bugTornCommit), Subtests: []string{"Commit/FailedCheckAppliesNothing"}},
	{Mutant: string(bugIgnoreFence), Subtests: []string{"Fenced/StaleTokenRejected"}},
	{Mutant: string(bugNoValidation), Subtests: []string{"Input/InvalidKeys"}},
	{Mutant: string(bugStaleRead), Subtests: []string{"Concurrency/Linearizable"}},
	{Mutant: string(bugNoCurrent), Subtests: []string{"Basic/StaleVersionConflicts"}},
}

// staleMutants run with Harness.StaleReads, on a store whose Get returns
// the state before a key's last write for a while after it, as a lagging
// replica does: the control, that store without a bug, must pass, and the
// relaxed read-backs must still catch the bugs.
var staleMutants = []mutanttest.Case{
	{Mutant: string(bugReuseVersions), Subtests: []string{"Basic/NoABAAfterDeleteAndRecreate"}},
	{Mutant: string(bugLostUpdate), Subtests: []string{"Concurrency/UpdateCountsEveryIncrement", "Concurrency/Linearizable", "Concurrency/StaleReadsAreSafe"}},
	{Mutant: string(bugNoCurrent), Subtests: []string{"Basic/StaleVersionConflicts"}},
	{Mutant: string(bugTornRead), Subtests: []string{"Concurrency/Linearizable", "Concurrency/StaleReadsAreSafe"}},
	{Mutant: string(bugStuckRead), Subtests: []string{"Basic/SwapIncreasesVersion"}},
}

const (
	mutantEnv      = "CASTEST_MUTANT"
	staleMutantEnv = "CASTEST_STALE_MUTANT"
)

func TestSuiteCatchesMutants(t *testing.T) {
	mutanttest.Run(t, mutantEnv, "TestMutant", mutants)
}

func TestSuiteCatchesMutantsWithStaleReads(t *testing.T) {
	mutanttest.Run(t, staleMutantEnv, "TestStaleMutant", staleMutants)
}

// TestStaleReads runs the whole suite with Harness.StaleReads on the
// lagging store without a bug.
func TestStaleReads(t *testing.T) {
	castest.Run(t, castest.Harness{
		NewStore:       func(t *testing.T) cas.Store { return newLagging(bugNone) },
		ReturnsCurrent: true,
		StaleReads:     true,
	})
}

// TestStaleMutant runs the suite with Harness.StaleReads against the
// lagging store named by CASTEST_STALE_MUTANT; it only runs as a child of
// TestSuiteCatchesMutantsWithStaleReads.
func TestStaleMutant(t *testing.T) {
	v, ok := mutanttest.Child(staleMutantEnv)
	if !ok {
		t.Skip("runs only as a child process of TestSuiteCatchesMutantsWithStaleReads")
	}
	castest.Run(t, castest.Harness{
		NewStore:       func(t *testing.T) cas.Store { return newLagging(bug(v)) },
		ReturnsCurrent: true,
		StaleReads:     true,
	})
}

// TestMutant runs the suite against the store named by CASTEST_MUTANT; it
// only runs as a child of TestSuiteCatchesMutants.
func TestMutant(t *testing.T) {
	v, ok := mutanttest.Child(mutantEnv)
	if !ok {
		t.Skip("runs only as a child process of TestSuiteCatchesMutants")
	}
	b := bug(v)
	castest.Run(t, castest.Harness{
		NewStore:       func(t *testing.T) cas.Store { return newMutant(b) },
		ReturnsCurrent: true,
	})
}

type rec struct {
	value   []byte
	version cas.Version
	token   uint64
	written time.Time
}

// lagWindow is how long after a write of a key a lagging store may still
// read the state before it.
const lagWindow = 20 * time.Millisecond

type mutantStore struct {
	bug    bug
	lag    bool // every third Get returns the state before the last write
	mu     sync.Mutex
	m      map[string]rec
	clock  cas.Version
	prev   map[string]rec
	first  map[string]rec // each key's first state written
	reads  int
	limits cas.Limits
}

func newMutant(b bug) *mutantStore {
	return &mutantStore{bug: b, m: map[string]rec{}, prev: map[string]rec{}, first: map[string]rec{}, limits: cas.Limits{}.WithDefaults()}
}

// newLagging returns a store whose reads lag (legitimately, with
// Harness.StaleReads), with bug b.
func newLagging(b bug) *mutantStore {
	s := newMutant(b)
	s.lag = true
	return s
}

func (s *mutantStore) checkKey(ctx context.Context, key string) error {
	if s.bug == bugNoValidation {
		return ctx.Err()
	}
	return s.limits.Get(ctx, key)
}

func (s *mutantStore) nextVersion(cur cas.Version) cas.Version {
	if s.bug == bugReuseVersions {
		return cur + 1 // restarts at 1 after a delete
	}
	s.clock++
	return s.clock
}

func (s *mutantStore) conflict(key string, expected cas.Version, r rec) error {
	cur := cas.Item{Key: key, Value: append([]byte{}, r.value...), Version: r.version}
	if s.bug == bugNoCurrent && r.version != 0 {
		cur.Version++
	}
	return &cas.ConflictError{Key: key, Expected: expected, Current: cur, HasCurrent: true}
}

func (s *mutantStore) Get(ctx context.Context, key string) (cas.Item, error) {
	if err := s.checkKey(ctx, key); err != nil {
		return cas.Item{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.m[key]
	s.reads++
	if f, ok := s.first[key]; ok && s.bug == bugStuckRead {
		r = f
	}
	stale := s.bug == bugStaleRead && s.reads%3 == 0
	if s.lag {
		// A replica that applies writes up to lagWindow late, read half
		// the time.
		stale = s.reads%2 == 0 && time.Since(r.written) < lagWindow
	}
	if p, ok := s.prev[key]; ok && stale {
		switch s.bug {
		case bugTornRead:
			if p.version != 0 {
				r.version = p.version // with the current value
			}
		default:
			r = p
		}
	}
	if r.version == 0 {
		return cas.Item{}, cas.ErrNotFound
	}
	return cas.Item{Key: key, Value: append([]byte{}, r.value...), Version: r.version}, nil
}

func (s *mutantStore) CompareAndSwap(ctx context.Context, key string, expected cas.Version, value []byte) (cas.Version, error) {
	return s.put(ctx, key, expected, 0, false, value)
}

func (s *mutantStore) CompareAndSwapFenced(ctx context.Context, key string, expected cas.Version, token uint64, value []byte) (cas.Version, error) {
	return s.put(ctx, key, expected, token, true, value)
}

func (s *mutantStore) put(ctx context.Context, key string, expected cas.Version, token uint64, fenced bool, value []byte) (cas.Version, error) {
	if err := s.checkKey(ctx, key); err != nil {
		return 0, err
	}
	if err := s.limits.CheckValue("put", key, value); err != nil {
		return 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.m[key]
	if fenced && token < r.token && s.bug != bugIgnoreFence {
		return 0, &cas.FencedError{Key: key, Token: token, Highest: r.token}
	}
	if r.version != expected {
		return 0, s.conflict(key, expected, r)
	}
	if s.bug == bugLostUpdate {
		s.mu.Unlock()
		time.Sleep(50 * time.Microsecond)
		s.mu.Lock()
		r = s.m[key]
	}
	s.prev[key] = r
	r.value = append([]byte{}, value...)
	r.version = s.nextVersion(r.version)
	if fenced {
		r.token = max(r.token, token)
	}
	r.written = time.Now()
	s.m[key] = r
	if _, ok := s.first[key]; !ok {
		s.first[key] = r
	}
	return r.version, nil
}

func (s *mutantStore) CompareAndDelete(ctx context.Context, key string, expected cas.Version) error {
	if err := s.checkKey(ctx, key); err != nil {
		return err
	}
	if expected == 0 {
		return cas.ErrInvalidVersion
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.m[key]
	if r.version != expected {
		return s.conflict(key, expected, r)
	}
	s.prev[key] = r
	s.m[key] = rec{token: r.token, written: time.Now()}
	return nil
}

func (s *mutantStore) Commit(ctx context.Context, ops []cas.Op) ([]cas.Version, error) {
	if s.bug != bugNoValidation {
		if err := s.limits.Commit(ctx, ops); err != nil {
			return nil, err
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.bug != bugTornCommit {
		for _, op := range ops {
			if r := s.m[op.Key]; r.version != op.Expected {
				return nil, s.conflict(op.Key, op.Expected, r)
			}
		}
	}
	out := make([]cas.Version, len(ops))
	for i, op := range ops {
		r := s.m[op.Key]
		if r.version != op.Expected {
			return nil, s.conflict(op.Key, op.Expected, r)
		}
		s.prev[op.Key] = r
		switch op.Kind {
		case cas.OpCheck:
			out[i] = op.Expected
		case cas.OpPut:
			r.value = append([]byte{}, op.Value...)
			r.version = s.nextVersion(r.version)
			r.written = time.Now()
			s.m[op.Key] = r
			out[i] = r.version
		case cas.OpDelete:
			s.m[op.Key] = rec{token: r.token, written: time.Now()}
		}
	}
	return out, nil
}
