package occ

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/occkit/occkit/adapters/memcas"
	"github.com/occkit/occkit/cas"
)

func TestNewBudgetValidation(t *testing.T) {
	tests := []struct {
		name    string
		ratio   float64
		burst   int
		wantErr bool
	}{
		{"negative ratio", -0.1, 10, true},
		{"NaN ratio", math.NaN(), 10, true},
		{"+Inf ratio", math.Inf(1), 10, true},
		{"-Inf ratio", math.Inf(-1), 10, true},
		{"ratio above 1000", 1000.5, 10, true},
		{"burst 0", 0.1, 0, true},
		{"negative burst", 0.1, -1, true},
		{"zero ratio", 0, 1, false},
		{"ratio 1000", 1000, 1, false},
		{"typical", 0.1, 10, false},
		{"fractional above 1", 2.5, 3, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := NewBudget(tt.ratio, tt.burst)
			if tt.wantErr {
				if err == nil || b != nil {
					t.Fatalf("NewBudget(%v, %d) = (%v, %v), want (nil, error)", tt.ratio, tt.burst, b, err)
				}
				if msg := err.Error(); len(msg) < 5 || msg[:5] != "occ: " {
					t.Errorf("error %q lacks the package prefix", msg)
				}
				return
			}
			if err != nil || b == nil {
				t.Fatalf("NewBudget(%v, %d) = (%v, %v), want a budget", tt.ratio, tt.burst, b, err)
			}
			want := BudgetStats{Available: float64(tt.burst)}
			if got := b.Stats(); got != want {
				t.Errorf("Stats() = %+v, want %+v (a new budget is full)", got, want)
			}
		})
	}
}

func TestNewBudgetHugeBurst(t *testing.T) {
	// A caller asking for a practically unlimited reserve must get a large
	// one (capping it far above any real use is fine), or an error; never a
	// budget that refuses every retry or holds a reserve unrelated to burst.
	for _, burst := range []int{math.MaxInt, math.MaxInt / 2, 1 << 50, 1 << 40, 9_223_372_036_854} {
		t.Run(fmt.Sprint(burst), func(t *testing.T) {
			b, err := NewBudget(1000, burst)
			if err != nil {
				return // refusing is fine
			}
			want := min(float64(burst), 1e12)
			if avail := b.Stats().Available; avail < want || avail > float64(burst) {
				t.Errorf("NewBudget(1000, %d).Stats().Available = %v, want a full reserve in [%v, %d]", burst, avail, want, burst)
			}
			// Retries and deposits near a full reserve must not wrap around.
			for i := range 3 {
				calls := 0
				err = Retry(context.Background(), errSeq(&calls, conflict("k"), nil), WithBudget(b), noSleep())
				if err != nil || calls != 2 {
					t.Fatalf("call %d: Retry with budget of burst %d = %v after %d calls, want one granted retry", i+1, burst, err, calls)
				}
			}
			if avail := b.Stats().Available; avail < want-1 {
				t.Errorf("after 3 retries Available = %v, want about %v", avail, want)
			}
		})
	}
}

// alwaysConflict counts its calls in n and always fails with a conflict.
func alwaysConflict(n *atomic.Int64) func(context.Context) error {
	return func(context.Context) error {
		n.Add(1)
		return conflict("hot")
	}
}

func TestBudgetExhausted(t *testing.T) {
	b, err := NewBudget(0, 3)
	if err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		wantAttempts int
		wantStats    BudgetStats
	}{
		{4, BudgetStats{Granted: 3, Rejected: 1, Available: 0}}, // the reserve of 3 retries
		{1, BudgetStats{Granted: 3, Rejected: 2, Available: 0}}, // nothing left, ratio 0
	}
	for i, s := range steps {
		var n atomic.Int64
		err := Retry(context.Background(), alwaysConflict(&n), WithBudget(b), WithMaxAttempts(100), noSleep())
		var gu *GiveUpError
		if !errors.As(err, &gu) {
			t.Fatalf("call %d: Retry = %v, want *GiveUpError", i+1, err)
		}
		if gu.Reason != ErrBudgetExhausted || gu.Attempts != s.wantAttempts || int(n.Load()) != s.wantAttempts {
			t.Errorf("call %d: Reason %v, Attempts %d, fn called %d; want ErrBudgetExhausted, %d, %d",
				i+1, gu.Reason, gu.Attempts, n.Load(), s.wantAttempts, s.wantAttempts)
		}
		if !errors.Is(err, ErrBudgetExhausted) || !errors.Is(err, cas.ErrConflict) {
			t.Errorf("call %d: Retry = %v, want it to match ErrBudgetExhausted and cas.ErrConflict", i+1, err)
		}
		if errors.Is(err, ErrAttemptsExhausted) {
			t.Errorf("call %d: Retry = %v matches ErrAttemptsExhausted", i+1, err)
		}
		if got := b.Stats(); got != s.wantStats {
			t.Errorf("call %d: Stats() = %+v, want %+v", i+1, got, s.wantStats)
		}
	}
}

func TestBudgetDeposits(t *testing.T) {
	b, err := NewBudget(0.75, 1)
	if err != nil {
		t.Fatal(err)
	}
	succeed := func(context.Context) error { return nil }
	steps := []struct {
		name         string
		fn           func(context.Context) error // nil: one conflict, then success
		wantAttempts int
		wantErr      error // nil, or the reason
		want         BudgetStats
	}{
		{"success while full stays capped", succeed, 1, nil, BudgetStats{Available: 1}},
		{"one retry uses the reserve", nil, 2, nil, BudgetStats{Granted: 1, Available: 0}},
		{"first attempt deposits ratio", succeed, 1, nil, BudgetStats{Granted: 1, Available: 0.75}},
		{"deposit capped at burst", succeed, 1, nil, BudgetStats{Granted: 1, Available: 1}},
		{"deposit while full is lost", succeed, 1, nil, BudgetStats{Granted: 1, Available: 1}},
		{"storm: one retry then refused", alwaysConflictFn, 2, ErrBudgetExhausted, BudgetStats{Granted: 2, Rejected: 1, Available: 0}},
		{"storm: own deposit is not enough", alwaysConflictFn, 1, ErrBudgetExhausted, BudgetStats{Granted: 2, Rejected: 2, Available: 0.75}},
		{"a fraction and a deposit make a retry", nil, 2, nil, BudgetStats{Granted: 3, Rejected: 2, Available: 0}},
	}
	for _, s := range steps {
		calls := 0
		fn := s.fn
		if fn == nil {
			fn = errSeq(&calls, conflict("k"), nil)
		}
		var attempts int
		obs := ObserverFuncs{Call: func(_ context.Context, c Call) { attempts = c.Attempts }}
		err := Retry(context.Background(), fn, WithBudget(b), WithMaxAttempts(100), noSleep(), WithObserver(obs))
		switch {
		case s.wantErr == nil && err != nil:
			t.Errorf("%s: Retry = %v, want nil", s.name, err)
		case s.wantErr != nil && !errors.Is(err, s.wantErr):
			t.Errorf("%s: Retry = %v, want %v", s.name, err, s.wantErr)
		}
		if attempts != s.wantAttempts {
			t.Errorf("%s: %d attempts, want %d", s.name, attempts, s.wantAttempts)
		}
		if got := b.Stats(); got != s.want {
			t.Errorf("%s: Stats() = %+v, want %+v", s.name, got, s.want)
		}
	}
}

func alwaysConflictFn(context.Context) error { return conflict("hot") }

func TestBudgetBoundsRetries(t *testing.T) {
	const (
		workers = 8
		perW    = 50
		calls   = workers * perW
	)
	tests := []struct {
		ratio float64
		burst int
	}{
		{0, 1},
		{0, 5},
		{0.1, 1},
		{0.1, 10},
		{0.5, 3},
		{0.3333, 2},
		{2, 2},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("ratio=%v,burst=%d", tt.ratio, tt.burst), func(t *testing.T) {
			b, err := NewBudget(tt.ratio, tt.burst)
			if err != nil {
				t.Fatal(err)
			}
			// Shared by every goroutine: options are plain values.
			opts := []Option{WithBudget(b), WithMaxAttempts(1_000_000), zeroBackOffs(), noSleep()}
			var (
				attempts  atomic.Int64
				exhausted atomic.Int64
				wg        sync.WaitGroup
				mu        sync.Mutex
				bad       []error
			)
			for range workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range perW {
						err := Retry(context.Background(), alwaysConflict(&attempts), opts...)
						switch {
						case errors.Is(err, ErrBudgetExhausted) && errors.Is(err, cas.ErrConflict):
							exhausted.Add(1)
						default:
							mu.Lock()
							bad = append(bad, err)
							mu.Unlock()
						}
					}
				}()
			}
			wg.Wait()
			for _, err := range bad[:min(len(bad), 5)] {
				t.Errorf("call ended with %v, want the budget to stop it", err)
			}
			retries := attempts.Load() - calls
			bound := float64(tt.burst) + tt.ratio*calls + 1e-9
			if float64(retries) > bound {
				t.Errorf("%d retries over %d calls, want at most burst + ratio*calls = %v", retries, calls, bound)
			}
			// Every call ran until refused, so the reserve was spent.
			if retries < int64(tt.burst) {
				t.Errorf("%d retries, want at least burst = %d", retries, tt.burst)
			}
			if tt.ratio == 0 && retries != int64(tt.burst) {
				t.Errorf("ratio 0: %d retries, want exactly burst = %d", retries, tt.burst)
			}
			st := b.Stats()
			if st.Granted != retries {
				t.Errorf("Stats().Granted = %d, want the %d retries observed", st.Granted, retries)
			}
			if st.Rejected != exhausted.Load() || st.Rejected != calls {
				t.Errorf("Stats().Rejected = %d, want %d (one per call, all refused by the budget; %d saw ErrBudgetExhausted)",
					st.Rejected, calls, exhausted.Load())
			}
			if st.Available < 0 || st.Available >= 1 {
				t.Errorf("Stats().Available = %v after every call was refused, want in [0, 1)", st.Available)
			}
		})
	}
}

func TestBudgetUntouched(t *testing.T) {
	perm := errors.New("permanent")
	tests := []struct {
		name string
		errs []error
		opts []Option
	}{
		{"success first time", []error{nil}, nil},
		{"permanent error", []error{perm}, nil},
		{"attempt limit reached before asking the budget", []error{conflict("k")}, []Option{WithMaxAttempts(1)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := NewBudget(0, 2)
			if err != nil {
				t.Fatal(err)
			}
			for range 5 {
				calls := 0
				_ = Retry(context.Background(), errSeq(&calls, tt.errs...), append([]Option{WithBudget(b), noSleep()}, tt.opts...)...)
			}
			if got, want := b.Stats(), (BudgetStats{Available: 2}); got != want {
				t.Errorf("Stats() = %+v, want %+v", got, want)
			}
		})
	}
}

func TestBudgetWithUpdateAndTxn(t *testing.T) {
	mem := memcas.New()
	put(t, mem, "k", "0")
	b, err := NewBudget(0, 1)
	if err != nil {
		t.Fatal(err)
	}
	// A competing writer makes every attempt conflict.
	race := func() {
		it, err := mem.Get(context.Background(), "k")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := mem.CompareAndSwap(context.Background(), "k", it.Version, it.Value); err != nil {
			t.Fatal(err)
		}
	}
	typed := cas.NewTyped[int](mem, cas.JSON[int]())
	updates := 0
	_, _, err = Update(context.Background(), typed, "k", func(n int, _ bool) (int, error) {
		updates++
		race()
		return n + 1, nil
	}, WithBudget(b), WithMaxAttempts(100), noSleep())
	if !errors.Is(err, ErrBudgetExhausted) || !errors.Is(err, cas.ErrConflict) || updates != 2 {
		t.Errorf("Update = %v after %d attempts, want ErrBudgetExhausted after 2", err, updates)
	}
	txns := 0
	err = Txn(context.Background(), mem, func(tx *Tx) error {
		txns++
		if _, _, err := tx.Get("k"); err != nil {
			return err
		}
		race()
		tx.Put("k", []byte("1"))
		return nil
	}, WithBudget(b), WithMaxAttempts(100), noSleep())
	if !errors.Is(err, ErrBudgetExhausted) || txns != 1 {
		t.Errorf("Txn = %v after %d attempts, want ErrBudgetExhausted after 1 (budget spent)", err, txns)
	}
	if got, want := b.Stats(), (BudgetStats{Granted: 1, Rejected: 2}); got != want {
		t.Errorf("Stats() = %+v, want %+v", got, want)
	}
}
