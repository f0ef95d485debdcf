package dynamocas_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/occkit/occkit/adapters/dynamocas"
	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/internal/dynamotest"
)

// errInjected stands for a connection that broke: no HTTP answer at all.
var errInjected = errors.New("injected fault: connection reset by peer")

// fault decides what happens to one request of the armed operation.
type fault int

const (
	// dropRequest: the request never reaches the server.
	dropRequest fault = iota + 1
	// dropAnswer: the server applies the request, its answer is lost.
	dropAnswer
	// dropAnswerAfterOverwrite: as dropAnswer, and another writer
	// changes the key before the writer can look.
	dropAnswerAfterOverwrite
)

// faulty returns a client whose next request of operation op (once armed)
// meets f; before returns f for dropAnswerAfterOverwrite runs meanwhile.
type faulty struct {
	armed  atomic.Bool
	op     string
	f      fault
	before func()
}

func (fl *faulty) arm(op string, f fault, before func()) {
	fl.op, fl.f, fl.before = op, f, before
	fl.armed.Store(true)
}

func (fl *faulty) wrap(next http.RoundTripper) http.RoundTripper {
	return dynamotest.RoundTripFunc(func(r *http.Request) (*http.Response, error) {
		if dynamotest.Operation(r) != fl.op || !fl.armed.CompareAndSwap(true, false) {
			return next.RoundTrip(r)
		}
		if fl.f == dropRequest {
			if r.Body != nil {
				r.Body.Close()
			}
			return nil, errInjected
		}
		resp, err := next.RoundTrip(r)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		if fl.f == dropAnswerAfterOverwrite {
			fl.before()
		}
		return nil, errInjected
	})
}

// TestLostAnswers checks how a write whose answer was lost is settled, by
// reading its write id back: applied (found), not applied (the key
// unchanged: sent again, applied once), or ambiguous (the key moved on
// without it). Afterwards the key must hold exactly what was applied.
func TestLostAnswers(t *testing.T) {
	dynamotest.Each(t, func(t *testing.T, srv dynamotest.Server) {
		fl := &faulty{}
		cli := dynamotest.ClientWith(t, srv, fl.wrap)
		s := newStore(t, cli, dynamocas.Config{ResolveTimeout: 5 * time.Second})
		other, err := dynamocas.New(dynamotest.Client(t, srv), dynamocas.Config{Table: s.Table()})
		if err != nil {
			t.Fatal(err)
		}
		ctx := dynamotest.Ctx(t, time.Minute)

		tests := []struct {
			name   string
			f      fault
			create bool
			delete bool
			want   string // "ok" or "ambiguous"
		}{
			{"SwapAnswerLost", dropAnswer, false, false, "ok"},
			{"SwapRequestLost", dropRequest, false, false, "ok"},
			{"CreateAnswerLost", dropAnswer, true, false, "ok"},
			{"CreateRequestLost", dropRequest, true, false, "ok"},
			{"DeleteAnswerLost", dropAnswer, false, true, "ok"},
			{"DeleteRequestLost", dropRequest, false, true, "ok"},
			{"SwapAnswerLostThenOverwritten", dropAnswerAfterOverwrite, false, false, "ambiguous"},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				key := "k" + tc.name
				var v cas.Version
				if !tc.create {
					if v, err = s.CompareAndSwap(ctx, key, 0, []byte("before")); err != nil {
						t.Fatal(err)
					}
				}
				overwritten := cas.Version(0)
				fl.arm("UpdateItem", tc.f, func() {
					nv, err := other.CompareAndSwap(ctx, key, v+1, []byte("other"))
					if err != nil {
						t.Errorf("overwrite: %v", err)
					}
					overwritten = nv
				})
				var got cas.Version
				if tc.delete {
					err = s.CompareAndDelete(ctx, key, v)
				} else {
					got, err = s.CompareAndSwap(ctx, key, v, []byte("mine"))
				}
				if fl.armed.Load() {
					t.Fatal("the fault was not injected")
				}
				switch tc.want {
				case "ok":
					if err != nil {
						t.Fatalf("lost answer not resolved: %v", err)
					}
					it, gerr := s.Get(ctx, key)
					switch {
					case tc.delete:
						if !errors.Is(gerr, cas.ErrNotFound) {
							t.Fatalf("after a resolved delete: %+v, %v", it, gerr)
						}
					case gerr != nil || it.Version != got || string(it.Value) != "mine":
						t.Fatalf("after a resolved write of v%d: %+v, %v", got, it, gerr)
					case !tc.create && got != v+1:
						t.Fatalf("resolved write got v%d, want v%d (applied once)", got, v+1)
					}
				case "ambiguous":
					var amb *cas.AmbiguousError
					if !errors.As(err, &amb) || amb.Key != key || len(amb.WriteID) != 32 || !errors.Is(err, errInjected) {
						t.Fatalf("err = %v, want a *cas.AmbiguousError for %q with a write id wrapping the transport error", err, key)
					}
					if dynamocas.Retryable(err) || errors.Is(err, cas.ErrConflict) {
						t.Fatalf("an ambiguous write must not be retried blindly: %v", err)
					}
					it, gerr := s.Get(ctx, key)
					if gerr != nil || it.Version != overwritten || string(it.Value) != "other" {
						t.Fatalf("after the overwrite: %+v, %v", it, gerr)
					}
				}
			})
		}
	})
}

// TestLostCommitAnswers does the same for commits (minidyn: dynalite has
// no transactions): a lost answer is resolved through the write id of the
// commit's first write, a lost request by sending the same transaction,
// with the same ClientRequestToken, again.
func TestLostCommitAnswers(t *testing.T) {
	srv := dynamotest.StartMinidyn(t)
	fl := &faulty{}
	s := newStore(t, dynamotest.ClientWith(t, srv, fl.wrap), dynamocas.Config{})
	ctx := dynamotest.Ctx(t, time.Minute)
	for _, f := range []fault{dropAnswer, dropRequest} {
		a, err := s.CompareAndSwap(ctx, "a", 0, []byte("A"))
		if err != nil {
			t.Fatal(err)
		}
		fl.arm("TransactWriteItems", f, nil)
		vs, err := s.Commit(ctx, []cas.Op{cas.Put("a", a, []byte("A2")), cas.Put("b", 0, []byte("B")), cas.Check("c", 0)})
		if err != nil {
			t.Fatalf("fault %d: commit not resolved: %v", f, err)
		}
		if vs[0] != a+1 || vs[2] != 0 {
			t.Fatalf("fault %d: versions %v", f, vs)
		}
		for i, k := range []string{"a", "b"} {
			it, err := s.Get(ctx, k)
			if err != nil || it.Version != vs[i] {
				t.Fatalf("fault %d: %s = %+v, %v; want v%d", f, k, it, err, vs[i])
			}
		}
		if err := s.CompareAndDelete(ctx, "a", vs[0]); err != nil {
			t.Fatal(err)
		}
		if err := s.CompareAndDelete(ctx, "b", vs[1]); err != nil {
			t.Fatal(err)
		}
	}
}

// TestCancelledInFlight checks a write whose caller's context ends while
// it is in flight: the store still finds out whether it applied (reading
// with a context of its own), and never sends it again for a caller that
// has gone.
func TestCancelledInFlight(t *testing.T) {
	srv := dynamotest.StartMinidyn(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cli := dynamotest.ClientWith(t, srv, func(next http.RoundTripper) http.RoundTripper {
		return dynamotest.RoundTripFunc(func(r *http.Request) (*http.Response, error) {
			if dynamotest.Operation(r) == "UpdateItem" && ctx.Err() == nil {
				resp, err := next.RoundTrip(r)
				if err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
				cancel()
				return nil, context.Canceled
			}
			return next.RoundTrip(r)
		})
	})
	s := newStore(t, cli, dynamocas.Config{})
	v, err := s.CompareAndSwap(ctx, "k", 0, []byte("x"))
	if err != nil || v == 0 {
		t.Fatalf("applied write cancelled in flight: v%d, %v; want it found applied", v, err)
	}
}
