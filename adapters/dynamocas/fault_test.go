package dynamocas_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/occkit/occkit/adapters/dynamocas"
	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/internal/dynamotest"
	"github.com/occkit/occkit/occ"
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

// lossyStore returns a store whose client meets the faults fl is armed
// with, its lost answers resolved for up to 5 s, and other, a writer on
// its table that the faults do not reach.
func lossyStore(t *testing.T, srv dynamotest.Server) (fl *faulty, s, other *dynamocas.Store) {
	t.Helper()
	fl = &faulty{}
	s = newStore(t, dynamotest.ClientWith(t, srv, fl.wrap), dynamocas.Config{ResolveTimeout: 5 * time.Second})
	return fl, s, otherWriter(t, srv, s)
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
		fl, s, other := lossyStore(t, srv)
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
				var err error
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

// cutter cuts the answer to the next request of operation op (once armed)
// whose HTTP status is status (0: any) after n bytes of its body, as a
// connection closed mid-response does: the status line and headers came,
// the body stops with io.ErrUnexpectedEOF. before, if set, runs once the
// server has answered and before the client sees the cut answer; pre, if
// set, runs before the next request of op is sent.
type cutter struct {
	armed  atomic.Bool
	op     string
	status int
	n      int
	before func()
	pre    func()
	cuts   atomic.Int64
}

func (c *cutter) arm(op string, status, n int, before func()) {
	c.op, c.status, c.n, c.before, c.pre = op, status, n, before, nil
	c.armed.Store(true)
}

func (c *cutter) wrap(next http.RoundTripper) http.RoundTripper {
	return dynamotest.RoundTripFunc(func(r *http.Request) (*http.Response, error) {
		if c.armed.Load() && c.pre != nil && dynamotest.Operation(r) == c.op {
			c.pre()
			c.pre = nil
		}
		resp, err := next.RoundTrip(r)
		if err != nil || !c.armed.Load() || dynamotest.Operation(r) != c.op ||
			(c.status != 0 && resp.StatusCode != c.status) || !c.armed.CompareAndSwap(true, false) {
			return resp, err
		}
		c.cuts.Add(1)
		if c.before != nil {
			c.before()
		}
		resp.Body = &cutBody{ReadCloser: resp.Body, left: c.n}
		resp.ContentLength = -1
		return resp, nil
	})
}

// cutBody is a body that fails after left bytes.
type cutBody struct {
	io.ReadCloser
	left int
}

func (b *cutBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		return 0, io.ErrUnexpectedEOF
	}
	if len(p) > b.left {
		p = p[:b.left]
	}
	n, err := b.ReadCloser.Read(p)
	b.left -= n
	if err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return n, err
}

// TestCutAnswers checks answers whose status line came but whose body was
// cut (the `cut` fault of occfaults): a cut read is retryable; a cut
// refusal (HTTP 400) of a write applied nothing and is a conflict when the
// key has moved on, or else a retryable error; a cut success (HTTP 200)
// of a write applied, and is resolved by its write id, or ambiguous — and
// then never retried — when the key has moved on since.
func TestCutAnswers(t *testing.T) {
	dynamotest.Each(t, func(t *testing.T, srv dynamotest.Server) {
		c := &cutter{}
		s := newStore(t, dynamotest.ClientWith(t, srv, c.wrap), dynamocas.Config{ResolveTimeout: 5 * time.Second})
		other := otherWriter(t, srv, s)
		ctx := dynamotest.Ctx(t, time.Minute)
		counters := cas.NewTyped[int](s, cas.JSON[int]())
		zero := occ.WithBackOff(&backoff.ZeroBackOff{})
		wantCuts := func(t *testing.T, n int64) {
			t.Helper()
			if c.armed.Load() || c.cuts.Load() != n {
				t.Fatalf("%d answers cut (armed: %v), want %d", c.cuts.Load(), c.armed.Load(), n)
			}
		}
		// counter makes key a counter at 0 and returns its version.
		counter := func(t *testing.T, key string) cas.Version {
			t.Helper()
			v, err := s.CompareAndSwap(ctx, key, 0, []byte("0"))
			if err != nil {
				t.Fatal(err)
			}
			return v
		}
		// bump moves key on from v, as another writer.
		bump := func(t *testing.T, key string, v cas.Version) cas.Version {
			t.Helper()
			nv, err := other.CompareAndSwap(ctx, key, v, []byte("10"))
			if err != nil {
				t.Errorf("other writer: %v", err)
			}
			return nv
		}
		wantValue := func(t *testing.T, key string, want int) {
			t.Helper()
			if got, _, err := counters.Get(ctx, key); err != nil || got != want {
				t.Fatalf("%s = %d, %v; want %d", key, got, err, want)
			}
		}

		t.Run("Read", func(t *testing.T) {
			c.cuts.Store(0)
			counter(t, "read")
			c.arm("GetItem", 200, 5, nil)
			_, err := s.Get(ctx, "read")
			wantCuts(t, 1)
			if err == nil || !dynamocas.Retryable(err) || errors.Is(err, cas.ErrAmbiguous) {
				t.Fatalf("cut read: %v; want an error Retryable accepts", err)
			}
			// Through occ with Retryable: the read is tried again.
			c.arm("GetItem", 200, 0, nil)
			n, _, err := occ.Update(ctx, counters, "read", func(n int, _ bool) (int, error) { return n + 1, nil },
				occ.WithRetryable(dynamocas.Retryable), zero)
			wantCuts(t, 2)
			if err != nil || n != 1 {
				t.Fatalf("update over a cut read = %d, %v; want 1", n, err)
			}
			wantValue(t, "read", 1)
		})

		t.Run("Refusal", func(t *testing.T) {
			c.cuts.Store(0)
			v1 := counter(t, "refused")
			v2 := bump(t, "refused", v1)
			c.arm("UpdateItem", 400, 10, nil)
			_, err := s.CompareAndSwap(ctx, "refused", v1, []byte("1"))
			wantCuts(t, 1)
			var ce *cas.ConflictError
			if !errors.As(err, &ce) || !ce.HasCurrent || ce.Current.Version != v2 || errors.Is(err, cas.ErrAmbiguous) {
				t.Fatalf("cut refusal of a stale write: %v; want a conflict with the current item at v%d", err, v2)
			}
			// Through occ (no Retryable needed): another writer gets in
			// between the read and the write, whose refusal is cut.
			calls := 0
			n, _, err := occ.Update(ctx, counters, "refused", func(n int, _ bool) (int, error) {
				if calls++; calls == 1 {
					_, v, err := counters.Get(ctx, "refused")
					if err != nil {
						t.Error(err)
					}
					bump(t, "refused", v)
					c.arm("UpdateItem", 400, 0, nil)
				}
				return n + 1, nil
			}, zero)
			wantCuts(t, 2)
			if err != nil || n != 11 || calls != 2 {
				t.Fatalf("update over a cut refusal = %d, %v after %d calls; want 11 after 2", n, err, calls)
			}
			wantValue(t, "refused", 11)
		})

		t.Run("RefusalOtherReason", func(t *testing.T) {
			// A refusal that is not the condition's (the table does not
			// exist), cut: not applied, reason unknown, key not in
			// conflict: retryable, and neither a conflict nor ambiguous.
			c.cuts.Store(0)
			missing, err := dynamocas.New(dynamotest.ClientWith(t, srv, c.wrap), dynamocas.Config{Table: dynamotest.TableName("missing")})
			if err != nil {
				t.Fatal(err)
			}
			c.arm("UpdateItem", 400, 3, nil)
			_, err = missing.CompareAndSwap(ctx, "k", 0, []byte("x"))
			wantCuts(t, 1)
			if err == nil || !dynamocas.Retryable(err) || errors.Is(err, cas.ErrConflict) || errors.Is(err, cas.ErrAmbiguous) {
				t.Fatalf("cut refusal for another reason: %v; want a plain error Retryable accepts", err)
			}
		})

		t.Run("Success", func(t *testing.T) {
			// The write applied and its answer was cut: the write id
			// finds it, once.
			c.cuts.Store(0)
			v1 := counter(t, "applied")
			c.arm("UpdateItem", 200, 0, nil)
			v2, err := s.CompareAndSwap(ctx, "applied", v1, []byte("1"))
			wantCuts(t, 1)
			if err != nil || v2 != v1+1 {
				t.Fatalf("cut success: v%d, %v; want v%d", v2, err, v1+1)
			}
			wantValue(t, "applied", 1)

			// The key moves on before the writer can look: ambiguous, and
			// occ does not run it again, even with Retryable.
			calls := 0
			_, _, err = occ.Update(ctx, counters, "applied", func(n int, _ bool) (int, error) {
				if calls++; calls == 1 {
					c.arm("UpdateItem", 200, 0, func() { bump(t, "applied", v2+1) })
				}
				return n + 1, nil
			}, occ.WithRetryable(dynamocas.Retryable), zero)
			wantCuts(t, 2)
			var amb *cas.AmbiguousError
			if !errors.As(err, &amb) || amb.Key != "applied" || dynamocas.Retryable(err) || errors.Is(err, cas.ErrConflict) || calls != 1 {
				t.Fatalf("cut success, then overwritten: %v after %d calls; want a *cas.AmbiguousError after 1, not Retryable", err, calls)
			}
			wantValue(t, "applied", 10)
		})
	})
}

// TestCutCommitRefusal checks a commit refused (HTTP 400,
// TransactionCanceledException) in an answer cut before its body: nothing
// applied, Retryable, and occ.Txn with Retryable runs it again.
func TestCutCommitRefusal(t *testing.T) {
	srv := dynamotest.StartMinidyn(t)
	c := &cutter{}
	s := newStore(t, dynamotest.ClientWith(t, srv, c.wrap), dynamocas.Config{})
	ctx := dynamotest.Ctx(t, time.Minute)
	a, err := s.CompareAndSwap(ctx, "a", 0, []byte("A"))
	if err != nil {
		t.Fatal(err)
	}
	c.arm("TransactWriteItems", 400, 7, nil)
	_, err = s.Commit(ctx, []cas.Op{cas.Put("a", a+5, []byte("stale")), cas.Put("b", 0, []byte("B"))})
	if c.cuts.Load() != 1 {
		t.Fatalf("%d answers cut, want 1", c.cuts.Load())
	}
	if err == nil || !dynamocas.Retryable(err) || errors.Is(err, cas.ErrAmbiguous) {
		t.Fatalf("cut refusal of a commit: %v; want an error Retryable accepts", err)
	}
	if it, err := s.Get(ctx, "a"); err != nil || it.Version != a {
		t.Fatalf("a = %+v, %v; want v%d untouched", it, err, a)
	}
	if _, err := s.Get(ctx, "b"); !errors.Is(err, cas.ErrNotFound) {
		t.Fatalf("b: %v, want not found", err)
	}
}

// TestTxResendRefusalCut checks a Tx whose first send applied but lost its
// answer, and whose resend is refused (its conditions no longer hold) in
// an answer cut before its body: the first send's outcome stays unknown,
// so the commit is ambiguous, not a plain (and Retryable) refusal.
func TestTxResendRefusalCut(t *testing.T) {
	srv := dynamotest.StartMinidyn(t)
	fl, c := &faulty{}, &cutter{}
	cli := dynamotest.ClientWith(t, srv, func(next http.RoundTripper) http.RoundTripper { return fl.wrap(c.wrap(next)) })
	items, _ := newStocks(t, cli)
	ctx := dynamotest.Ctx(t, time.Minute)
	sv := stockBook(t, ctx, items)
	tx := dynamocas.NewTx(cli)
	must(t, items.TxUpdate(tx, stock{SKU: "book", Remaining: 4, Sold: 1, Version: sv}))
	fl.arm("TransactWriteItems", dropAnswer, nil)
	c.arm("TransactWriteItems", 400, 5, nil)
	_, err := tx.Commit(ctx)
	if fl.armed.Load() || c.cuts.Load() != 1 {
		t.Fatalf("faults not injected (lost answer armed: %v, cuts %d)", fl.armed.Load(), c.cuts.Load())
	}
	if !errors.Is(err, cas.ErrAmbiguous) || dynamocas.Retryable(err) || errors.Is(err, cas.ErrConflict) {
		t.Fatalf("commit applied, answer lost, resend refused in a cut answer: %v; want ambiguous, not Retryable", err)
	}
	if s, err := items.Get(ctx, dynamocas.Key{Partition: "book"}); err != nil || s.Version != sv+1 || s.Sold != 1 {
		t.Fatalf("book = %+v, %v; want the commit applied once at v%d", s, err, sv+1)
	}
}

// TestTableResendRefusalCut checks a Table write whose request was lost,
// then sent again and refused in an answer cut before its body (another
// writer changed the item in between): the first send may have applied
// late and refused the resend, and the item carries no write id, so the
// write is ambiguous, not a plain (and Retryable) refusal.
func TestTableResendRefusalCut(t *testing.T) {
	srv := dynamotest.StartMinidyn(t)
	fl, c := &faulty{}, &cutter{}
	cli := dynamotest.ClientWith(t, srv, func(next http.RoundTripper) http.RoundTripper { return fl.wrap(c.wrap(next)) })
	items, name := newStocks(t, cli)
	others := openStocks(t, dynamotest.Client(t, srv), name, dynamocas.TableConfig{})
	ctx := dynamotest.Ctx(t, time.Minute)
	v := stockBook(t, ctx, items)
	fl.arm("PutItem", dropRequest, nil)
	c.arm("PutItem", 400, 5, nil)
	c.pre = func() {
		if _, err := others.Update(ctx, stock{SKU: "book", Remaining: 9, Version: v}); err != nil {
			t.Errorf("other writer: %v", err)
		}
	}
	_, err := items.Update(ctx, stock{SKU: "book", Remaining: 4, Sold: 1, Version: v})
	if fl.armed.Load() || c.cuts.Load() != 1 {
		t.Fatalf("faults not injected (lost request armed: %v, cuts %d)", fl.armed.Load(), c.cuts.Load())
	}
	if !errors.Is(err, cas.ErrAmbiguous) || dynamocas.Retryable(err) || errors.Is(err, cas.ErrConflict) {
		t.Fatalf("resend refused in a cut answer: %v; want ambiguous, not Retryable", err)
	}
}
