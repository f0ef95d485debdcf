package etcdcas_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/occkit/occkit/adapters/etcdcas"
	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/internal/etcdtest"
)

// TestCommitWaitsForHold: a plain Commit writing keys that an exclusive
// update or commit holds waits for the holder, then conflicts, instead of
// overtaking it at the versions the holder read (which would make the
// holder lose, and a transaction that keeps losing lose every escalated
// attempt too). With room for a compare per key, and for a commit too
// large for that, with one compare over the range of hold keys.
func TestCommitWaitsForHold(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.Options{})
	cli := c.Client()
	ctx := etcdtest.Ctx(t, 30*time.Second)
	for _, tc := range []struct {
		name   string
		limits cas.Limits
		keys   int // written by the rival commit, k0...
		held   []string
	}{
		{"PerKey", cas.Limits{}, 2, []string{"k0", "k1"}},
		{"Range", cas.Limits{MaxCommitOps: 8}, 6, []string{"k3"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newStore(t, cli, etcdcas.Config{Limits: tc.limits})
			var ops []cas.Op
			for i := range tc.keys {
				k := fmt.Sprintf("k%d", i)
				v, err := s.CompareAndSwap(ctx, k, 0, []byte("0"))
				if err != nil {
					t.Fatal(err)
				}
				ops = append(ops, cas.Put(k, v, []byte("rival")))
			}
			inFn, release := make(chan struct{}), make(chan struct{})
			done := make(chan error, 1)
			go func() {
				_, err := s.CommitExclusive(ctx, tc.held, func(cur []cas.Item) ([]cas.Op, error) {
					close(inFn)
					<-release
					var ops []cas.Op
					for _, it := range cur {
						ops = append(ops, cas.Put(it.Key, it.Version, []byte("holder")))
					}
					return ops, nil
				})
				done <- err
			}()
			<-inFn
			rival := make(chan error, 1)
			go func() {
				_, err := s.Commit(ctx, ops)
				rival <- err
			}()
			select {
			case err := <-rival:
				close(release)
				<-done
				t.Fatalf("the rival commit returned while the keys were held: %v", err)
			case <-time.After(200 * time.Millisecond): // waiting
			}
			close(release)
			if err := <-done; err != nil {
				t.Fatalf("the holder's commit: %v", err)
			}
			if err := <-rival; !errors.Is(err, cas.ErrConflict) {
				t.Fatalf("the rival commit after the hold: %v, want a conflict", err)
			}
			it, err := s.Get(ctx, tc.held[0])
			if err != nil || string(it.Value) != "holder" {
				t.Fatalf("%s holds %q (%v), want the holder's write", tc.held[0], it.Value, err)
			}
		})
	}
}

// The largest commit has no room for a hold compare: it goes through
// at once (and makes a holder's write conflict), as documented.
func TestLargestCommitIgnoresHolds(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.Options{})
	ctx := etcdtest.Ctx(t, 30*time.Second)
	s := newStore(t, c.Client(), etcdcas.Config{Limits: cas.Limits{MaxCommitOps: 4}})
	var ops []cas.Op
	for i := range 4 {
		ops = append(ops, cas.Put(fmt.Sprintf("k%d", i), 0, []byte("v")))
	}
	inFn, release := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, err := s.UpdateExclusive(ctx, "k1", func(cur cas.Item) ([]byte, bool, error) {
			close(inFn)
			<-release
			return []byte("holder"), true, nil
		})
		done <- err
	}()
	<-inFn
	_, err := s.Commit(ctx, ops)
	close(release)
	if err != nil {
		t.Fatalf("the largest commit: %v", err)
	}
	if err := <-done; !errors.Is(err, cas.ErrConflict) {
		t.Fatalf("the overtaken holder: %v, want a conflict", err)
	}
}
