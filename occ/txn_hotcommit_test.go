package occ

import (
	"context"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/occkit/occkit/adapters/memcas"
	"github.com/occkit/occkit/cas"
)

// hotRivalled is rivalled naming a hot-commit window (cas.HotCommitHint),
// and counting its plain commits and the reads made outside
// CommitExclusive.
type hotRivalled struct {
	*rivalled
	window       time.Duration
	plain, reads atomic.Int64
}

func (h *hotRivalled) Get(ctx context.Context, key string) (cas.Item, error) {
	h.reads.Add(1)
	return h.rivalled.Get(ctx, key)
}

func (h *hotRivalled) GetMany(ctx context.Context, keys []string) ([]cas.Item, error) {
	h.reads.Add(1)
	return h.rivalled.GetMany(ctx, keys)
}

func (h *hotRivalled) HotCommitFor() time.Duration { return h.window }

func (h *hotRivalled) Commit(ctx context.Context, ops []cas.Op) ([]cas.Version, error) {
	h.plain.Add(1)
	return h.rivalled.Commit(ctx, ops)
}

// TestTxnHotCommit: on a store with a hot-commit window, a transaction
// whose commits conflicted twice at a key within the window commits
// holding its keys from its next attempt on (not after
// DefaultTxnExclusiveAfter losses), and the next transactions touching
// the key do so at their first attempt, without an optimistic read or
// commit (a read from the store while a key read is hot ends the attempt;
// read-only transactions too), until the window has passed;
// WithExclusiveAfter(0) turns it off.
func TestTxnHotCommit(t *testing.T) {
	ctx := context.Background()
	noSleep := withSleep(func(context.Context, time.Duration) error { return nil })
	h := &hotRivalled{rivalled: &rivalled{Store: memcas.New()}, window: 500 * time.Millisecond} // far above the calls' time, even under -race
	for _, k := range []string{"a", "b", "c"} {
		if _, err := h.Store.CompareAndSwap(ctx, k, 0, []byte("10")); err != nil {
			t.Fatal(err)
		}
	}
	// run runs a transfer from a to b (read-only: a read of a) and
	// returns which attempts were exclusive, how many plain commits it
	// sent and how many reads it made outside them.
	run := func(readOnly bool, opts ...Option) ([]int, int64, int64) {
		t.Helper()
		var exclusiveAt []int
		obs := WithObserver(ObserverFuncs{Attempt: func(_ context.Context, a Attempt) {
			if a.Exclusive {
				exclusiveAt = append(exclusiveAt, a.Number)
			}
		}})
		plain, reads := h.plain.Load(), h.reads.Load()
		fn := moveOneAB
		if readOnly {
			fn = func(tx *Tx) error {
				_, _, err := tx.Get("a")
				return err
			}
		}
		err := Txn(ctx, h, fn, append(opts, obs, noSleep)...)
		if err != nil {
			t.Fatalf("transaction: %v", err)
		}
		return exclusiveAt, h.plain.Load() - plain, h.reads.Load() - reads
	}
	if ex, plain, _ := run(false); len(ex) != 1 || ex[0] != 3 || plain != 2 {
		t.Fatalf("first transfer: exclusive attempts %v, %d plain commits; want [3] after 2 (two conflicts made a hot)", ex, plain)
	}
	if ex, plain, reads := run(false); len(ex) != 1 || ex[0] != 1 || plain != 0 || reads != 0 {
		t.Fatalf("transfer while a is hot: exclusive attempts %v, %d plain commits, %d reads; want [1], 0 and 0", ex, plain, reads)
	}
	// Reads from the store (no remembered states: no turns).
	if ex, plain, reads := run(false, WithTurns(false)); len(ex) != 1 || ex[0] != 1 || plain != 0 || reads != 0 {
		t.Fatalf("transfer while a is hot, no turns: exclusive attempts %v, %d plain commits, %d reads; want [1], 0 and 0", ex, plain, reads)
	}
	if ex, plain, reads := run(true, WithTurns(false)); len(ex) != 1 || ex[0] != 1 || plain != 0 || reads != 0 {
		t.Fatalf("read-only transaction while a is hot: exclusive attempts %v, %d plain commits, %d reads; want [1], 0 and 0", ex, plain, reads)
	}
	if err := Txn(ctx, h, func(tx *Tx) error {
		tx.Put("a", []byte("x"))
		return nil
	}, WithExclusiveAfter(0), WithMaxAttempts(2), noSleep); err == nil {
		t.Fatal("with escalation off, a write of hot a committed although every plain commit loses")
	}
	time.Sleep(2 * h.window)
	if ex, plain, _ := run(false); len(ex) != 1 || ex[0] != 3 || plain != 2 {
		t.Fatalf("transfer after the window: exclusive attempts %v, %d plain commits; want [3] after 2", ex, plain)
	}
	items, _ := h.Store.GetMany(ctx, []string{"a", "b"})
	if string(items[0].Value) != "6" || string(items[1].Value) != "14" {
		t.Fatalf("a=%s b=%s after four transfers, want 6 and 14", items[0].Value, items[1].Value)
	}
}

// heldRecorder is hotRivalled recording the keys of each CommitExclusive
// and whether the ops it applied touched a key it was not given.
type heldRecorder struct {
	*hotRivalled
	held   [][]string
	unheld bool
}

func (h *heldRecorder) CommitExclusive(ctx context.Context, keys []string, fn func(cur []cas.Item) ([]cas.Op, error)) ([]cas.Version, error) {
	h.held = append(h.held, slices.Clone(keys))
	return h.hotRivalled.CommitExclusive(ctx, keys, func(cur []cas.Item) ([]cas.Op, error) {
		ops, err := fn(cur)
		for _, op := range ops {
			if !slices.Contains(keys, op.Key) {
				h.unheld = true
			}
		}
		return ops, err
	})
}

// TestTxnHotReadHoldsEveryKey: a transaction that reads its keys one by
// one meets hot a first; the attempt that holds a alone finds that the
// function also touches b, writes nothing, and the next holds both: no
// exclusive commit ever applies an op on a key it does not hold (which,
// on a SQL store, would lock b after a, out of key order).
func TestTxnHotReadHoldsEveryKey(t *testing.T) {
	ctx := context.Background()
	noSleep := withSleep(func(context.Context, time.Duration) error { return nil })
	h := &heldRecorder{hotRivalled: &hotRivalled{rivalled: &rivalled{Store: memcas.New()}, window: 500 * time.Millisecond}}
	for _, k := range []string{"a", "b"} {
		if _, err := h.Store.CompareAndSwap(ctx, k, 0, []byte("10")); err != nil {
			t.Fatal(err)
		}
	}
	// Two conflicts at a make it hot (the rival writes a before every
	// plain commit).
	if err := Txn(ctx, h, moveOneAB, noSleep); err != nil {
		t.Fatal(err)
	}
	h.held = nil
	oneByOne := func(tx *Tx) error {
		av, _, err := tx.Get("a")
		if err != nil {
			return err
		}
		bv, _, err := tx.Get("b")
		if err != nil {
			return err
		}
		a, _ := strconv.Atoi(string(av))
		b, _ := strconv.Atoi(string(bv))
		tx.Put("a", []byte(strconv.Itoa(a-1)))
		tx.Put("b", []byte(strconv.Itoa(b+1)))
		return nil
	}
	if err := Txn(ctx, h, oneByOne, WithTurns(false), noSleep); err != nil {
		t.Fatal(err)
	}
	if len(h.held) != 2 || !slices.Equal(h.held[0], []string{"a"}) || !slices.Equal(h.held[1], []string{"a", "b"}) || h.unheld {
		t.Fatalf("exclusive commits held %v (an op outside them: %v); want [a] then [a b], none outside", h.held, h.unheld)
	}
	items, _ := h.Store.GetMany(ctx, []string{"a", "b"})
	if string(items[0].Value) != "8" || string(items[1].Value) != "12" {
		t.Fatalf("a=%s b=%s after two transfers, want 8 and 12", items[0].Value, items[1].Value)
	}
}

// TestTxnHotMarkDuringCommit: a key that turns hot while a transaction
// commits (here made hot and cold again and again by another goroutine)
// never ends
// the commit's own read of a key the function only wrote: the calls
// succeed, none with the hot read's internal error.
func TestTxnHotMarkDuringCommit(t *testing.T) {
	ctx := context.Background()
	h := &hotPlain{rivalled: &rivalled{Store: memcas.New()}}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
				// Hot (a second mark), then cold again (a first one).
				markHot(h, "b")
				hotSlot("b").Store(&hotMark{store: h, key: "b", at: time.Now()})
			}
		}
	}()
	defer func() { close(stop); <-done }()
	for i := range 2000 {
		err := Txn(ctx, h, func(tx *Tx) error {
			tx.Put("b", []byte(strconv.Itoa(i)))
			return nil
		})
		if err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
}

// hotPlain names a hot-commit window and holds keys as rivalled does, with
// no rival: its plain commits are memcas's.
type hotPlain struct{ *rivalled }

func (h *hotPlain) HotCommitFor() time.Duration { return time.Minute }

func (h *hotPlain) Commit(ctx context.Context, ops []cas.Op) ([]cas.Version, error) {
	return h.Store.Commit(ctx, ops)
}
