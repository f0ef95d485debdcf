package occ

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cenkalti/backoff/v4"

	"github.com/occkit/occkit/cas"
)

// permError is a non-retryable error with an identity of its own.
type permError struct{ msg string }

func (e *permError) Error() string { return e.msg }

// errSeq returns a function for Retry that fails with errs[0], errs[1], ...
// and then keeps returning the last element; *calls counts its calls.
func errSeq(calls *int, errs ...error) func(context.Context) error {
	return func(context.Context) error {
		i := min(*calls, len(errs)-1)
		*calls++
		return errs[i]
	}
}

func TestRetrySuccessFirstTry(t *testing.T) {
	rec := &sleepRecorder{}
	calls := 0
	err := Retry(context.Background(), errSeq(&calls, nil), rec.option())
	if err != nil {
		t.Fatalf("Retry = %v, want nil", err)
	}
	if calls != 1 {
		t.Errorf("fn called %d times, want 1", calls)
	}
	if w := rec.recorded(); len(w) != 0 {
		t.Errorf("waits = %v, want none", w)
	}
}

func TestRetryConflictThenSuccess(t *testing.T) {
	tests := []struct {
		name      string
		conflicts int
		conflict  error
	}{
		{"one conflict", 1, conflict("k")},
		{"three conflicts", 3, conflict("k")},
		{"bare sentinel", 2, cas.ErrConflict},
		{"wrapped with %w", 2, fmt.Errorf("saving order: %w", conflict("k"))},
		{"deeply wrapped", 1, fmt.Errorf("a: %w", fmt.Errorf("b: %w", conflict("k")))},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := &sleepRecorder{}
			errs := make([]error, 0, tt.conflicts+1)
			for range tt.conflicts {
				errs = append(errs, tt.conflict)
			}
			errs = append(errs, nil)
			calls := 0
			err := Retry(context.Background(), errSeq(&calls, errs...), rec.option(), WithBackOff(&backoff.ZeroBackOff{}))
			if err != nil {
				t.Fatalf("Retry = %v, want nil", err)
			}
			if calls != tt.conflicts+1 {
				t.Errorf("fn called %d times, want %d", calls, tt.conflicts+1)
			}
			if w := rec.recorded(); len(w) != tt.conflicts {
				t.Errorf("%d waits requested, want %d (one per retry)", len(w), tt.conflicts)
			}
		})
	}
}

func TestRetryPermanentErrorReturnedAsIs(t *testing.T) {
	plain := errors.New("sold out")
	custom := &permError{"custom permanent"}
	notFound := fmt.Errorf("load: %w", cas.ErrNotFound)
	tests := []struct {
		name      string
		errs      []error
		want      error
		wantCalls int
	}{
		{"plain error first", []error{plain}, plain, 1},
		{"custom type first", []error{custom}, custom, 1},
		{"not found is not retried", []error{notFound}, notFound, 1},
		{"after two conflicts", []error{conflict("k"), conflict("k"), custom}, custom, 3},
		{"ambiguous is not retried", []error{cas.ErrAmbiguous}, cas.ErrAmbiguous, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			calls := 0
			err := Retry(context.Background(), errSeq(&calls, tt.errs...), noSleep())
			if err != tt.want {
				t.Fatalf("Retry = %#v, want the very error fn returned (%#v)", err, tt.want)
			}
			if !errors.Is(err, tt.want) {
				t.Errorf("errors.Is(err, fn's error) = false")
			}
			var gu *GiveUpError
			if errors.As(err, &gu) {
				t.Errorf("permanent error wrapped in %T", gu)
			}
			if calls != tt.wantCalls {
				t.Errorf("fn called %d times, want %d", calls, tt.wantCalls)
			}
		})
	}

	t.Run("custom type keeps its pointer", func(t *testing.T) {
		calls := 0
		err := Retry(context.Background(), errSeq(&calls, custom), noSleep())
		var pe *permError
		if !errors.As(err, &pe) || pe != custom {
			t.Fatalf("errors.As gave %p, want %p", pe, custom)
		}
	})
}

func TestRetryMaxAttempts(t *testing.T) {
	tests := []struct {
		name      string
		n         int
		wantCalls int
	}{
		{"one", 1, 1},
		{"two", 2, 2},
		{"five", 5, 5},
		{"twenty (above the default)", 20, 20},
		{"zero means one call", 0, 1},
		{"negative means one call", -3, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := &sleepRecorder{}
			calls := 0
			last := conflict("k")
			err := Retry(context.Background(), errSeq(&calls, last), WithMaxAttempts(tt.n), rec.option(), WithBackOff(&backoff.ZeroBackOff{}))
			if calls != tt.wantCalls {
				t.Errorf("fn called %d times, want %d", calls, tt.wantCalls)
			}
			var gu *GiveUpError
			if !errors.As(err, &gu) {
				t.Fatalf("Retry = %v (%T), want *GiveUpError", err, err)
			}
			if gu.Attempts != tt.wantCalls {
				t.Errorf("Attempts = %d, want %d", gu.Attempts, tt.wantCalls)
			}
			if gu.Reason != ErrAttemptsExhausted {
				t.Errorf("Reason = %v, want ErrAttemptsExhausted", gu.Reason)
			}
			if gu.Last != last {
				t.Errorf("Last = %v, want fn's last error", gu.Last)
			}
			if !errors.Is(err, ErrAttemptsExhausted) || !errors.Is(err, cas.ErrConflict) {
				t.Errorf("errors.Is(ErrAttemptsExhausted)=%v, errors.Is(cas.ErrConflict)=%v, want both true",
					errors.Is(err, ErrAttemptsExhausted), errors.Is(err, cas.ErrConflict))
			}
			if errors.Is(err, ErrBudgetExhausted) || errors.Is(err, ErrBackOffStopped) || errors.Is(err, context.Canceled) {
				t.Errorf("error %v matches a reason it did not stop for", err)
			}
			var ce *cas.ConflictError
			if !errors.As(err, &ce) {
				t.Errorf("last *cas.ConflictError not reachable with errors.As")
			}
			if w := rec.recorded(); len(w) != tt.wantCalls-1 {
				t.Errorf("%d waits, want %d", len(w), tt.wantCalls-1)
			}
		})
	}
}

func TestRetryDefaultMaxAttempts(t *testing.T) {
	calls := 0
	err := Retry(context.Background(), errSeq(&calls, conflict("k")), noSleep())
	if calls != DefaultMaxAttempts {
		t.Errorf("fn called %d times, want DefaultMaxAttempts = %d", calls, DefaultMaxAttempts)
	}
	if !errors.Is(err, ErrAttemptsExhausted) {
		t.Errorf("Retry = %v, want ErrAttemptsExhausted", err)
	}
}

func TestRetryWithRetryable(t *testing.T) {
	errA := errors.New("transient A")
	errB := errors.New("transient B")
	errOther := errors.New("other")
	isA := func(err error) bool { return errors.Is(err, errA) }
	isB := func(err error) bool { return errors.Is(err, errB) }
	never := func(error) bool { return false }

	tests := []struct {
		name      string
		opts      []Option
		errs      []error
		wantCalls int
		check     func(t *testing.T, err error)
	}{
		{
			name: "classified error retried until success",
			opts: []Option{WithRetryable(isA)}, errs: []error{errA, fmt.Errorf("wrapped: %w", errA), nil},
			wantCalls: 3,
			check:     wantNil,
		},
		{
			name: "unclassified error returned as is",
			opts: []Option{WithRetryable(isA)}, errs: []error{errOther},
			wantCalls: 1,
			check:     wantSame(errOther),
		},
		{
			name: "without the option the error is permanent",
			errs: []error{errA, nil}, wantCalls: 1,
			check: wantSame(errA),
		},
		{
			name: "two options combine",
			opts: []Option{WithRetryable(isA), WithRetryable(isB)}, errs: []error{errA, errB, errA, nil},
			wantCalls: 4,
			check:     wantNil,
		},
		{
			name: "two options combine, other order",
			opts: []Option{WithRetryable(isB), WithRetryable(isA)}, errs: []error{errA, errB, nil},
			wantCalls: 3,
			check:     wantNil,
		},
		{
			name: "combined options still refuse others",
			opts: []Option{WithRetryable(isA), WithRetryable(isB)}, errs: []error{errA, errB, errOther},
			wantCalls: 3,
			check:     wantSame(errOther),
		},
		{
			name: "conflicts stay retryable whatever the classifier says",
			opts: []Option{WithRetryable(never)}, errs: []error{conflict("k"), nil},
			wantCalls: 2,
			check:     wantNil,
		},
		{
			name: "retryable errors exhaust the attempts",
			opts: []Option{WithRetryable(isA), WithMaxAttempts(3)}, errs: []error{errA},
			wantCalls: 3,
			check: func(t *testing.T, err error) {
				var gu *GiveUpError
				if !errors.As(err, &gu) || gu.Attempts != 3 {
					t.Fatalf("Retry = %v, want *GiveUpError after 3 attempts", err)
				}
				if !errors.Is(err, errA) || !errors.Is(err, ErrAttemptsExhausted) {
					t.Errorf("err %v must match errA and ErrAttemptsExhausted", err)
				}
				if errors.Is(err, cas.ErrConflict) {
					t.Errorf("err %v matches cas.ErrConflict but no conflict happened", err)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			calls := 0
			opts := append([]Option{noSleep()}, tt.opts...)
			err := Retry(context.Background(), errSeq(&calls, tt.errs...), opts...)
			if calls != tt.wantCalls {
				t.Errorf("fn called %d times, want %d", calls, tt.wantCalls)
			}
			tt.check(t, err)
		})
	}
}

func wantNil(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("err = %v, want nil", err)
	}
}

func wantSame(want error) func(t *testing.T, err error) {
	return func(t *testing.T, err error) {
		t.Helper()
		if err != want {
			t.Fatalf("err = %#v, want the same error %#v", err, want)
		}
	}
}

func TestRetryContextDoneBeforeFirstAttempt(t *testing.T) {
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	expired, cancel2 := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel2()

	tests := []struct {
		name string
		ctx  context.Context
		want error
	}{
		{"cancelled", cancelled, context.Canceled},
		{"deadline passed", expired, context.DeadlineExceeded},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			obs := &recordingObserver{t: t}
			calls := 0
			err := Retry(tt.ctx, errSeq(&calls, nil), WithObserver(obs), noSleep())
			if calls != 0 {
				t.Errorf("fn called %d times with a done context, want 0", calls)
			}
			if err == nil {
				t.Fatal("Retry = nil with a done context: reported success without running fn")
			}
			if !errors.Is(err, tt.want) || !errors.Is(err, tt.ctx.Err()) {
				t.Errorf("Retry = %v, want it to match %v", err, tt.want)
			}
			var gu *GiveUpError
			if !errors.As(err, &gu) {
				t.Fatalf("Retry = %T, want *GiveUpError", err)
			}
			if gu.Attempts != 0 || gu.Last != nil {
				t.Errorf("GiveUpError{Attempts: %d, Last: %v}, want 0 and nil", gu.Attempts, gu.Last)
			}
			if len(obs.attempts) != 0 {
				t.Errorf("observer saw %d attempts, want 0", len(obs.attempts))
			}
			if len(obs.calls) != 1 || obs.calls[0].Outcome != OutcomeGaveUp || obs.calls[0].Attempts != 0 {
				t.Errorf("observer calls = %+v, want one OutcomeGaveUp call with 0 attempts", obs.calls)
			}
		})
	}
}

// signalBackOff closes reached the first time the loop asks it for a wait,
// that is after the loop has checked the context following an attempt.
type signalBackOff struct {
	backoff.BackOff
	reached chan struct{}
	once    sync.Once
}

func (b *signalBackOff) NextBackOff() time.Duration {
	d := b.BackOff.NextBackOff()
	b.once.Do(func() { close(b.reached) })
	return d
}

// retryAsync runs Retry on a new goroutine and returns its error, failing the
// test if Retry has not returned within limit (a wait that ignores the
// context would otherwise hang the test for an hour).
func retryAsync(t *testing.T, limit time.Duration, ctx context.Context, fn func(context.Context) error, opts ...Option) (time.Duration, error) {
	t.Helper()
	done := make(chan error, 1)
	start := time.Now()
	go func() { done <- Retry(ctx, fn, opts...) }()
	select {
	case err := <-done:
		return time.Since(start), err
	case <-time.After(limit):
		t.Fatalf("Retry did not return within %v of the context ending", limit)
		return 0, nil
	}
}

func TestRetryContextCancelledDuringWait(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	bo := &signalBackOff{BackOff: backoff.NewConstantBackOff(time.Hour), reached: make(chan struct{})}

	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		<-bo.reached // the loop is about to wait an hour
		time.Sleep(10 * time.Millisecond)
		cancel()
	}()

	calls := 0
	last := conflict("k")
	took, err := retryAsync(t, 10*time.Second, ctx, errSeq(&calls, last), WithBackOff(bo), WithMaxAttempts(5))
	wg.Wait()

	if took > 5*time.Second {
		t.Errorf("Retry took %v after cancel, want prompt return", took)
	}
	if calls != 1 {
		t.Errorf("fn called %d times, want 1 (cancelled during the first wait)", calls)
	}
	if !errors.Is(err, context.Canceled) || !errors.Is(err, cas.ErrConflict) {
		t.Fatalf("Retry = %v, want it to match context.Canceled and cas.ErrConflict", err)
	}
	var gu *GiveUpError
	if !errors.As(err, &gu) || gu.Reason != context.Canceled || gu.Attempts != 1 || gu.Last != last {
		t.Errorf("GiveUpError = %+v, want Reason context.Canceled, Attempts 1, Last the conflict", gu)
	}
}

func TestRetryContextDeadlineDuringWait(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	calls := 0
	took, err := retryAsync(t, 10*time.Second, ctx, errSeq(&calls, conflict("k")),
		WithBackOff(backoff.NewConstantBackOff(time.Hour)), WithMaxAttempts(5))
	if took > 5*time.Second {
		t.Errorf("Retry took %v, want to return at the deadline", took)
	}
	if calls != 1 {
		t.Errorf("fn called %d times, want 1", calls)
	}
	if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, cas.ErrConflict) {
		t.Fatalf("Retry = %v, want it to match context.DeadlineExceeded and cas.ErrConflict", err)
	}
	if errors.Is(err, ErrAttemptsExhausted) {
		t.Errorf("Retry = %v matches ErrAttemptsExhausted, but the deadline stopped it", err)
	}
}

func TestRetryContextDeadlineWithSleepHook(t *testing.T) {
	// The deadline passes while the loop waits: the hook reports it the way
	// the real wait does.
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	calls := 0
	sleep := withSleep(func(ctx context.Context, d time.Duration) error {
		return context.DeadlineExceeded
	})
	err := Retry(ctx, errSeq(&calls, conflict("k")), sleep, WithMaxAttempts(10))
	if calls != 1 {
		t.Errorf("fn called %d times, want 1", calls)
	}
	var gu *GiveUpError
	if !errors.As(err, &gu) || gu.Reason != context.DeadlineExceeded || !errors.Is(err, cas.ErrConflict) {
		t.Fatalf("Retry = %v, want *GiveUpError with Reason DeadlineExceeded matching the conflict", err)
	}
}

func TestRetryContextCancelledByFn(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rec := &sleepRecorder{}
	calls := 0
	err := Retry(ctx, func(context.Context) error {
		calls++
		cancel()
		return conflict("k")
	}, rec.option(), WithMaxAttempts(10))
	if calls != 1 {
		t.Errorf("fn called %d times, want 1", calls)
	}
	if !errors.Is(err, context.Canceled) || !errors.Is(err, cas.ErrConflict) {
		t.Errorf("Retry = %v, want it to match context.Canceled and cas.ErrConflict", err)
	}
	if w := rec.recorded(); len(w) != 0 {
		t.Errorf("loop asked to wait %v after the context ended, want no wait", w)
	}
}

func TestRetryPermanentErrorWhileContextCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	perm := &permError{"backend refused"}
	calls := 0
	err := Retry(ctx, func(context.Context) error {
		calls++
		cancel()
		return perm
	}, noSleep())
	if calls != 1 {
		t.Errorf("fn called %d times, want 1", calls)
	}
	if err == nil {
		t.Fatal("Retry = nil, want an error")
	}
	if !errors.Is(err, perm) {
		t.Errorf("Retry = %v, does not match fn's error", err)
	}
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Retry = %v, does not match ctx.Err() although the context ended the call", err)
	}
	var pe *permError
	if !errors.As(err, &pe) || pe != perm {
		t.Errorf("fn's error not reachable with errors.As")
	}
}

func TestRetryBackOffStop(t *testing.T) {
	tests := []struct {
		name      string
		bo        backoff.BackOff
		wantCalls int
	}{
		{"StopBackOff", &backoff.StopBackOff{}, 1},
		{"WithMaxRetries 2", backoff.WithMaxRetries(&backoff.ZeroBackOff{}, 2), 3},
		{"sequence of 3 then Stop", &seqBackOff{seq: []time.Duration{1, 2, 3}}, 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			calls := 0
			err := Retry(context.Background(), errSeq(&calls, conflict("k")), WithBackOff(tt.bo), WithMaxAttempts(100), noSleep())
			if calls != tt.wantCalls {
				t.Errorf("fn called %d times, want %d", calls, tt.wantCalls)
			}
			var gu *GiveUpError
			if !errors.As(err, &gu) {
				t.Fatalf("Retry = %v, want *GiveUpError", err)
			}
			if gu.Reason != ErrBackOffStopped || gu.Attempts != tt.wantCalls {
				t.Errorf("GiveUpError = %+v, want Reason ErrBackOffStopped, Attempts %d", gu, tt.wantCalls)
			}
			if !errors.Is(err, ErrBackOffStopped) || !errors.Is(err, cas.ErrConflict) {
				t.Errorf("Retry = %v, want it to match ErrBackOffStopped and cas.ErrConflict", err)
			}
			if errors.Is(err, ErrAttemptsExhausted) {
				t.Errorf("Retry = %v matches ErrAttemptsExhausted", err)
			}
		})
	}
}

func TestRetryPanicPropagates(t *testing.T) {
	type boom struct{ n int }
	tests := []struct {
		name    string
		panicAt int
	}{
		{"first attempt", 1},
		{"third attempt", 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			want := &boom{tt.panicAt}
			calls := 0
			returned := false
			func() {
				defer func() {
					got := recover()
					if got != want {
						t.Errorf("recovered %v, want the value fn panicked with", got)
					}
				}()
				_ = Retry(context.Background(), func(context.Context) error {
					calls++
					if calls == tt.panicAt {
						panic(want)
					}
					return conflict("k")
				}, noSleep(), WithMaxAttempts(10))
				returned = true
			}()
			if returned {
				t.Error("Retry returned normally after fn panicked: the panic was swallowed")
			}
			if calls != tt.panicAt {
				t.Errorf("fn called %d times, want %d (no call after the panic)", calls, tt.panicAt)
			}
		})
	}
}

func TestRetryRunsOnCallerGoroutine(t *testing.T) {
	caller := goroutineID(t)
	obs := &recordingObserver{t: t}
	var gids []uint64
	calls := 0
	err := Retry(context.Background(), func(context.Context) error {
		gids = append(gids, goroutineID(t))
		calls++
		if calls < 3 {
			return conflict("k")
		}
		return nil
	}, noSleep(), WithObserver(obs))
	if err != nil {
		t.Fatal(err)
	}
	if len(gids) != 3 {
		t.Fatalf("fn ran %d times, want 3", len(gids))
	}
	for i, g := range gids {
		if g != caller {
			t.Errorf("attempt %d ran on goroutine %d, want the caller's %d", i+1, g, caller)
		}
	}
	for i, g := range obs.gids {
		if g != caller {
			t.Errorf("observer event %d ran on goroutine %d, want the caller's %d", i, g, caller)
		}
	}
}

func TestRetryPassesContext(t *testing.T) {
	type key struct{}
	ctx := context.WithValue(context.Background(), key{}, "marker")
	calls := 0
	err := Retry(ctx, func(ctx context.Context) error {
		calls++
		if got := ctx.Value(key{}); got != "marker" {
			t.Errorf("attempt %d: ctx value = %v, want the caller's context", calls, got)
		}
		if calls == 1 {
			return conflict("k")
		}
		return nil
	}, noSleep())
	if err != nil || calls != 2 {
		t.Fatalf("Retry = %v after %d calls, want nil after 2", err, calls)
	}
}

func TestRetryWaitsFollowBackOff(t *testing.T) {
	ms := time.Millisecond
	tests := []struct {
		name      string
		bo        backoff.BackOff
		maxTries  int
		errs      []error
		wantWaits []time.Duration
	}{
		{
			name: "sequence", bo: &seqBackOff{seq: []time.Duration{1 * ms, 2 * ms, 3 * ms, 5 * ms, 8 * ms}},
			maxTries: 10, errs: []error{conflict("k"), conflict("k"), conflict("k"), conflict("k"), nil},
			wantWaits: []time.Duration{1 * ms, 2 * ms, 3 * ms, 5 * ms},
		},
		{
			name: "constant", bo: backoff.NewConstantBackOff(7 * ms),
			maxTries: 4, errs: []error{conflict("k")},
			wantWaits: []time.Duration{7 * ms, 7 * ms, 7 * ms},
		},
		{
			name: "exponential without jitter",
			bo: backoff.NewExponentialBackOff(backoff.WithInitialInterval(10*ms), backoff.WithRandomizationFactor(0),
				backoff.WithMultiplier(3), backoff.WithMaxInterval(time.Second), backoff.WithMaxElapsedTime(0)),
			maxTries: 5, errs: []error{conflict("k")},
			wantWaits: []time.Duration{10 * ms, 30 * ms, 90 * ms, 270 * ms},
		},
		{
			name: "retryable errors wait too", bo: &seqBackOff{seq: []time.Duration{4 * ms, 9 * ms}},
			maxTries: 10, errs: []error{errTransient, conflict("k"), nil},
			wantWaits: []time.Duration{4 * ms, 9 * ms},
		},
		{
			name: "no wait after a permanent error", bo: &seqBackOff{seq: []time.Duration{4 * ms, 9 * ms}},
			maxTries: 10, errs: []error{conflict("k"), errors.New("permanent")},
			wantWaits: []time.Duration{4 * ms},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := &sleepRecorder{}
			calls := 0
			_ = Retry(context.Background(), errSeq(&calls, tt.errs...), WithBackOff(tt.bo), WithMaxAttempts(tt.maxTries),
				rec.option(), WithRetryable(func(err error) bool { return err == errTransient }))
			if got := rec.recorded(); !slices.Equal(got, tt.wantWaits) {
				t.Errorf("waits = %v, want %v", got, tt.wantWaits)
			}
		})
	}
}

var errTransient = errors.New("transient")

func TestRetryWithBackOffResetPerCall(t *testing.T) {
	ms := time.Millisecond
	t.Run("sequence", func(t *testing.T) {
		bo := &seqBackOff{seq: []time.Duration{1 * ms, 2 * ms, 3 * ms}}
		opts := []Option{WithBackOff(bo), WithMaxAttempts(10)}
		for call := 1; call <= 2; call++ {
			rec := &sleepRecorder{}
			calls := 0
			err := Retry(context.Background(), errSeq(&calls, conflict("k"), conflict("k"), conflict("k"), nil), append(opts, rec.option())...)
			if err != nil {
				t.Fatalf("call %d: Retry = %v (a BackOff not Reset runs out and stops)", call, err)
			}
			if got, want := rec.recorded(), bo.seq; !slices.Equal(got, want) {
				t.Errorf("call %d: waits = %v, want %v", call, got, want)
			}
			if bo.resets != call {
				t.Errorf("after call %d: BackOff reset %d times, want %d", call, bo.resets, call)
			}
		}
	})
	t.Run("exponential", func(t *testing.T) {
		bo := backoff.NewExponentialBackOff(backoff.WithInitialInterval(ms), backoff.WithRandomizationFactor(0),
			backoff.WithMultiplier(2), backoff.WithMaxInterval(time.Second), backoff.WithMaxElapsedTime(0))
		want := []time.Duration{1 * ms, 2 * ms, 4 * ms}
		for call := 1; call <= 2; call++ {
			rec := &sleepRecorder{}
			calls := 0
			_ = Retry(context.Background(), errSeq(&calls, conflict("k")), WithBackOff(bo), WithMaxAttempts(4), rec.option())
			if got := rec.recorded(); !slices.Equal(got, want) {
				t.Errorf("call %d: waits = %v, want %v", call, got, want)
			}
		}
	})
}

func TestRetryWithBackOffFunc(t *testing.T) {
	ms := time.Millisecond
	made := 0
	opt := WithBackOffFunc(func() backoff.BackOff {
		made++
		return &seqBackOff{seq: []time.Duration{10 * ms, 20 * ms, 30 * ms}}
	})
	steps := []struct {
		name      string
		errs      []error
		wantMade  int
		wantWaits []time.Duration
	}{
		{"success first time", []error{nil}, 0, nil},
		{"permanent failure first time", []error{errors.New("nope")}, 0, nil},
		{"two conflicts", []error{conflict("k"), conflict("k"), nil}, 1, []time.Duration{10 * ms, 20 * ms}},
		{"success again", []error{nil}, 1, nil},
		{"one conflict (fresh BackOff)", []error{conflict("k"), nil}, 2, []time.Duration{10 * ms}},
		{"three conflicts", []error{conflict("k"), conflict("k"), conflict("k"), nil}, 3, []time.Duration{10 * ms, 20 * ms, 30 * ms}},
	}
	for _, s := range steps {
		rec := &sleepRecorder{}
		calls := 0
		_ = Retry(context.Background(), errSeq(&calls, s.errs...), opt, rec.option())
		if made != s.wantMade {
			t.Errorf("%s: BackOff func called %d times in all, want %d", s.name, made, s.wantMade)
		}
		if got := rec.recorded(); !slices.Equal(got, s.wantWaits) {
			t.Errorf("%s: waits = %v, want %v", s.name, got, s.wantWaits)
		}
	}
}

func TestRetryBackOffOptionsLastWins(t *testing.T) {
	ms := time.Millisecond
	made := 0
	fn := WithBackOffFunc(func() backoff.BackOff {
		made++
		return backoff.NewConstantBackOff(5 * ms)
	})
	val := WithBackOff(backoff.NewConstantBackOff(9 * ms))
	tests := []struct {
		name     string
		opts     []Option
		wantWait time.Duration
		wantMade int
	}{
		{"WithBackOff after WithBackOffFunc", []Option{fn, val}, 9 * ms, 0},
		{"WithBackOffFunc after WithBackOff", []Option{val, fn}, 5 * ms, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			made = 0
			rec := &sleepRecorder{}
			calls := 0
			_ = Retry(context.Background(), errSeq(&calls, conflict("k"), nil), append(tt.opts, rec.option())...)
			if got := rec.recorded(); len(got) != 1 || got[0] != tt.wantWait {
				t.Errorf("waits = %v, want [%v]", got, tt.wantWait)
			}
			if made != tt.wantMade {
				t.Errorf("BackOff func called %d times, want %d", made, tt.wantMade)
			}
		})
	}
}

func TestDefaultBackOffSchedule(t *testing.T) {
	// DefaultBackOff: 1ms doubling, capped at 20ms; each wait is base ±
	// 50% (the backoff library's interval is inclusive, hence +1ns).
	bases := []time.Duration{1, 2, 4, 8, 16, 20, 20, 20, 20}
	for run := range 20 { // jitter: check several draws
		b := DefaultBackOff()
		for i, base := range bases {
			base *= time.Millisecond
			w := b.NextBackOff()
			if lo, hi := base/2, base*3/2+1; w < lo || w > hi {
				t.Errorf("run %d: wait %d = %v, want within [%v, %v]", run, i+1, w, lo, hi)
			}
		}
	}
}

// TestScaledBackOff: the default waits are counted in attempt times:
// 1, 2, 4, 8 units, then 4 once the call is senior, ±50%, within [5µs,
// 100ms]; before any attempt is timed, DefaultBackOff's.
func TestScaledBackOff(t *testing.T) {
	for _, unit := range []time.Duration{time.Microsecond, 40 * time.Microsecond, 2 * time.Millisecond, 30 * time.Millisecond} {
		for run := range 10 {
			b := &scaledBackOff{}
			// 1, 2, 4, 8 attempt times, then senior: four each.
			for n, units := range []time.Duration{1, 2, 4, 8, 4, 4, 4, 4} {
				n++
				base := units * unit
				lo := min(max(base/2, scaledMinWait), scaledMaxWait)
				hi := min(max(base*3/2+1, scaledMinWait), scaledMaxWait)
				if w := b.next(unit); w < lo || w > hi {
					t.Fatalf("unit %v run %d: wait %d = %v, want within [%v, %v]", unit, run, n, w, lo, hi)
				}
			}
		}
	}
	b := &scaledBackOff{}
	if w := b.next(0); w < 500*time.Microsecond || w > 1500*time.Microsecond+1 {
		t.Fatalf("untimed first wait %v, want DefaultBackOff's first (1ms ± 50%%)", w)
	}
}

// TestDefaultBackOffFollowsAttemptTime: through Retry, a store whose
// attempts take at least 2ms gets waits of at least a millisecond, and one
// whose attempts take microseconds gets waits far below DefaultBackOff's
// milliseconds. Only lower bounds and a wide upper bound: a loaded machine
// stretches attempts, never shortens them.
func TestDefaultBackOffFollowsAttemptTime(t *testing.T) {
	run := func(attempt time.Duration) []time.Duration {
		rec := &sleepRecorder{}
		_ = Retry(context.Background(), func(context.Context) error {
			if attempt > 0 {
				time.Sleep(attempt)
			}
			return conflict("k")
		}, WithMaxAttempts(7), rec.option())
		return rec.recorded()
	}
	slow := run(2 * time.Millisecond)
	for i, w := range slow[1:] { // the first wait comes before any timed attempt
		least := time.Millisecond // half a 2ms attempt
		if w < least {
			t.Fatalf("slow store: wait %d = %v (waits %v), want at least %v", i+2, w, slow, least)
		}
	}
	fast := run(0)
	for i, w := range fast[1:] {
		if w > 500*time.Microsecond {
			t.Fatalf("fast store: wait %d = %v (waits %v), want far below a millisecond", i+2, w, fast)
		}
	}
}

func TestRetryObserver(t *testing.T) {
	perm := errors.New("permanent")
	type att struct {
		n int
		o Outcome
	}
	tests := []struct {
		name         string
		errs         []error
		opts         []Option
		wantAttempts []att
		wantCall     Outcome
		wantCallN    int
		wantErr      func(error) bool
	}{
		{
			name: "success", errs: []error{nil},
			wantAttempts: []att{{1, OutcomeSuccess}}, wantCall: OutcomeSuccess, wantCallN: 1,
			wantErr: func(err error) bool { return err == nil },
		},
		{
			name: "conflicts then success", errs: []error{conflict("k"), conflict("k"), nil},
			wantAttempts: []att{{1, OutcomeConflict}, {2, OutcomeConflict}, {3, OutcomeSuccess}}, wantCall: OutcomeSuccess, wantCallN: 3,
			wantErr: func(err error) bool { return err == nil },
		},
		{
			name: "retryable then failed", errs: []error{errTransient, perm},
			opts:         []Option{WithRetryable(func(err error) bool { return err == errTransient })},
			wantAttempts: []att{{1, OutcomeRetryable}, {2, OutcomeFailed}}, wantCall: OutcomeFailed, wantCallN: 2,
			wantErr: func(err error) bool { return err == perm },
		},
		{
			name: "gave up", errs: []error{conflict("k")}, opts: []Option{WithMaxAttempts(3)},
			wantAttempts: []att{{1, OutcomeConflict}, {2, OutcomeConflict}, {3, OutcomeConflict}}, wantCall: OutcomeGaveUp, wantCallN: 3,
			wantErr: func(err error) bool { return errors.Is(err, ErrAttemptsExhausted) },
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			obs := &recordingObserver{t: t}
			calls := 0
			err := Retry(context.Background(), errSeq(&calls, tt.errs...), append([]Option{noSleep(), WithObserver(obs)}, tt.opts...)...)
			if len(obs.attempts) != len(tt.wantAttempts) {
				t.Fatalf("observer saw %d attempts, want %d: %+v", len(obs.attempts), len(tt.wantAttempts), obs.attempts)
			}
			for i, a := range obs.attempts {
				w := tt.wantAttempts[i]
				if a.Number != w.n || a.Outcome != w.o {
					t.Errorf("attempt %d: Number %d Outcome %v, want %d %v", i, a.Number, a.Outcome, w.n, w.o)
				}
				if a.Op != "retry" || a.Key != "" {
					t.Errorf("attempt %d: Op %q Key %q, want \"retry\" and \"\"", i, a.Op, a.Key)
				}
				if want := tt.errs[min(i, len(tt.errs)-1)]; a.Err != want {
					t.Errorf("attempt %d: Err %v, want %v", i, a.Err, want)
				}
				if a.Latency < 0 {
					t.Errorf("attempt %d: negative latency %v", i, a.Latency)
				}
			}
			if len(obs.calls) != 1 {
				t.Fatalf("observer saw %d calls, want 1", len(obs.calls))
			}
			c := obs.calls[0]
			if c.Attempts != tt.wantCallN || c.Outcome != tt.wantCall || c.Op != "retry" {
				t.Errorf("call = {Op %q Attempts %d Outcome %v}, want {retry %d %v}", c.Op, c.Attempts, c.Outcome, tt.wantCallN, tt.wantCall)
			}
			if c.Err != err {
				t.Errorf("call Err = %v, want the error Retry returned (%v)", c.Err, err)
			}
			if !tt.wantErr(err) {
				t.Errorf("Retry = %v, unexpected", err)
			}
			if c.Latency < 0 {
				t.Errorf("call latency %v < 0", c.Latency)
			}
		})
	}
}

func TestObserverFuncsNilFields(t *testing.T) {
	var attempts, calls int
	tests := []struct {
		name         string
		obs          ObserverFuncs
		wantAttempts int
		wantCalls    int
	}{
		{"both nil", ObserverFuncs{}, 0, 0},
		{"attempt only", ObserverFuncs{Attempt: func(context.Context, Attempt) { attempts++ }}, 2, 0},
		{"call only", ObserverFuncs{Call: func(context.Context, Call) { calls++ }}, 0, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			attempts, calls = 0, 0
			n := 0
			if err := Retry(context.Background(), errSeq(&n, conflict("k"), nil), noSleep(), WithObserver(tt.obs)); err != nil {
				t.Fatal(err)
			}
			if attempts != tt.wantAttempts || calls != tt.wantCalls {
				t.Errorf("attempts %d calls %d, want %d %d", attempts, calls, tt.wantAttempts, tt.wantCalls)
			}
		})
	}
}

func TestRetryZeroOptionIgnored(t *testing.T) {
	calls := 0
	err := Retry(context.Background(), errSeq(&calls, conflict("k"), nil), Option{}, noSleep(), Option{})
	if err != nil || calls != 2 {
		t.Fatalf("Retry = %v after %d calls, want nil after 2", err, calls)
	}
}

func TestOutcomeString(t *testing.T) {
	tests := []struct {
		o    Outcome
		want string
	}{
		{OutcomeSuccess, "success"},
		{OutcomeConflict, "conflict"},
		{OutcomeRetryable, "retryable"},
		{OutcomeFailed, "failed"},
		{OutcomeGaveUp, "gave-up"},
		{Outcome(200), "unknown"},
	}
	for _, tt := range tests {
		if got := tt.o.String(); got != tt.want {
			t.Errorf("Outcome(%d).String() = %q, want %q", tt.o, got, tt.want)
		}
	}
}

func TestGiveUpError(t *testing.T) {
	last := &cas.ConflictError{Key: "acct/7", Expected: 3}
	tests := []struct {
		name     string
		err      *GiveUpError
		contains []string
		is       []error
		isNot    []error
	}{
		{
			name:     "attempts exhausted",
			err:      &GiveUpError{Reason: ErrAttemptsExhausted, Attempts: 7, Last: last},
			contains: []string{"7 attempts", ErrAttemptsExhausted.Error(), last.Error()},
			is:       []error{ErrAttemptsExhausted, cas.ErrConflict, last},
			isNot:    []error{ErrBudgetExhausted, context.Canceled},
		},
		{
			name:     "budget",
			err:      &GiveUpError{Reason: ErrBudgetExhausted, Attempts: 2, Last: last},
			contains: []string{"2 attempts", ErrBudgetExhausted.Error(), `"acct/7"`},
			is:       []error{ErrBudgetExhausted, cas.ErrConflict},
			isNot:    []error{ErrAttemptsExhausted},
		},
		{
			name:     "context before first attempt",
			err:      &GiveUpError{Reason: context.Canceled, Attempts: 0},
			contains: []string{"0 attempts", context.Canceled.Error()},
			is:       []error{context.Canceled},
			isNot:    []error{cas.ErrConflict, ErrAttemptsExhausted},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			msg := tt.err.Error()
			if !strings.HasPrefix(msg, "occ: ") {
				t.Errorf("Error() = %q, want the package prefix", msg)
			}
			for _, s := range tt.contains {
				if !strings.Contains(msg, s) {
					t.Errorf("Error() = %q, want it to mention %q", msg, s)
				}
			}
			if strings.Contains(msg, "<nil>") {
				t.Errorf("Error() = %q mentions <nil>", msg)
			}
			for _, target := range tt.is {
				if !errors.Is(tt.err, target) {
					t.Errorf("errors.Is(%v, %v) = false", tt.err, target)
				}
			}
			for _, target := range tt.isNot {
				if errors.Is(tt.err, target) {
					t.Errorf("errors.Is(%v, %v) = true", tt.err, target)
				}
			}
		})
	}
}
