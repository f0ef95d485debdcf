package rediscas_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/occkit/occkit/adapters/rediscas"
	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/internal/redistest"
	"github.com/occkit/occkit/occ"
	"github.com/redis/go-redis/v9"
)

// faultyStore returns a store whose client goes through faults, and a
// store on a clean client over the same keys (another process).
func faultyStore(t *testing.T, cfg rediscas.Config) (s, other *rediscas.Store, f *redistest.Faults, admin *redis.Client) {
	t.Helper()
	f = &redistest.Faults{}
	admin = redistest.Client(t)
	cfg.Prefix = redistest.Prefix(t)
	var err error
	if s, err = rediscas.New(redistest.Client(t, f.Configure), cfg); err != nil {
		t.Fatal(err)
	}
	if other, err = rediscas.New(admin, cfg); err != nil {
		t.Fatal(err)
	}
	return s, other, f, admin
}

// TestDroppedConnection: the answer of a write is lost after the server
// ran it (the connection drops). The store resolves the outcome by sending
// the write again with the same write id: the script finds its own write
// and reports it, applied once.
func TestDroppedConnection(t *testing.T) {
	s, _, f, admin := faultyStore(t, rediscas.Config{})
	ctx := redistest.Ctx(t, 20*time.Second)
	v1, err := s.CompareAndSwap(ctx, "k", 0, []byte("one"))
	if err != nil {
		t.Fatal(err)
	}
	// entries counts the writes k's history records (History is 8).
	entries := func() int { h, _ := admin.HGet(ctx, s.DataKey("k"), "h").Result(); return len(h) / 24 }
	before := entries()

	t.Run("Put", func(t *testing.T) {
		f.LoseReply("lost-put", nil)
		v2, err := s.CompareAndSwap(ctx, "k", v1, []byte("lost-put"))
		if err != nil || f.Fired() != 1 {
			t.Fatalf("write with a lost answer: v%d, %v (faults fired %d); want success", v2, err, f.Fired())
		}
		wantValue(t, s, "k", "lost-put", v2)
		if got := entries() - before; got != 1 {
			t.Fatalf("the history gained %d entries: the write applied %d times", got, got)
		}
		v1 = v2
	})
	t.Run("FencedPut", func(t *testing.T) {
		f.LoseReply("lost-fenced", nil)
		v2, err := s.CompareAndSwapFenced(ctx, "k", v1, 7, []byte("lost-fenced"))
		if err != nil {
			t.Fatal(err)
		}
		wantValue(t, s, "k", "lost-fenced", v2)
		v1 = v2
	})
	t.Run("Delete", func(t *testing.T) {
		f.LoseReply(s.DataKey("k"), nil)
		if err := s.CompareAndDelete(ctx, "k", v1); err != nil {
			t.Fatalf("delete with a lost answer: %v, want success", err)
		}
		if _, err := s.Get(ctx, "k"); !errors.Is(err, cas.ErrNotFound) {
			t.Fatalf("get after delete: %v", err)
		}
	})
	t.Run("Commit", func(t *testing.T) {
		f.LoseReply("lost-commit", nil)
		vs, err := s.Commit(ctx, []cas.Op{cas.Put("a", 0, []byte("lost-commit")), cas.Put("b", 0, []byte("B"))})
		if err != nil {
			t.Fatalf("commit with a lost answer: %v, want success", err)
		}
		wantValue(t, s, "a", "lost-commit", vs[0])
		wantValue(t, s, "b", "B", vs[1])
	})
	t.Run("SendFails", func(t *testing.T) {
		it, _ := s.Get(ctx, "a")
		f.FailSend("failed-send")
		v, err := s.CompareAndSwap(ctx, "a", it.Version, []byte("failed-send"))
		if err != nil {
			t.Fatalf("write whose send failed: %v, want it sent again and applied", err)
		}
		wantValue(t, s, "a", "failed-send", v)
	})
}

// TestDroppedConnectionThenOverwritten: the answer is lost and other
// clients overwrite the key before the store can look. The key's history
// still names the write while it reaches back that far: success, with the
// version the write made. Past the history, Redis cannot tell whether the
// write applied before being overwritten: the caller gets a
// *cas.AmbiguousError with the write id, never a conflict (which would
// invite a retry that applies the change twice).
func TestDroppedConnectionThenOverwritten(t *testing.T) {
	s, other, f, _ := faultyStore(t, rediscas.Config{History: 3})
	ctx := redistest.Ctx(t, 20*time.Second)
	overwrite := func(times int) func() {
		return func() {
			for range times {
				it, err := other.Get(context.Background(), "k")
				if err == nil {
					_, err = other.CompareAndSwap(context.Background(), "k", it.Version, []byte("theirs"))
				}
				if err != nil {
					t.Error(err)
				}
			}
		}
	}
	v1, err := s.CompareAndSwap(ctx, "k", 0, []byte("one"))
	if err != nil {
		t.Fatal(err)
	}
	f.LoseReply("mine", overwrite(2))
	v2, err := s.CompareAndSwap(ctx, "k", v1, []byte("mine"))
	if err != nil || v2 <= v1 {
		t.Fatalf("write applied then overwritten twice (history 3): v%d, %v; want success", v2, err)
	}
	it, _ := s.Get(ctx, "k")
	if it.Version <= v2 || string(it.Value) != "theirs" {
		t.Fatalf("key = %q v%d, want the overwrites after v%d", it.Value, it.Version, v2)
	}

	f.LoseReply("mine", overwrite(3))
	_, err = s.CompareAndSwap(ctx, "k", it.Version, []byte("mine"))
	var amb *cas.AmbiguousError
	if !errors.As(err, &amb) || amb.WriteID == "" || errors.Is(err, cas.ErrConflict) {
		t.Fatalf("write applied then overwritten past the history: %v, want a *cas.AmbiguousError with a write id", err)
	}
	if rediscas.Retryable(err) {
		t.Fatal("an ambiguous outcome must not be retryable")
	}
	wantValue(t, s, "k", "theirs", 0)

	// A delete applied, then the key re-created: found in the history.
	it, _ = s.Get(ctx, "k")
	f.LoseReply(s.DataKey("k"), func() {
		if _, err := other.CompareAndSwap(context.Background(), "k", 0, []byte("re-created")); err != nil {
			t.Error(err)
		}
	})
	if err := s.CompareAndDelete(ctx, "k", it.Version); err != nil {
		t.Fatalf("delete applied, then the key re-created: %v, want success", err)
	}
}

// TestDroppedConnectionLostRace: the answer is lost, and the write had lost
// its race: another operation had replaced the version it expected. The
// key's hash names the version its last put replaced, so the store knows
// the write never applied and reports the conflict (or the stale token)
// the server would have answered, with the current item, whether it could
// send the write again or the caller had given up.
func TestDroppedConnectionLostRace(t *testing.T) {
	s, other, f, _ := faultyStore(t, rediscas.Config{})
	ctx := redistest.Ctx(t, 20*time.Second)
	v1, err := other.CompareAndSwapFenced(ctx, "k", 0, 5, []byte("one"))
	if err != nil {
		t.Fatal(err)
	}
	v2, err := other.CompareAndSwap(ctx, "k", v1, []byte("two"))
	if err != nil {
		t.Fatal(err)
	}
	wantCurrent := func(err error) {
		t.Helper()
		var ce *cas.ConflictError
		if errors.Is(err, cas.ErrAmbiguous) || !errors.As(err, &ce) || !ce.HasCurrent || ce.Current.Version != v2 || string(ce.Current.Value) != "two" {
			t.Fatalf("stale write whose answer was lost: %v, want a conflict carrying v%d %q", err, v2, "two")
		}
	}
	f.LoseReply("stale", nil)
	_, err = s.CompareAndSwap(ctx, "k", v1, []byte("stale"))
	wantCurrent(err)

	wctx, cancel := context.WithCancel(ctx)
	f.LoseReply("stale", cancel)
	_, err = s.CompareAndSwap(wctx, "k", v1, []byte("stale"))
	wantCurrent(err)

	f.LoseReply(s.DataKey("k"), nil)
	wantCurrent(s.CompareAndDelete(ctx, "k", v1))

	v3, err := other.CompareAndSwapFenced(ctx, "k", v2, 9, []byte("three"))
	if err != nil {
		t.Fatal(err)
	}
	f.LoseReply("stale", nil)
	_, err = s.CompareAndSwapFenced(ctx, "k", v2, 5, []byte("stale"))
	if errors.Is(err, cas.ErrAmbiguous) || !errors.Is(err, cas.ErrFenced) {
		t.Fatalf("stale token whose answer was lost: %v, want ErrFenced", err)
	}
	wantValue(t, s, "k", "three", v3)
	if f.Fired() != 4 {
		t.Fatalf("%d faults fired, want 4", f.Fired())
	}
}

// TestDroppedConnectionCallerGaveUp: the caller's context ends while the
// answer is lost. The store does not send the write again (the caller gave
// up); it looks for the write in the key's history and finds it, or reports
// the outcome as unknown.
func TestDroppedConnectionCallerGaveUp(t *testing.T) {
	s, other, f, _ := faultyStore(t, rediscas.Config{History: 1})
	ctx := redistest.Ctx(t, 20*time.Second)
	v1, err := s.CompareAndSwap(ctx, "k", 0, []byte("one"))
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	f.LoseReply("applied", cancel)
	v2, err := s.CompareAndSwap(wctx, "k", v1, []byte("applied"))
	if err != nil {
		t.Fatalf("applied write, caller gave up: %v, want success found by write id", err)
	}
	wantValue(t, s, "k", "applied", v2)

	// Applied, then overwritten: with a history of one write, the write id
	// is gone, and the version it expected is not named as replaced.
	wctx, cancel = context.WithCancel(ctx)
	f.LoseReply("lost", func() {
		cancel()
		it, err := other.Get(context.Background(), "k")
		if err == nil {
			_, err = other.CompareAndSwap(context.Background(), "k", it.Version, []byte("by other"))
		}
		if err != nil {
			t.Error(err)
		}
	})
	_, err = s.CompareAndSwap(wctx, "k", v2, []byte("lost"))
	if !errors.Is(err, cas.ErrAmbiguous) {
		t.Fatalf("caller gave up, write applied and overwritten past the history: %v, want ErrAmbiguous", err)
	}
	wantValue(t, s, "k", "by other", 0)
}

// TestServerDown: a server that cannot be reached fails reads and writes
// with retryable, unambiguous errors: nothing was sent.
func TestServerDown(t *testing.T) {
	cli := redis.NewClient(&redis.Options{Addr: redistest.FreeAddr(t), MaxRetries: -1, DialerRetries: 1, DialTimeout: time.Second})
	defer cli.Close()
	s, err := rediscas.New(cli, rediscas.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := redistest.Ctx(t, 10*time.Second)
	_, err = s.CompareAndSwap(ctx, "k", 0, []byte("v"))
	if err == nil || errors.Is(err, cas.ErrAmbiguous) || !rediscas.Retryable(err) {
		t.Fatalf("write to a server that is down: %v (retryable %v), want a retryable, unambiguous error", err, rediscas.Retryable(err))
	}
	_, err = s.Get(ctx, "k")
	if err == nil || !rediscas.Retryable(err) {
		t.Fatalf("read from a server that is down: %v, want a retryable error", err)
	}
	l, err := rediscas.NewLocker(cli, rediscas.LockerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Acquire(ctx, "k"); err == nil || !rediscas.Retryable(err) {
		t.Fatalf("acquire from a server that is down: %v, want a retryable error", err)
	}
	// occ retries it, then gives up on its attempt limit.
	counters := cas.NewTyped(s, cas.JSON[int]())
	_, _, err = occ.Update(ctx, counters, "k", func(n int, _ bool) (int, error) { return n + 1, nil },
		occ.WithRetryable(rediscas.Retryable), occ.WithMaxAttempts(3))
	if !errors.Is(err, occ.ErrAttemptsExhausted) {
		t.Fatalf("occ.Update against a server that is down: %v, want attempts exhausted", err)
	}
}

// fakeReply is a server error reply.
type fakeReply string

func (e fakeReply) Error() string { return string(e) }
func (fakeReply) RedisError()     {}

func TestRetryable(t *testing.T) {
	cases := []struct {
		err  error
		want bool
	}{
		{fakeReply("LOADING Redis is loading the dataset in memory"), true},
		{fakeReply("TRYAGAIN Multiple keys request during rehashing of slot"), true},
		{fakeReply("CLUSTERDOWN The cluster is down"), true},
		{fakeReply("MASTERDOWN Link with MASTER is down"), true},
		{fakeReply("READONLY You can't write against a read only replica."), true},
		{fakeReply("BUSY Redis is busy running a script."), true},
		{fakeReply("ERR max number of clients reached"), true},
		{fakeReply("OOM command not allowed when used memory > 'maxmemory'."), false},
		{fakeReply("WRONGTYPE Operation against a key holding the wrong kind of value"), false},
		{redis.ErrPoolTimeout, true},
		{redis.ErrClosed, false},
		{&cas.AmbiguousError{Op: "compare-and-swap", Key: "k", Err: redis.ErrPoolTimeout}, false},
		{context.Canceled, false},
		{cas.ErrConflict, false},
		{nil, false},
	}
	for _, tc := range cases {
		if got := rediscas.Retryable(tc.err); got != tc.want {
			t.Errorf("Retryable(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

// TestDroppedConnectionsUnderLoad: concurrent occ.Update increments while
// the answers of writes are lost again and again. Every increment reported as done is in
// the counter, none twice: counter = successes + the ambiguous ones that
// applied, so successes <= counter <= successes + ambiguous.
func TestDroppedConnectionsUnderLoad(t *testing.T) {
	s, _, f, _ := faultyStore(t, rediscas.Config{})
	ctx := redistest.Ctx(t, 60*time.Second)
	counters := cas.NewTyped(s, cas.JSON[int]())
	if _, err := counters.CompareAndSwap(ctx, "n", 0, 0); err != nil {
		t.Fatal(err)
	}
	var incs increments
	stop := make(chan struct{})
	var faults sync.WaitGroup
	faults.Add(1)
	go func() {
		// One fault at a time, 5 ms after the last one fired, on the next
		// write (every write is an EVALSHA; reads are not).
		defer faults.Done()
		for {
			fired := f.Fired()
			f.LoseReply("evalsha", nil)
			for f.Fired() == fired {
				select {
				case <-stop:
					return
				case <-time.After(time.Millisecond):
				}
			}
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}()
	var wg sync.WaitGroup
	for range 6 {
		wg.Go(func() {
			for range 30 {
				if !incs.increment(t, ctx, counters, 100) {
					return
				}
			}
		})
	}
	wg.Wait()
	close(stop)
	faults.Wait()
	n, _ := incs.check(t, ctx, counters)
	t.Logf("%d increments confirmed, %d ambiguous, %d answers lost; counter %d", incs.ok.Load(), incs.ambiguous.Load(), f.Fired(), n)
	if f.Fired() == 0 {
		t.Fatal("no fault fired")
	}
}

// increments counts the increments of a counter made under faults: those
// reported done, and those whose outcome is ambiguous.
type increments struct{ ok, ambiguous atomic.Int64 }

// increment increments "n" with occ.Update (at most maxAttempts
// attempts), counts the outcome, and reports false, failing t, when the
// update failed otherwise.
func (c *increments) increment(t *testing.T, ctx context.Context, counters *cas.Typed[int], maxAttempts int) bool {
	_, _, err := occ.Update(ctx, counters, "n", func(n int, _ bool) (int, error) { return n + 1, nil },
		occ.WithRetryable(rediscas.Retryable), occ.WithMaxAttempts(maxAttempts))
	switch {
	case err == nil:
		c.ok.Add(1)
	case errors.Is(err, cas.ErrAmbiguous):
		c.ambiguous.Add(1)
	default:
		t.Error(err)
		return false
	}
	return true
}

// check reads "n" and fails t unless every increment reported done is in
// it and none twice: done <= n <= done + ambiguous. It returns n and its
// version.
func (c *increments) check(t *testing.T, ctx context.Context, counters *cas.Typed[int]) (int, cas.Version) {
	t.Helper()
	n, v, err := counters.Get(ctx, "n")
	if err != nil {
		t.Fatal(err)
	}
	if int64(n) < c.ok.Load() || int64(n) > c.ok.Load()+c.ambiguous.Load() {
		t.Fatalf("counter %d, confirmed %d, ambiguous %d: updates lost or applied twice", n, c.ok.Load(), c.ambiguous.Load())
	}
	return n, v
}

// wantValue checks key's value, and its version unless ver is 0.
func wantValue(t *testing.T, s cas.Store, key, value string, ver cas.Version) {
	t.Helper()
	it, err := s.Get(context.Background(), key)
	if err != nil || string(it.Value) != value || (ver != 0 && it.Version != ver) {
		t.Fatalf("get %q = %q v%d, %v; want %q v%d", key, it.Value, it.Version, err, value, ver)
	}
}

// TestServerRestart: the server is restarted (SIGTERM, then started again
// on its data) while goroutines increment a counter with occ.Update.
// Connections drop, writes in flight lose their answers, the server
// refuses connections for a while and comes back without its script cache.
// Every increment reported done is counted, none twice, and versions go on
// growing after the restart.
func TestServerRestart(t *testing.T) {
	srv := redistest.StartServer(t)
	s, err := rediscas.New(srv.Client(), rediscas.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := redistest.Ctx(t, 60*time.Second)
	counters := cas.NewTyped(s, cas.JSON[int]())
	if _, _, err := counters.Get(ctx, "n"); !errors.Is(err, cas.ErrNotFound) {
		t.Fatalf("fresh server: %v", err)
	}
	v0, err := counters.CompareAndSwap(ctx, "n", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	var incs increments
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				if !incs.increment(t, ctx, counters, 500) {
					return
				}
			}
		})
	}
	time.Sleep(200 * time.Millisecond)
	before := incs.ok.Load()
	srv.Restart()
	time.Sleep(300 * time.Millisecond)
	close(stop)
	wg.Wait()
	n, v := incs.check(t, ctx, counters)
	t.Logf("%d increments before the restart, %d in all, %d ambiguous; counter %d at version %d", before, incs.ok.Load(), incs.ambiguous.Load(), n, v)
	if incs.ok.Load() == before {
		t.Fatal("no increment succeeded after the restart")
	}
	if v <= v0 || uint64(v) < uint64(n) {
		t.Fatalf("version %d after %d increments from version %d", v, n, v0)
	}
}
