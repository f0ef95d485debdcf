package etcdcas_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/occkit/occkit/adapters/etcdcas"
	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/internal/etcdtest"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// faults is a gRPC interceptor that, when armed, breaks the next Txn: it
// either sends it and drops the answer (the write may have applied: the
// caller cannot know) or fails it before sending (nothing applied).
type faults struct {
	dropAnswer atomic.Bool
	failSend   atomic.Bool
	before     func() // runs before a failed send (another writer, say)
	after      func() // runs after a sent Txn whose answer is dropped
}

func (f *faults) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	if method != "/etcdserverpb.KV/Txn" {
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	if f.failSend.CompareAndSwap(true, false) {
		if f.before != nil {
			f.before()
		}
		return status.Error(codes.Unavailable, "injected: connection lost before sending")
	}
	err := invoker(ctx, method, req, reply, cc, opts...)
	if err == nil && f.dropAnswer.CompareAndSwap(true, false) {
		if f.after != nil {
			f.after()
		}
		return status.Error(codes.Unavailable, "injected: connection lost after sending")
	}
	return err
}

func faultyStore(t *testing.T) (*etcdcas.Store, *faults, *clientv3.Client) {
	c := etcdtest.Start(t, etcdtest.Options{})
	f := &faults{}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   c.Endpoints(),
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
		// No retries by the client: the store decides what a lost answer means.
		MaxUnaryRetries: 1,
		DialOptions:     []grpc.DialOption{grpc.WithChainUnaryInterceptor(f.intercept)},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	s := newStore(t, cli, etcdcas.Config{ResolveTimeout: 3 * time.Second})
	return s, f, c.Client()
}

// TestLostAnswers checks how the store resolves writes whose answer was
// lost: its own write found → success with the write's version; the
// version it expected gone without its write → a conflict; nothing to tell
// → *cas.AmbiguousError with the write id. Never a wrong success.
func TestLostAnswers(t *testing.T) {
	ctx := etcdtest.Ctx(t, 60*time.Second)

	t.Run("AppliedWriteIsSuccess", func(t *testing.T) {
		s, f, _ := faultyStore(t)
		v1, err := s.CompareAndSwap(ctx, "k", 0, []byte("one"))
		if err != nil {
			t.Fatal(err)
		}
		f.dropAnswer.Store(true)
		v2, err := s.CompareAndSwap(ctx, "k", v1, []byte("two"))
		if err != nil {
			t.Fatalf("a write that applied but lost its answer: %v, want success", err)
		}
		it, _ := s.Get(ctx, "k")
		if it.Version != v2 || string(it.Value) != "two" {
			t.Fatalf("resolved version %d, store has %q at %d", v2, it.Value, it.Version)
		}
	})

	t.Run("AppliedThenOverwrittenIsSuccess", func(t *testing.T) {
		s, f, cli := faultyStore(t)
		v1, _ := s.CompareAndSwap(ctx, "k", 0, []byte("one"))
		// The answer is lost, and another writer overwrites before the
		// store reads back: only the key's history has the write id.
		other, _ := etcdcas.New(cli, etcdcas.Config{Prefix: s.Prefix()})
		f.after = func() {
			it, err := other.Get(ctx, "k")
			if err != nil || string(it.Value) != "two" {
				t.Errorf("after the dropped answer: %q, %v", it.Value, err)
				return
			}
			if _, err := other.CompareAndSwap(ctx, "k", it.Version, []byte("three")); err != nil {
				t.Error(err)
			}
		}
		f.dropAnswer.Store(true)
		v2, err := s.CompareAndSwap(ctx, "k", v1, []byte("two"))
		if err != nil || v2 <= v1 {
			t.Fatalf("applied-then-overwritten write: %d, %v; want success", v2, err)
		}
	})

	t.Run("NotSentAndMovedOnIsConflict", func(t *testing.T) {
		s, f, cli := faultyStore(t)
		v1, _ := s.CompareAndSwap(ctx, "k", 0, []byte("one"))
		other, _ := etcdcas.New(cli, etcdcas.Config{Prefix: s.Prefix()})
		f.before = func() { other.CompareAndSwap(ctx, "k", v1, []byte("theirs")) }
		f.failSend.Store(true)
		_, err := s.CompareAndSwap(ctx, "k", v1, []byte("mine"))
		if !errors.Is(err, cas.ErrConflict) || errors.Is(err, cas.ErrAmbiguous) {
			t.Fatalf("a write that cannot apply any more: %v, want a conflict", err)
		}
		var ce *cas.ConflictError
		if errors.As(err, &ce); ce == nil || !ce.HasCurrent || string(ce.Current.Value) != "theirs" {
			t.Fatalf("conflict %+v, want the current item", ce)
		}
	})

	t.Run("NotSentAndUnchangedIsAmbiguous", func(t *testing.T) {
		s, f, _ := faultyStore(t)
		v1, _ := s.CompareAndSwap(ctx, "k", 0, []byte("one"))
		f.failSend.Store(true)
		_, err := s.CompareAndSwap(ctx, "k", v1, []byte("mine"))
		var ae *cas.AmbiguousError
		if !errors.As(err, &ae) || ae.WriteID == "" || ae.Key != "k" {
			t.Fatalf("nothing to tell: %v, want *cas.AmbiguousError with key and write id", err)
		}
		it, _ := s.Get(ctx, "k")
		if string(it.Value) != "one" {
			t.Fatalf("store has %q", it.Value)
		}
	})

	t.Run("DeleteApplied", func(t *testing.T) {
		s, f, _ := faultyStore(t)
		v1, _ := s.CompareAndSwap(ctx, "k", 0, []byte("one"))
		f.dropAnswer.Store(true)
		if err := s.CompareAndDelete(ctx, "k", v1); err != nil {
			t.Fatalf("a delete that applied but lost its answer: %v", err)
		}
	})

	t.Run("CommitApplied", func(t *testing.T) {
		s, f, _ := faultyStore(t)
		f.dropAnswer.Store(true)
		vs, err := s.Commit(ctx, []cas.Op{cas.Put("a", 0, []byte("A")), cas.Put("b", 0, []byte("B"))})
		if err != nil || len(vs) != 2 || vs[0] == 0 || vs[0] != vs[1] {
			t.Fatalf("a commit that applied but lost its answer: %v, %v", vs, err)
		}
	})
}
