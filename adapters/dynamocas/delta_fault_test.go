package dynamocas_test

import (
	"errors"
	"testing"
	"time"

	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/internal/dynamotest"
)

// TestDeltaLostAnswers: a delta whose answer was lost is resolved by the
// item's write id when no write came after it; otherwise (the request
// lost on the way, or the key written since) Add reports a
// *cas.AmbiguousError and never sends the delta again. Afterwards the
// value counts each delta that reached the server exactly once.
func TestDeltaLostAnswers(t *testing.T) {
	dynamotest.Each(t, func(t *testing.T, srv dynamotest.Server) {
		fl, s, other := lossyStore(t, srv)
		ctx := dynamotest.Ctx(t, time.Minute)
		if _, _, err := s.Add(ctx, "stock", 100, cas.Bounds{}); err != nil {
			t.Fatal(err)
		}
		if _, _, err := s.Add(ctx, "stock", -1, cas.Bounds{}); err != nil { // now a number
			t.Fatal(err)
		}
		tests := []struct {
			name      string
			f         fault
			ambiguous bool
			want      string // the value afterwards
		}{
			{"AnswerLost", dropAnswer, false, "89"},
			{"AnswerLostThenOverwritten", dropAnswerAfterOverwrite, true, "78"},
			{"RequestLost", dropRequest, true, "78"},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				fl.arm("UpdateItem", tc.f, func() {
					if _, _, err := other.Add(ctx, "stock", -1, cas.Bounds{}); err != nil {
						t.Errorf("other writer: %v", err)
					}
				})
				v, ver, err := s.Add(ctx, "stock", -10, cas.AtLeast(0))
				if fl.armed.Load() {
					t.Fatal("the fault was not injected")
				}
				var amb *cas.AmbiguousError
				switch {
				case tc.ambiguous && (!errors.As(err, &amb) || amb.WriteID == "" || errors.Is(err, cas.ErrBound)):
					t.Fatalf("err = %v, want a *cas.AmbiguousError with the write id", err)
				case !tc.ambiguous && (err != nil || ver == 0 || v != 89):
					t.Fatalf("delta with a lost answer = %d at v%d, %v; want 89, resolved by its write id", v, ver, err)
				}
				it, err := other.Get(ctx, "stock")
				if err != nil || string(it.Value) != tc.want {
					t.Fatalf("stock = %q (%v), want %q: a delta applied twice, or one that reached the server not at all", it.Value, err, tc.want)
				}
			})
		}
	})
}
