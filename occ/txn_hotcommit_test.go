package occ

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/occkit/occkit/adapters/memcas"
	"github.com/occkit/occkit/cas"
)

// hotRivalled is rivalled naming a hot-commit window (cas.HotCommitHint),
// and counting its plain commits.
type hotRivalled struct {
	*rivalled
	window time.Duration
	plain  atomic.Int64
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
// the key do so at their first attempt, without an optimistic commit,
// until the window has passed; a read-only transaction never holds; WithExclusiveAfter(0)
// turns it off.
func TestTxnHotCommit(t *testing.T) {
	ctx := context.Background()
	noSleep := withSleep(func(context.Context, time.Duration) error { return nil })
	h := &hotRivalled{rivalled: &rivalled{Store: memcas.New()}, window: 500 * time.Millisecond} // far above the calls' time, even under -race
	for _, k := range []string{"a", "b", "c"} {
		if _, err := h.Store.CompareAndSwap(ctx, k, 0, []byte("10")); err != nil {
			t.Fatal(err)
		}
	}
	// run runs a transfer from a to b (read-only: a read of c) and
	// returns which attempts were exclusive and how many plain commits it
	// sent.
	run := func(readOnly bool, opts ...Option) ([]int, int64) {
		t.Helper()
		var exclusiveAt []int
		obs := WithObserver(ObserverFuncs{Attempt: func(_ context.Context, a Attempt) {
			if a.Exclusive {
				exclusiveAt = append(exclusiveAt, a.Number)
			}
		}})
		plain := h.plain.Load()
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
		return exclusiveAt, h.plain.Load() - plain
	}
	if ex, plain := run(false); len(ex) != 1 || ex[0] != 3 || plain != 2 {
		t.Fatalf("first transfer: exclusive attempts %v, %d plain commits; want [3] after 2 (two conflicts made a hot)", ex, plain)
	}
	if ex, plain := run(false); len(ex) != 1 || ex[0] != 1 || plain != 0 {
		t.Fatalf("transfer while a is hot: exclusive attempts %v, %d plain commits; want [1] and 0", ex, plain)
	}
	if ex, _ := run(true); len(ex) != 0 {
		t.Fatalf("read-only transaction while a is hot: exclusive attempts %v, want none", ex)
	}
	if err := Txn(ctx, h, func(tx *Tx) error {
		tx.Put("a", []byte("x"))
		return nil
	}, WithExclusiveAfter(0), WithMaxAttempts(2), noSleep); err == nil {
		t.Fatal("with escalation off, a write of hot a committed although every plain commit loses")
	}
	time.Sleep(2 * h.window)
	if ex, plain := run(false); len(ex) != 1 || ex[0] != 3 || plain != 2 {
		t.Fatalf("transfer after the window: exclusive attempts %v, %d plain commits; want [3] after 2", ex, plain)
	}
	items, _ := h.Store.GetMany(ctx, []string{"a", "b"})
	if string(items[0].Value) != "7" || string(items[1].Value) != "13" {
		t.Fatalf("a=%s b=%s after three transfers, want 7 and 13", items[0].Value, items[1].Value)
	}
}
