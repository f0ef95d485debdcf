package occ

import (
	"context"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cenkalti/backoff/v4"
	"go.uber.org/goleak"

	"github.com/occkit/occkit/cas"
)

// TestMain fails the package if any test leaves a goroutine behind: Retry,
// Update and Txn must run the caller's function on the caller's goroutine
// and start nothing that outlives the call.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// goroutineID returns the id of the calling goroutine, parsed from the first
// line of its stack ("goroutine 17 [running]:").
func goroutineID(t testing.TB) uint64 {
	t.Helper()
	var buf [64]byte
	n := runtime.Stack(buf[:], false)
	s := strings.TrimPrefix(string(buf[:n]), "goroutine ")
	i := strings.IndexByte(s, ' ')
	if i < 0 {
		t.Fatalf("cannot parse goroutine id from %q", buf[:n])
	}
	id, err := strconv.ParseUint(s[:i], 10, 64)
	if err != nil {
		t.Fatalf("cannot parse goroutine id from %q: %v", buf[:n], err)
	}
	return id
}

// sleepRecorder is a withSleep hook that never sleeps and records every wait
// the loop asked for. It is safe for concurrent use.
type sleepRecorder struct {
	mu    sync.Mutex
	waits []time.Duration
}

func (r *sleepRecorder) sleep(ctx context.Context, d time.Duration) error {
	r.mu.Lock()
	r.waits = append(r.waits, d)
	r.mu.Unlock()
	return ctx.Err()
}

func (r *sleepRecorder) option() Option { return withSleep(r.sleep) }

func (r *sleepRecorder) recorded() []time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]time.Duration(nil), r.waits...)
}

// noSleep makes the loop retry at once, whatever the BackOff says.
func noSleep() Option {
	return withSleep(func(ctx context.Context, _ time.Duration) error { return ctx.Err() })
}

// zeroBackOffs gives every call its own ZeroBackOff (safe for options shared
// by concurrent calls).
func zeroBackOffs() Option {
	return WithBackOffFunc(func() backoff.BackOff { return &backoff.ZeroBackOff{} })
}

// seqBackOff returns the waits of seq in order, then backoff.Stop; Reset
// starts it again and is counted.
type seqBackOff struct {
	seq    []time.Duration
	next   int
	resets int
}

func (b *seqBackOff) NextBackOff() time.Duration {
	if b.next >= len(b.seq) {
		return backoff.Stop
	}
	d := b.seq[b.next]
	b.next++
	return d
}

func (b *seqBackOff) Reset() {
	b.next = 0
	b.resets++
}

// conflict returns a fresh conflict error as a store would.
func conflict(key string) error {
	return &cas.ConflictError{Key: key, Expected: 1}
}

// recordingObserver keeps every attempt and call it is told about, with the
// goroutine each was reported on.
type recordingObserver struct {
	mu       sync.Mutex
	attempts []Attempt
	calls    []Call
	gids     []uint64
	t        testing.TB
}

func (o *recordingObserver) ObserveAttempt(_ context.Context, a Attempt) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.attempts = append(o.attempts, a)
	o.gids = append(o.gids, goroutineID(o.t))
}

func (o *recordingObserver) ObserveCall(_ context.Context, c Call) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.calls = append(o.calls, c)
	o.gids = append(o.gids, goroutineID(o.t))
}
