package occ

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/occkit/occkit/adapters/memcas"
	"github.com/occkit/occkit/cas"
)

func TestPermanentEndsTheLoopAtOnce(t *testing.T) {
	ctx := context.Background()
	errDeclined := errors.New("declined")
	tests := []struct {
		name string
		err  error
		want error
	}{
		{"plain error", errDeclined, errDeclined},
		{"a conflict", cas.ErrConflict, cas.ErrConflict},
		{"wrapped mark", fmt.Errorf("step: %w", Permanent(cas.ErrConflict)), cas.ErrConflict},
		{"a retryable error", errRetryableForTest, errRetryableForTest},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			calls := 0
			err := Retry(ctx, func(context.Context) error {
				calls++
				if tt.name == "wrapped mark" {
					return tt.err
				}
				return Permanent(tt.err)
			}, WithRetryable(func(err error) bool { return errors.Is(err, errRetryableForTest) }))
			if calls != 1 {
				t.Fatalf("fn called %d times, want 1", calls)
			}
			if err != tt.want {
				t.Fatalf("err = %#v, want the cause itself %#v", err, tt.want)
			}
			var p *permanentError
			if errors.As(err, &p) {
				t.Fatalf("the mark leaked out of the loop: %v", err)
			}
		})
	}
}

var errRetryableForTest = errors.New("transient")

// An inner loop's Permanent stops the inner loop only: the outer loop sees
// the bare cause, a conflict, and retries.
func TestPermanentDoesNotStopAnOuterLoop(t *testing.T) {
	outer := 0
	err := Retry(context.Background(), func(ctx context.Context) error {
		outer++
		if outer == 3 {
			return nil
		}
		return Retry(ctx, func(context.Context) error { return Permanent(cas.ErrConflict) })
	}, withSleep(func(context.Context, time.Duration) error { return nil }))
	if err != nil || outer != 3 {
		t.Fatalf("err = %v after %d outer attempts, want nil after 3", err, outer)
	}
}

func TestPermanentFromMutate(t *testing.T) {
	ctx := context.Background()
	s := cas.NewTyped(memcas.New(), cas.JSON[int]())
	calls := 0
	_, _, err := Update(ctx, s, "k", func(n int, _ bool) (int, error) {
		calls++
		return 0, Permanent(cas.ErrConflict)
	})
	if calls != 1 || !errors.Is(err, cas.ErrConflict) {
		t.Fatalf("calls = %d, err = %v; want 1 call and the conflict", calls, err)
	}
	if Permanent(nil) != nil {
		t.Fatal("Permanent(nil) != nil")
	}
}

func TestSeveralObserversAreAllTold(t *testing.T) {
	var got []string
	obs := func(name string) Observer {
		return ObserverFuncs{Call: func(context.Context, Call) { got = append(got, name) }}
	}
	_ = Retry(context.Background(), func(context.Context) error { return nil },
		WithObserver(obs("a")), WithObserver(nil), WithObserver(obs("b")), WithObserver(obs("c")))
	if fmt.Sprint(got) != "[a b c]" {
		t.Fatalf("observers told: %v, want [a b c]", got)
	}
}
