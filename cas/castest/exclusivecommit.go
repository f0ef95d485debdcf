package castest

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/occ"
)

var exclusiveCommitTests = []test{
	{"Semantics", func(t *testing.T, h *Harness, s cas.Store) {
		ec := capability[cas.ExclusiveCommitter](t, s)
		ctx := context.Background()
		va := mustCreate(t, s, "a", "A")
		vd := mustCreate(t, s, "d", "D")
		// Reads in keys' order, absent as version 0; puts, a delete and a
		// check applied together.
		vs, err := ec.CommitExclusive(ctx, []string{"b", "a", "d"}, func(cur []cas.Item) ([]cas.Op, error) {
			if cur[0].Version != 0 || cur[1].Version != va || string(cur[1].Value) != "A" || cur[2].Version != vd {
				return nil, fmt.Errorf("read %+v", cur)
			}
			return []cas.Op{cas.Put("b", 0, []byte("B")), cas.Put("a", va, []byte("A2")), cas.Delete("d", vd)}, nil
		})
		if err != nil || len(vs) != 3 || vs[0] == 0 || vs[1] <= va || vs[2] != 0 {
			t.Fatalf("CommitExclusive = %v, %v", vs, err)
		}
		wantItem(t, h, s, "a", "A2", vs[1])
		wantItem(t, h, s, "b", "B", vs[0])
		wantAbsent(t, h, s, "d")
		// fn's error writes nothing and comes back as is.
		if _, err := ec.CommitExclusive(ctx, []string{"a"}, func([]cas.Item) ([]cas.Op, error) {
			return nil, errExclusiveFn
		}); err != errExclusiveFn {
			t.Fatalf("fn's error: %v, want it as is", err)
		}
		// A stale op is a conflict naming it; nothing applies.
		_, err = ec.CommitExclusive(ctx, []string{"a", "b"}, func(cur []cas.Item) ([]cas.Op, error) {
			return []cas.Op{cas.Put("b", cur[1].Version, []byte("B2")), cas.Put("a", va, []byte("stale"))}, nil
		})
		wantConflict(t, h, err, "a", va, vs[1], "A2")
		wantItem(t, h, s, "b", "B", vs[0])
		// Bad keys.
		for _, c := range []struct {
			keys []string
			want error
		}{{nil, cas.ErrInvalidCommit}, {[]string{"a", "a"}, cas.ErrInvalidKey}, {[]string{""}, cas.ErrInvalidKey}} {
			if _, err := ec.CommitExclusive(ctx, c.keys, func([]cas.Item) ([]cas.Op, error) { return nil, nil }); !errors.Is(err, c.want) {
				t.Errorf("CommitExclusive(%q) = %v, want %v", c.keys, err, c.want)
			}
		}
	}},
	{"HoldsTheKeys", func(t *testing.T, h *Harness, s cas.Store) {
		// While fn runs, a write of a held key waits (or is refused), and
		// never succeeds at the version fn saw.
		ec := capability[cas.ExclusiveCommitter](t, s)
		ctx := context.Background()
		mustCreate(t, s, "a", "1")
		vb := mustCreate(t, s, "b", "1")
		inFn, release := make(chan struct{}), make(chan struct{})
		type res struct {
			err error
		}
		done, rival := make(chan res, 1), make(chan res, 1)
		go func() {
			_, err := ec.CommitExclusive(ctx, []string{"a", "b"}, func(cur []cas.Item) ([]cas.Op, error) {
				close(inFn)
				<-release
				return []cas.Op{cas.Put("a", cur[0].Version, []byte("2")), cas.Put("b", cur[1].Version, []byte("2"))}, nil
			})
			done <- res{err}
		}()
		<-inFn
		go func() {
			_, err := s.CompareAndSwap(ctx, "b", vb, []byte("rival"))
			rival <- res{err}
		}()
		early := false
		var r res
		select {
		case r = <-rival:
			early = true
			if r.err == nil {
				close(release)
				t.Fatalf("a write of a held key at its version succeeded")
			}
		case <-time.After(50 * time.Millisecond):
		}
		close(release)
		if d := <-done; d.err != nil {
			t.Fatalf("CommitExclusive: %v", d.err)
		}
		if !early {
			r = <-rival
		}
		if !errors.Is(r.err, cas.ErrConflict) {
			t.Fatalf("the rival write: %v, want a conflict", r.err)
		}
		wantLatest(t, h, s, "b", "2")
	}},
	{"HoldsTheKeysFromCommits", func(t *testing.T, h *Harness, s cas.Store) {
		// While fn runs, a transaction of a held key (and of a free one)
		// waits (or is refused), and never commits at the versions fn saw.
		ec := capability[cas.ExclusiveCommitter](t, s)
		cm := capability[cas.Committer](t, s)
		ctx := context.Background()
		va := mustCreate(t, s, "a", "1")
		vc := mustCreate(t, s, "c", "1")
		inFn, release := make(chan struct{}), make(chan struct{})
		done, rival := make(chan error, 1), make(chan error, 1)
		go func() {
			_, err := ec.CommitExclusive(ctx, []string{"a"}, func(cur []cas.Item) ([]cas.Op, error) {
				close(inFn)
				<-release
				return []cas.Op{cas.Put("a", cur[0].Version, []byte("2"))}, nil
			})
			done <- err
		}()
		<-inFn
		go func() {
			_, err := cm.Commit(ctx, []cas.Op{cas.Put("c", vc, []byte("rival")), cas.Put("a", va, []byte("rival"))})
			rival <- err
		}()
		early := false
		var err error
		select {
		case err = <-rival:
			early = true
			if err == nil {
				close(release)
				t.Fatalf("a transaction of a held key at its version committed")
			}
		case <-time.After(50 * time.Millisecond):
		}
		close(release)
		if err := <-done; err != nil {
			t.Fatalf("CommitExclusive: %v", err)
		}
		if !early {
			err = <-rival
		}
		if !errors.Is(err, cas.ErrConflict) {
			t.Fatalf("the rival transaction: %v, want a conflict", err)
		}
		wantLatest(t, h, s, "a", "2")
		wantLatest(t, h, s, "c", "1")
	}},
	{"PanicInFnReleases", func(t *testing.T, h *Harness, s cas.Store) {
		// A panic in fn leaves the keys free: a later write of them goes
		// through at once, not after a lock times out.
		ec := capability[cas.ExclusiveCommitter](t, s)
		ctx := context.Background()
		v := mustCreate(t, s, "a", "1")
		mustPanic(t, func() {
			_, _ = ec.CommitExclusive(ctx, []string{"a"}, func([]cas.Item) ([]cas.Op, error) { panic("castest: fn panics") })
		})
		if ex, ok := s.(cas.Exclusive); ok {
			func() {
				defer func() { _ = recover() }()
				_, _ = ex.UpdateExclusive(ctx, "a", func(cas.Item) ([]byte, bool, error) { panic("castest: fn panics") })
			}()
		}
		writableAfterPanic(t, s, "a", v, 5*time.Second)
	}},
	{"EscalatedTransfersAcrossStores", func(t *testing.T, h *Harness, s cas.Store) {
		// Several stores of one backend stand for several processes,
		// their transactions moving units between two hot keys: every
		// transfer succeeds at the default options (a transaction that
		// keeps losing commits holding its keys) and the total holds.
		capability[cas.ExclusiveCommitter](t, s)
		stores := processes(t, h, s, 4)
		ctx := context.Background()
		mustCreate(t, s, "x", "1000")
		mustCreate(t, s, "y", "1000")
		var failed atomic.Int64
		per := h.opsPerWorker() / 2
		h.runWorkers(func(i int) {
			st := stores[i%len(stores)]
			for j := range per {
				from, to := "x", "y"
				if (i+j)%2 == 1 {
					from, to = to, from
				}
				err := occ.Txn(ctx, st, func(tx *occ.Tx) error {
					if err := tx.Prefetch(from, to); err != nil {
						return err
					}
					fv, _, err := tx.Get(from)
					if err != nil {
						return err
					}
					tv, _, err := tx.Get(to)
					if err != nil {
						return err
					}
					f, _ := strconv.Atoi(string(fv))
					g, _ := strconv.Atoi(string(tv))
					tx.Put(from, []byte(strconv.Itoa(f-1)))
					tx.Put(to, []byte(strconv.Itoa(g+1)))
					return nil
				})
				if err != nil && failed.Add(1) == 1 {
					t.Errorf("transfer: %v", err)
				}
			}
		})
		h.settle(t, func() error {
			x, _ := s.Get(ctx, "x")
			y, _ := s.Get(ctx, "y")
			a, _ := strconv.Atoi(string(x.Value))
			b, _ := strconv.Atoi(string(y.Value))
			if a+b != 2000 {
				// Two stale reads may come from different moments.
				return fmt.Errorf("x=%d y=%d: the total moved", a, b)
			}
			return nil
		})
		if n := failed.Load(); n > 0 {
			t.Fatalf("%d of %d transfers failed", n, h.workers()*per)
		}
	}},
}
