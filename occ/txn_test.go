package occ

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/occkit/occkit/adapters/memcas"
	"github.com/occkit/occkit/cas"
)

// plainStore hides every method but the Store ones: a store that cannot
// commit several keys atomically.
type plainStore struct{ cas.Store }

// countingCommitter is a countingStore that still commits atomically, by
// forwarding Commit; it records every commit's operations.
type countingCommitter struct {
	*countingStore
	committer cas.Committer

	cmu     sync.Mutex
	commits [][]cas.Op
}

var _ cas.Committer = (*countingCommitter)(nil)

func newCountingCommitter(c cas.Committer) *countingCommitter {
	return &countingCommitter{countingStore: newCountingStore(c), committer: c}
}

func (c *countingCommitter) Commit(ctx context.Context, ops []cas.Op) ([]cas.Version, error) {
	c.cmu.Lock()
	c.commits = append(c.commits, slices.Clone(ops))
	c.cmu.Unlock()
	vs, err := c.committer.Commit(ctx, ops)
	return vs, c.strip(err)
}

func (c *countingCommitter) recordedCommits() [][]cas.Op {
	c.cmu.Lock()
	defer c.cmu.Unlock()
	return slices.Clone(c.commits)
}

func atoi(t *testing.T, b []byte) int {
	t.Helper()
	n, err := strconv.Atoi(string(b))
	if err != nil {
		t.Fatalf("value %q is not a number: %v", b, err)
	}
	return n
}

// snapshot reads every key in a store, outside any transaction.
func snapshot(t *testing.T, s cas.Store, keys ...string) map[string]cas.Item {
	t.Helper()
	out := map[string]cas.Item{}
	for _, k := range keys {
		it, err := s.Get(context.Background(), k)
		switch {
		case errors.Is(err, cas.ErrNotFound):
			continue
		case err != nil:
			t.Fatalf("get %q: %v", k, err)
		}
		out[k] = it
	}
	return out
}

func sameSnapshot(a, b map[string]cas.Item) bool {
	if len(a) != len(b) {
		return false
	}
	for k, x := range a {
		y, ok := b[k]
		if !ok || x.Version != y.Version || string(x.Value) != string(y.Value) {
			return false
		}
	}
	return true
}

func TestPlainStoreIsNotCommitter(t *testing.T) {
	// The non-committer tests below rely on this.
	var s cas.Store = plainStore{memcas.New()}
	if _, ok := s.(cas.Committer); ok {
		t.Fatal("plainStore implements cas.Committer")
	}
	var cs cas.Store = newCountingStore(memcas.New())
	if _, ok := cs.(cas.Committer); ok {
		t.Fatal("countingStore implements cas.Committer")
	}
}

var errInsufficient = errors.New("insufficient funds")

// transfer moves amount from one account to another, refusing overdrafts.
func transfer(from, to string, amount int) func(tx *Tx) error {
	return func(tx *Tx) error {
		fb, ok, err := tx.Get(from)
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("no account %s", from)
		}
		tb, ok, err := tx.Get(to)
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("no account %s", to)
		}
		f, err := strconv.Atoi(string(fb))
		if err != nil {
			return err
		}
		g, err := strconv.Atoi(string(tb))
		if err != nil {
			return err
		}
		if f < amount {
			return errInsufficient
		}
		tx.Put(from, []byte(strconv.Itoa(f-amount)))
		tx.Put(to, []byte(strconv.Itoa(g+amount)))
		return nil
	}
}

func TestTxnTransfersConserveBalance(t *testing.T) {
	const (
		accounts  = 5
		initial   = 100
		workers   = 8
		transfers = 150
	)
	mem := memcas.New()
	keys := make([]string, accounts)
	for i := range keys {
		keys[i] = fmt.Sprintf("acct/%d", i)
		put(t, mem, keys[i], strconv.Itoa(initial))
	}
	const total = accounts * initial

	var (
		wg         sync.WaitGroup
		mu         sync.Mutex
		committed  int
		refused    int
		failures   []error
		violations []string
	)
	stop := make(chan struct{})
	// A broken commit would make every attempt conflict and back off up to
	// 1000 times: the deadline turns that into failures, not a hang.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// The auditor takes read-only snapshots while transfers run: a
	// serializable read-only transaction always sees the total.
	auditDone := make(chan struct{})
	audits := 0
	go func() {
		defer close(auditDone)
		for {
			select {
			case <-stop:
				return
			default:
			}
			var sum int
			var neg []string
			err := Txn(ctx, mem, func(tx *Tx) error {
				sum, neg = 0, nil
				for _, k := range keys {
					b, _, err := tx.Get(k)
					if err != nil {
						return err
					}
					n, err := strconv.Atoi(string(b))
					if err != nil {
						return err
					}
					sum += n
					if n < 0 {
						neg = append(neg, k)
					}
				}
				return nil
			}, WithMaxAttempts(1000))
			mu.Lock()
			audits++
			switch {
			case ctx.Err() != nil:
				failures = append(failures, fmt.Errorf("audit: %w", err))
				mu.Unlock()
				return
			case err != nil:
				failures = append(failures, fmt.Errorf("audit: %w", err))
			case sum != total:
				violations = append(violations, fmt.Sprintf("audit saw total %d, want %d", sum, total))
			case len(neg) > 0:
				violations = append(violations, fmt.Sprintf("audit saw negative balances %v", neg))
			}
			mu.Unlock()
		}
	}()

	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 42))
			for range transfers {
				if ctx.Err() != nil {
					return
				}
				from := rng.IntN(accounts)
				to := (from + 1 + rng.IntN(accounts-1)) % accounts
				amount := 1 + rng.IntN(60)
				err := Txn(ctx, mem, transfer(keys[from], keys[to], amount), WithMaxAttempts(1000))
				mu.Lock()
				switch {
				case err == nil:
					committed++
				case errors.Is(err, errInsufficient):
					refused++
				default:
					failures = append(failures, err)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	close(stop)
	<-auditDone

	for _, err := range failures[:min(len(failures), 5)] {
		t.Errorf("transaction failed: %v", err)
	}
	for _, v := range violations[:min(len(violations), 5)] {
		t.Error(v)
	}
	if committed == 0 {
		t.Fatal("no transfer committed")
	}
	sum := 0
	for k, it := range snapshot(t, mem, keys...) {
		n := atoi(t, it.Value)
		if n < 0 {
			t.Errorf("%s = %d, went negative although overdrafts are refused", k, n)
		}
		sum += n
	}
	if sum != total {
		t.Errorf("final total %d, want %d", sum, total)
	}
	t.Logf("%d committed, %d refused, %d audits", committed, refused, audits)
}

func TestTxnReadYourWrites(t *testing.T) {
	mem := memcas.New()
	put(t, mem, "a", "1")
	put(t, mem, "c", "3")
	type step struct {
		do     func(tx *Tx)
		key    string
		want   string
		wantOK bool
	}
	steps := []step{
		{nil, "a", "1", true},
		{nil, "missing", "", false},
		{func(tx *Tx) { tx.Put("a", []byte("2")) }, "a", "2", true},
		{func(tx *Tx) { tx.Delete("a") }, "a", "", false},
		{func(tx *Tx) { tx.Put("a", []byte("again")) }, "a", "again", true},
		{func(tx *Tx) { tx.Put("b", []byte("new")) }, "b", "new", true},
		{func(tx *Tx) { tx.Delete("c") }, "c", "", false},
		{func(tx *Tx) { tx.Delete("never") }, "never", "", false},
	}
	calls := 0
	err := Txn(context.Background(), mem, func(tx *Tx) error {
		calls++
		for i, s := range steps {
			if s.do != nil {
				s.do(tx)
			}
			v, ok, err := tx.Get(s.key)
			if err != nil {
				return err
			}
			if ok != s.wantOK || string(v) != s.want {
				t.Errorf("step %d: Get(%q) = (%q, %v), want (%q, %v)", i, s.key, v, ok, s.want, s.wantOK)
			}
			if !ok && v != nil {
				t.Errorf("step %d: Get(%q) of an absent key returned value %q", i, s.key, v)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("Txn = %v", err)
	}
	if calls != 1 {
		t.Errorf("fn called %d times, want 1", calls)
	}
	got := snapshot(t, mem, "a", "b", "c", "missing", "never")
	want := map[string]string{"a": "again", "b": "new"}
	if len(got) != len(want) {
		t.Errorf("store holds %d keys after commit, want %d: %v", len(got), len(want), got)
	}
	for k, v := range want {
		if string(got[k].Value) != v {
			t.Errorf("after commit %s = %q, want %q", k, got[k].Value, v)
		}
	}
}

func TestTxnFnErrorAborts(t *testing.T) {
	errBoom := errors.New("boom")
	tests := []struct {
		name  string
		store func(*memcas.Store) cas.Store
	}{
		{"committer", func(m *memcas.Store) cas.Store { return newCountingCommitter(m) }},
		{"non-committer", func(m *memcas.Store) cas.Store { return newCountingStore(m) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mem := memcas.New()
			put(t, mem, "a", "1")
			put(t, mem, "c", "3")
			before := snapshot(t, mem, "a", "b", "c")
			s := tt.store(mem)
			calls := 0
			err := Txn(context.Background(), s, func(tx *Tx) error {
				calls++
				if _, _, err := tx.Get("a"); err != nil {
					return err
				}
				tx.Put("a", []byte("100"))
				tx.Put("b", []byte("200"))
				tx.Delete("c")
				return errBoom
			}, noSleep())
			if err != errBoom {
				t.Fatalf("Txn = %#v, want fn's error as is", err)
			}
			if calls != 1 {
				t.Errorf("fn called %d times, want 1", calls)
			}
			if after := snapshot(t, mem, "a", "b", "c"); !sameSnapshot(before, after) {
				t.Errorf("store changed by an aborted transaction: %v -> %v", before, after)
			}
			var cs *countingStore
			switch s := s.(type) {
			case *countingCommitter:
				if n := len(s.recordedCommits()); n != 0 {
					t.Errorf("Commit called %d times", n)
				}
				cs = s.countingStore
			case *countingStore:
				cs = s
			}
			for _, k := range []string{"a", "b", "c"} {
				if cs.casOf(k) != 0 || cs.count(cs.dels, k) != 0 {
					t.Errorf("write issued to %s", k)
				}
			}
		})
	}
}

func TestTxnBlindWrites(t *testing.T) {
	tests := []struct {
		name    string
		initial string // "" = absent
		do      func(tx *Tx)
		wantOp  func(v cas.Version) cas.Op
		want    string
		wantOK  bool
	}{
		{
			name: "put over existing key", initial: "old",
			do:     func(tx *Tx) { tx.Put("k", []byte("new")) },
			wantOp: func(v cas.Version) cas.Op { return cas.Put("k", v, []byte("new")) },
			want:   "new", wantOK: true,
		},
		{
			name: "put of absent key",
			do:   func(tx *Tx) { tx.Put("k", []byte("new")) },
			wantOp: func(cas.Version) cas.Op {
				return cas.Put("k", 0, []byte("new"))
			},
			want: "new", wantOK: true,
		},
		{
			name: "delete existing key", initial: "old",
			do:     func(tx *Tx) { tx.Delete("k") },
			wantOp: func(v cas.Version) cas.Op { return cas.Delete("k", v) },
		},
		{
			name:   "delete absent key",
			do:     func(tx *Tx) { tx.Delete("k") },
			wantOp: func(cas.Version) cas.Op { return cas.Check("k", 0) },
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mem := memcas.New()
			var v0 cas.Version
			if tt.initial != "" {
				v0 = put(t, mem, "k", tt.initial)
			}
			cc := newCountingCommitter(mem)
			err := Txn(context.Background(), cc, func(tx *Tx) error {
				tt.do(tx)
				return nil
			}, noSleep())
			if err != nil {
				t.Fatalf("Txn = %v", err)
			}
			commits := cc.recordedCommits()
			if len(commits) != 1 || len(commits[0]) != 1 {
				t.Fatalf("commits = %+v, want one commit of one op", commits)
			}
			got, want := commits[0][0], tt.wantOp(v0)
			if got.Kind != want.Kind || got.Key != want.Key || got.Expected != want.Expected || string(got.Value) != string(want.Value) {
				t.Errorf("commit op = %+v, want %+v (conditional on the version read at commit)", got, want)
			}
			v, _, ok := value(t, mem, "k")
			if ok != tt.wantOK || v != tt.want {
				t.Errorf("store holds (%q, %v), want (%q, %v)", v, ok, tt.want, tt.wantOK)
			}
		})
	}
}

// racingStore runs hook after each Get of the wrapped Store, to let a
// competing writer in between a read and the commit that depends on it.
type racingStore struct {
	cas.Committer
	afterGet func(key string)
}

func (r *racingStore) Get(ctx context.Context, key string) (cas.Item, error) {
	it, err := r.Committer.Get(ctx, key)
	if r.afterGet != nil {
		r.afterGet(key)
	}
	return it, err
}

func TestTxnBlindWriteIsConditional(t *testing.T) {
	// A writer changes the key between the commit-time read of a blind write
	// and the commit: the commit must fail and fn run again, not overwrite
	// a state it never saw.
	mem := memcas.New()
	put(t, mem, "k", "0")
	gets := 0
	rs := &racingStore{Committer: mem, afterGet: func(key string) {
		gets++
		if gets == 1 {
			it, err := mem.Get(context.Background(), key)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := mem.CompareAndSwap(context.Background(), key, it.Version, []byte("racer")); err != nil {
				t.Fatal(err)
			}
		}
	}}
	obs := &recordingObserver{t: t}
	calls := 0
	err := Txn(context.Background(), rs, func(tx *Tx) error {
		calls++
		tx.Put("k", []byte("mine"))
		return nil
	}, noSleep(), WithObserver(obs))
	if err != nil {
		t.Fatalf("Txn = %v", err)
	}
	if calls != 2 {
		t.Errorf("fn called %d times, want 2 (the racing write makes the first commit conflict)", calls)
	}
	if len(obs.attempts) != 2 || obs.attempts[0].Outcome != OutcomeConflict || obs.attempts[1].Outcome != OutcomeSuccess {
		t.Errorf("attempts = %+v, want OutcomeConflict then Success", obs.attempts)
	}
	if v, _, _ := value(t, mem, "k"); v != "mine" {
		t.Errorf("k = %q, want \"mine\"", v)
	}
}

func TestTxnReadOnly(t *testing.T) {
	tests := []struct {
		name string
		// race runs on the first attempt after the reads.
		race      func(t *testing.T, mem *memcas.Store, v map[string]cas.Version)
		wantCalls int
	}{
		{"no concurrent change", nil, 1},
		{
			"read key changes", func(t *testing.T, mem *memcas.Store, v map[string]cas.Version) {
				if _, err := mem.CompareAndSwap(context.Background(), "a", v["a"], []byte("10")); err != nil {
					t.Fatal(err)
				}
			}, 2,
		},
		{
			"read key deleted", func(t *testing.T, mem *memcas.Store, v map[string]cas.Version) {
				if err := mem.CompareAndDelete(context.Background(), "b", v["b"]); err != nil {
					t.Fatal(err)
				}
			}, 2,
		},
		{
			"absent key created", func(t *testing.T, mem *memcas.Store, _ map[string]cas.Version) {
				if _, err := mem.CompareAndSwap(context.Background(), "absent", 0, []byte("x")); err != nil {
					t.Fatal(err)
				}
			}, 2,
		},
		{
			"unread key changes", func(t *testing.T, mem *memcas.Store, _ map[string]cas.Version) {
				if _, err := mem.CompareAndSwap(context.Background(), "other", 0, []byte("x")); err != nil {
					t.Fatal(err)
				}
			}, 1,
		},
	}
	stores := []struct {
		name      string
		wrap      func(*memcas.Store) cas.Store
		committer bool
	}{
		{"non-committer", func(m *memcas.Store) cas.Store { return plainStore{m} }, false},
		{"committer", func(m *memcas.Store) cas.Store { return newCountingCommitter(m) }, true},
	}
	for _, st := range stores {
		for _, tt := range tests {
			t.Run(st.name+"/"+tt.name, func(t *testing.T) {
				mem := memcas.New()
				vers := map[string]cas.Version{"a": put(t, mem, "a", "1"), "b": put(t, mem, "b", "2")}
				s := st.wrap(mem)
				calls := 0
				var seen []string
				err := Txn(context.Background(), s, func(tx *Tx) error {
					calls++
					seen = seen[:0]
					for _, k := range []string{"a", "b", "absent"} {
						v, ok, err := tx.Get(k)
						if err != nil {
							return err
						}
						seen = append(seen, fmt.Sprintf("%s=%s/%v", k, v, ok))
					}
					if calls == 1 && tt.race != nil {
						tt.race(t, mem, vers)
					}
					return nil
				}, noSleep())
				if err != nil {
					t.Fatalf("Txn = %v", err)
				}
				if calls != tt.wantCalls {
					t.Errorf("fn called %d times, want %d", calls, tt.wantCalls)
				}
				// The last attempt saw the store as it is now.
				var want []string
				for _, k := range []string{"a", "b", "absent"} {
					v, _, ok := value(t, mem, k)
					want = append(want, fmt.Sprintf("%s=%s/%v", k, v, ok))
				}
				if !slices.Equal(seen, want) {
					t.Errorf("last attempt saw %v, want %v", seen, want)
				}
				if cc, ok := s.(*countingCommitter); ok {
					for _, c := range cc.recordedCommits() {
						for _, op := range c {
							if op.Kind != cas.OpCheck {
								t.Errorf("read-only transaction committed %v", op)
							}
						}
					}
				}
			})
		}
	}
}

func TestTxnNonCommitterMultiKeyWrites(t *testing.T) {
	tests := []struct {
		name string
		fn   func(tx *Tx) error
	}{
		{"two blind puts", func(tx *Tx) error {
			tx.Put("a", []byte("x"))
			tx.Put("b", []byte("y"))
			return nil
		}},
		{"read one, write another", func(tx *Tx) error {
			if _, _, err := tx.Get("a"); err != nil {
				return err
			}
			tx.Put("b", []byte("y"))
			return nil
		}},
		{"read two, write one", func(tx *Tx) error {
			if _, _, err := tx.Get("a"); err != nil {
				return err
			}
			if _, _, err := tx.Get("b"); err != nil {
				return err
			}
			tx.Put("a", []byte("x"))
			return nil
		}},
		{"delete and put", func(tx *Tx) error {
			tx.Delete("a")
			tx.Put("new", []byte("z"))
			return nil
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mem := memcas.New()
			put(t, mem, "a", "1")
			put(t, mem, "b", "2")
			before := snapshot(t, mem, "a", "b", "new")
			cs := newCountingStore(mem)
			calls := 0
			err := Txn(context.Background(), cs, func(tx *Tx) error {
				calls++
				return tt.fn(tx)
			}, noSleep())
			if !errors.Is(err, errors.ErrUnsupported) {
				t.Fatalf("Txn = %v, want errors.ErrUnsupported", err)
			}
			if errors.Is(err, cas.ErrConflict) {
				t.Errorf("unsupported error also matches cas.ErrConflict")
			}
			if calls != 1 {
				t.Errorf("fn called %d times, want 1 (unsupported is not retried)", calls)
			}
			if after := snapshot(t, mem, "a", "b", "new"); !sameSnapshot(before, after) {
				t.Errorf("store changed: %v -> %v", before, after)
			}
			for _, k := range []string{"a", "b", "new"} {
				if cs.casOf(k) != 0 || cs.count(cs.dels, k) != 0 {
					t.Errorf("write issued to %s", k)
				}
			}
		})
	}
}

func TestTxnNonCommitterSingleKey(t *testing.T) {
	increment := func(tx *Tx) error {
		v, ok, err := tx.Get("k")
		if err != nil {
			return err
		}
		n := 0
		if ok {
			if n, err = strconv.Atoi(string(v)); err != nil {
				return err
			}
		}
		tx.Put("k", []byte(strconv.Itoa(n+1)))
		return nil
	}
	tests := []struct {
		name      string
		initial   string // "" = absent
		fn        func(tx *Tx) error
		race      func(t *testing.T, mem *memcas.Store) // first attempt, after fn
		wantCalls int
		want      string
		wantOK    bool
	}{
		{name: "increment existing", initial: "5", fn: increment, wantCalls: 1, want: "6", wantOK: true},
		{name: "increment absent", fn: increment, wantCalls: 1, want: "1", wantOK: true},
		{
			name: "increment with a racing writer", initial: "5", fn: increment,
			race: func(t *testing.T, mem *memcas.Store) {
				it, err := mem.Get(context.Background(), "k")
				if err != nil {
					t.Fatal(err)
				}
				if _, err := mem.CompareAndSwap(context.Background(), "k", it.Version, []byte("50")); err != nil {
					t.Fatal(err)
				}
			},
			wantCalls: 2, want: "51", wantOK: true,
		},
		{
			name: "read then delete", initial: "5",
			fn: func(tx *Tx) error {
				if _, _, err := tx.Get("k"); err != nil {
					return err
				}
				tx.Delete("k")
				return nil
			},
			wantCalls: 1,
		},
		{
			name: "blind put", initial: "5",
			fn:        func(tx *Tx) error { tx.Put("k", []byte("blind")); return nil },
			wantCalls: 1, want: "blind", wantOK: true,
		},
		{
			name:      "delete absent key",
			fn:        func(tx *Tx) error { tx.Delete("k"); return nil },
			wantCalls: 1,
		},
		{
			name: "delete of a key read absent that a racer creates",
			fn: func(tx *Tx) error {
				if _, _, err := tx.Get("k"); err != nil {
					return err
				}
				tx.Delete("k")
				return nil
			},
			race: func(t *testing.T, mem *memcas.Store) {
				if _, err := mem.CompareAndSwap(context.Background(), "k", 0, []byte("racer")); err != nil {
					t.Fatal(err)
				}
			},
			wantCalls: 2,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mem := memcas.New()
			if tt.initial != "" {
				put(t, mem, "k", tt.initial)
			}
			calls := 0
			err := Txn(context.Background(), plainStore{mem}, func(tx *Tx) error {
				calls++
				err := tt.fn(tx)
				if calls == 1 && tt.race != nil {
					tt.race(t, mem)
				}
				return err
			}, noSleep())
			if err != nil {
				t.Fatalf("Txn = %v", err)
			}
			if calls != tt.wantCalls {
				t.Errorf("fn called %d times, want %d", calls, tt.wantCalls)
			}
			v, _, ok := value(t, mem, "k")
			if ok != tt.wantOK || v != tt.want {
				t.Errorf("k = (%q, %v), want (%q, %v)", v, ok, tt.want, tt.wantOK)
			}
		})
	}
}

// getAB reads keys a and b, in that order, in tx.
func getAB(tx *Tx) (av, bv []byte, err error) {
	if av, _, err = tx.Get("a"); err != nil {
		return nil, nil, err
	}
	bv, _, err = tx.Get("b")
	return av, bv, err
}

func TestTxnCommitConflictRetries(t *testing.T) {
	mem := memcas.New()
	va := put(t, mem, "a", "1")
	put(t, mem, "b", "2")
	obs := &recordingObserver{t: t}
	calls := 0
	err := Txn(context.Background(), mem, func(tx *Tx) error {
		calls++
		av, bv, err := getAB(tx)
		if err != nil {
			return err
		}
		if calls == 1 {
			if _, err := mem.CompareAndSwap(context.Background(), "a", va, []byte("10")); err != nil {
				t.Fatal(err)
			}
		}
		a, b := atoi(t, av), atoi(t, bv)
		tx.Put("a", []byte(strconv.Itoa(a+b)))
		tx.Put("b", []byte(strconv.Itoa(b*100)))
		return nil
	}, noSleep(), WithObserver(obs))
	if err != nil {
		t.Fatalf("Txn = %v", err)
	}
	if calls != 2 {
		t.Errorf("fn called %d times, want 2", calls)
	}
	got := snapshot(t, mem, "a", "b")
	if string(got["a"].Value) != "12" || string(got["b"].Value) != "200" {
		t.Errorf("a=%q b=%q, want a=12 (from the racer's 10) and b=200 (applied once)", got["a"].Value, got["b"].Value)
	}
	if len(obs.attempts) != 2 || obs.attempts[0].Outcome != OutcomeConflict || obs.attempts[0].Op != "txn" || obs.attempts[1].Outcome != OutcomeSuccess {
		t.Errorf("attempts = %+v, want txn OutcomeConflict then Success", obs.attempts)
	}
	if len(obs.calls) != 1 || obs.calls[0].Op != "txn" || obs.calls[0].Attempts != 2 || obs.calls[0].Outcome != OutcomeSuccess {
		t.Errorf("calls = %+v, want one txn call of 2 attempts", obs.calls)
	}
}

func TestTxnReusesConflictCurrent(t *testing.T) {
	tests := []struct {
		name      string
		strip     bool
		wantGetsB int
	}{
		{"conflict carries current: no extra read", false, 1},
		{"conflict without current: read again", true, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mem := memcas.New()
			put(t, mem, "a", "1")
			vb := put(t, mem, "b", "2")
			cc := newCountingCommitter(mem)
			cc.stripCurrent = tt.strip
			var seenB []string
			calls := 0
			err := Txn(context.Background(), cc, func(tx *Tx) error {
				calls++
				av, bv, err := getAB(tx)
				if err != nil {
					return err
				}
				seenB = append(seenB, string(bv))
				if calls == 1 {
					if _, err := mem.CompareAndSwap(context.Background(), "b", vb, []byte("20")); err != nil {
						t.Fatal(err)
					}
				}
				tx.Put("a", []byte(strconv.Itoa(atoi(t, av)+atoi(t, bv))))
				return nil
			}, noSleep())
			if err != nil {
				t.Fatalf("Txn = %v", err)
			}
			if calls != 2 {
				t.Fatalf("fn called %d times, want 2", calls)
			}
			if got := cc.getsOf("b"); got != tt.wantGetsB {
				t.Errorf("Get(b) called %d times, want %d", got, tt.wantGetsB)
			}
			if got := cc.getsOf("a"); got != 2 {
				t.Errorf("Get(a) called %d times, want 2 (the conflict said nothing about a)", got)
			}
			if !slices.Equal(seenB, []string{"2", "20"}) {
				t.Errorf("fn saw b = %v, want [2 20]", seenB)
			}
			if n := len(cc.recordedCommits()); n != 2 {
				t.Errorf("Commit called %d times, want 2", n)
			}
			if v, _, _ := value(t, mem, "a"); v != "21" {
				t.Errorf("a = %q, want 21", v)
			}
		})
	}
}

func TestTxnGivesUp(t *testing.T) {
	mem := memcas.New()
	put(t, mem, "a", "0")
	calls := 0
	err := Txn(context.Background(), mem, func(tx *Tx) error {
		calls++
		if _, _, err := tx.Get("a"); err != nil {
			return err
		}
		it, err := mem.Get(context.Background(), "a")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := mem.CompareAndSwap(context.Background(), "a", it.Version, []byte(strconv.Itoa(calls))); err != nil {
			t.Fatal(err)
		}
		tx.Put("a", []byte("mine"))
		return nil
	}, noSleep(), WithMaxAttempts(3))
	var gu *GiveUpError
	if !errors.As(err, &gu) || gu.Attempts != 3 || !errors.Is(err, ErrAttemptsExhausted) || !errors.Is(err, cas.ErrConflict) {
		t.Fatalf("Txn = %v, want *GiveUpError after 3 attempts matching ErrAttemptsExhausted and cas.ErrConflict", err)
	}
	if calls != 3 {
		t.Errorf("fn called %d times, want 3", calls)
	}
	if v, _, _ := value(t, mem, "a"); v != "3" {
		t.Errorf("a = %q, want the racer's last write \"3\"", v)
	}
}

func TestTxnContextCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	calls := 0
	err := Txn(ctx, memcas.New(), func(tx *Tx) error {
		calls++
		tx.Put("k", []byte("v"))
		return nil
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Txn = %v, want context.Canceled", err)
	}
	if calls != 0 {
		t.Errorf("fn called %d times, want 0", calls)
	}
}

func TestTxnEmpty(t *testing.T) {
	cc := newCountingCommitter(memcas.New())
	calls := 0
	if err := Txn(context.Background(), cc, func(*Tx) error { calls++; return nil }); err != nil {
		t.Fatalf("Txn = %v", err)
	}
	if calls != 1 {
		t.Errorf("fn called %d times, want 1", calls)
	}
	if n := len(cc.recordedCommits()); n != 0 {
		t.Errorf("empty transaction committed %d times", n)
	}
}

func TestTxnGetError(t *testing.T) {
	calls := 0
	err := Txn(context.Background(), memcas.New(), func(tx *Tx) error {
		calls++
		_, _, err := tx.Get("") // invalid key
		return err
	}, noSleep())
	if !errors.Is(err, cas.ErrInvalidKey) {
		t.Fatalf("Txn = %v, want cas.ErrInvalidKey", err)
	}
	if calls != 1 {
		t.Errorf("fn called %d times, want 1", calls)
	}
}

func TestTxnContextAndGoroutine(t *testing.T) {
	type key struct{}
	ctx := context.WithValue(context.Background(), key{}, "marker")
	caller := goroutineID(t)
	calls := 0
	err := Txn(ctx, memcas.New(), func(tx *Tx) error {
		calls++
		if got := tx.Context().Value(key{}); got != "marker" {
			t.Errorf("tx.Context() value = %v, want the caller's context", got)
		}
		if g := goroutineID(t); g != caller {
			t.Errorf("fn ran on goroutine %d, want the caller's %d", g, caller)
		}
		if calls == 1 {
			return conflict("k")
		}
		return nil
	}, noSleep())
	if err != nil || calls != 2 {
		t.Fatalf("Txn = %v after %d calls, want nil after 2", err, calls)
	}
}

func TestTxnPanicPropagates(t *testing.T) {
	mem := memcas.New()
	want := "txn panic"
	returned := false
	func() {
		defer func() {
			if got := recover(); got != want {
				t.Errorf("recovered %v, want fn's panic value", got)
			}
		}()
		_ = Txn(context.Background(), mem, func(tx *Tx) error {
			tx.Put("k", []byte("v"))
			panic(want)
		})
		returned = true
	}()
	if returned {
		t.Error("Txn returned normally after fn panicked")
	}
	if _, _, ok := value(t, mem, "k"); ok {
		t.Error("write of a panicking transaction was committed")
	}
}
