package castest

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/occkit/occkit/cas"
)

var commitTests = []test{
	{"PutsAtomically", func(t *testing.T, h *Harness, s cas.Store) {
		c := capability[cas.Committer](t, s)
		a := mustCreate(t, s, "a", "A")
		vs, err := c.Commit(context.Background(), []cas.Op{
			cas.Put("a", a, []byte("A2")),
			cas.Put("b", 0, []byte("B1")),
		})
		if err != nil {
			t.Fatalf("commit: %v", err)
		}
		if len(vs) != 2 || vs[0] <= a || vs[1] == 0 {
			t.Fatalf("commit versions = %v, want two new versions (a above %d)", vs, a)
		}
		wantItem(t, h, s, "a", "A2", vs[0])
		wantItem(t, h, s, "b", "B1", vs[1])
	}},
	{"CheckDeleteAndPut", func(t *testing.T, h *Harness, s cas.Store) {
		c := capability[cas.Committer](t, s)
		a := mustCreate(t, s, "a", "A")
		b := mustCreate(t, s, "b", "B")
		vs, err := c.Commit(context.Background(), []cas.Op{
			cas.Check("a", a),
			cas.Delete("b", b),
			cas.Put("c", 0, []byte("C")),
		})
		if err != nil {
			t.Fatalf("commit: %v", err)
		}
		if len(vs) != 3 || vs[0] != a || vs[1] != 0 || vs[2] == 0 {
			t.Fatalf("commit versions = %v, want [%d 0 new]", vs, a)
		}
		wantItem(t, h, s, "a", "A", a)
		wantAbsent(t, h, s, "b")
		wantItem(t, h, s, "c", "C", vs[2])
	}},
	{"CheckAbsent", func(t *testing.T, h *Harness, s cas.Store) {
		c := capability[cas.Committer](t, s)
		vs, err := c.Commit(context.Background(), []cas.Op{cas.Check("none", 0), cas.Put("x", 0, []byte("X"))})
		if err != nil {
			t.Fatalf("commit checking an absent key: %v", err)
		}
		wantItem(t, h, s, "x", "X", vs[1])
		wantAbsent(t, h, s, "none")
	}},
	{"FailedCheckAppliesNothing", func(t *testing.T, h *Harness, s cas.Store) {
		c := capability[cas.Committer](t, s)
		a := mustCreate(t, s, "a", "A")
		b := mustCreate(t, s, "b", "B")
		b2 := mustSwap(t, s, "b", b, "B2")
		_, err := c.Commit(context.Background(), []cas.Op{
			cas.Put("a", a, []byte("A2")),
			cas.Check("b", b),
			cas.Put("c", 0, []byte("C")),
		})
		wantConflict(t, h, err, "b", b, b2, "B2")
		wantItem(t, h, s, "a", "A", a)
		wantItem(t, h, s, "b", "B2", b2)
		wantAbsent(t, h, s, "c")
	}},
	{"FailedPutAppliesNothing", func(t *testing.T, h *Harness, s cas.Store) {
		c := capability[cas.Committer](t, s)
		a := mustCreate(t, s, "a", "A")
		b := mustCreate(t, s, "b", "B")
		_, err := c.Commit(context.Background(), []cas.Op{
			cas.Delete("a", a),
			cas.Put("b", 0, []byte("B2")), // b exists: conflict
		})
		wantConflict(t, h, err, "b", 0, b, "B")
		wantItem(t, h, s, "a", "A", a)
		wantItem(t, h, s, "b", "B", b)
	}},
	// Writes of live keys only (a transfer's shape), one of them stale:
	// nothing applies, and the conflict names the stale key with its
	// current item, not a key the commit would have written.
	{"StaleWriteAppliesNothing", func(t *testing.T, h *Harness, s cas.Store) {
		c := capability[cas.Committer](t, s)
		a := mustCreate(t, s, "a", "A")
		b1 := mustCreate(t, s, "b", "B")
		b2 := mustSwap(t, s, "b", b1, "B2")
		d := mustCreate(t, s, "d", "D")
		_, err := c.Commit(context.Background(), []cas.Op{
			cas.Put("a", a, []byte("A2")),
			cas.Delete("d", d),
			cas.Put("b", b1, []byte("B3")), // stale
		})
		wantConflict(t, h, err, "b", b1, b2, "B2")
		wantItem(t, h, s, "a", "A", a)
		wantItem(t, h, s, "b", "B2", b2)
		wantItem(t, h, s, "d", "D", d)
		// The stale key first in ops order, last in key order.
		_, err = c.Commit(context.Background(), []cas.Op{
			cas.Put("b", b1, []byte("B3")),
			cas.Put("a", a, []byte("A2")),
		})
		wantConflict(t, h, err, "b", b1, b2, "B2")
		wantItem(t, h, s, "a", "A", a)
	}},
	// Checks and writes of live keys only (the rows a transaction read):
	// the checked keys keep their versions, and a stale check or a key
	// deleted since it was read fails the whole commit.
	{"ChecksAndWritesOfLiveKeys", func(t *testing.T, h *Harness, s cas.Store) {
		c := capability[cas.Committer](t, s)
		ctx := context.Background()
		a := mustCreate(t, s, "a", "A")
		b := mustCreate(t, s, "b", "B")
		vs, err := c.Commit(ctx, []cas.Op{cas.Check("a", a), cas.Put("b", b, []byte("B2"))})
		if err != nil {
			t.Fatalf("commit: %v", err)
		}
		if len(vs) != 2 || vs[0] != a || vs[1] <= b {
			t.Fatalf("commit versions = %v, want [%d, above %d]", vs, a, b)
		}
		b2 := vs[1]
		wantItem(t, h, s, "a", "A", a)
		wantItem(t, h, s, "b", "B2", b2)
		// Writes only (a transfer's shape).
		if vs, err = c.Commit(ctx, []cas.Op{cas.Put("b", b2, []byte("B3")), cas.Put("a", a, []byte("A1"))}); err != nil || len(vs) != 2 || vs[0] <= b2 || vs[1] <= a {
			t.Fatalf("commit of writes = %v, %v, want two new versions", vs, err)
		}
		a, b2 = vs[1], vs[0]
		wantItem(t, h, s, "a", "A1", a)
		wantItem(t, h, s, "b", "B3", b2)
		if vs, err = c.Commit(ctx, []cas.Op{cas.Check("b", b2), cas.Check("a", a)}); err != nil || len(vs) != 2 || vs[0] != b2 || vs[1] != a {
			t.Fatalf("commit of checks = %v, %v, want [%d %d]", vs, err, b2, a)
		}
		// A stale check, last in ops order and in key order.
		_, err = c.Commit(ctx, []cas.Op{cas.Put("a", a, []byte("A2")), cas.Check("b", b)})
		wantConflict(t, h, err, "b", b, b2, "B3")
		wantItem(t, h, s, "a", "A1", a)
		// A key deleted since it was read: absent now.
		if err := s.CompareAndDelete(ctx, "a", a); err != nil {
			t.Fatal(err)
		}
		_, err = c.Commit(ctx, []cas.Op{cas.Put("b", b2, []byte("B4")), cas.Put("a", a, []byte("A3"))})
		wantConflict(t, h, err, "a", a, 0, "")
		wantItem(t, h, s, "b", "B3", b2)
		wantAbsent(t, h, s, "a")
		// A key that never existed, at a version made up, beside a live
		// key's write.
		_, err = c.Commit(ctx, []cas.Op{cas.Put("b", b2, []byte("B5")), cas.Put("never", 7, []byte("N"))})
		wantConflict(t, h, err, "never", 7, 0, "")
		wantItem(t, h, s, "b", "B3", b2)
		wantAbsent(t, h, s, "never")
	}},
	{"FailedDeleteAppliesNothing", func(t *testing.T, h *Harness, s cas.Store) {
		c := capability[cas.Committer](t, s)
		_, err := c.Commit(context.Background(), []cas.Op{
			cas.Put("a", 0, []byte("A")),
			cas.Delete("gone", 5),
		})
		wantConflict(t, h, err, "gone", 5, 0, "")
		wantAbsent(t, h, s, "a")
	}},
	{"NoABAAcrossCommits", func(t *testing.T, h *Harness, s cas.Store) {
		c := capability[cas.Committer](t, s)
		ctx := context.Background()
		vs, err := c.Commit(ctx, []cas.Op{cas.Put("a", 0, []byte("1")), cas.Put("b", 0, []byte("1"))})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Commit(ctx, []cas.Op{cas.Delete("a", vs[0]), cas.Delete("b", vs[1])}); err != nil {
			t.Fatal(err)
		}
		vs2, err := c.Commit(ctx, []cas.Op{cas.Put("a", 0, []byte("1")), cas.Put("b", 0, []byte("1"))})
		if err != nil {
			t.Fatal(err)
		}
		if vs2[0] <= vs[0] || vs2[1] <= vs[1] {
			t.Fatalf("re-created keys got versions %v after %v: versions reused", vs2, vs)
		}
	}},
	{"InvalidCommits", func(t *testing.T, h *Harness, s cas.Store) {
		c := capability[cas.Committer](t, s)
		ctx := context.Background()
		tooMany := make([]cas.Op, h.Limits.MaxCommitOps+1)
		for i := range tooMany {
			tooMany[i] = cas.Put(fmt.Sprintf("k%d", i), 0, []byte("v"))
		}
		cases := []struct {
			name string
			ops  []cas.Op
			want error
		}{
			{"Empty", nil, cas.ErrInvalidCommit},
			{"DuplicateKey", []cas.Op{cas.Put("k", 0, []byte("1")), cas.Check("k", 0)}, cas.ErrInvalidCommit},
			{"UnknownKind", []cas.Op{{Kind: 99, Key: "k"}}, cas.ErrInvalidCommit},
			{"DeleteVersionZero", []cas.Op{cas.Put("k", 0, []byte("1")), cas.Delete("j", 0)}, cas.ErrInvalidVersion},
			{"TooManyOps", tooMany, cas.ErrTooLarge},
			{"ValueTooLarge", []cas.Op{cas.Put("k", 0, make([]byte, h.Limits.MaxValueBytes+1))}, cas.ErrTooLarge},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				if _, err := c.Commit(ctx, tc.ops); !errors.Is(err, tc.want) {
					t.Fatalf("commit: %v, want %v", err, tc.want)
				}
				wantAbsent(t, h, s, "k")
				wantAbsent(t, h, s, "k0")
			})
		}
	}},
	{"LargestCommit", func(t *testing.T, h *Harness, s cas.Store) {
		c := capability[cas.Committer](t, s)
		ops := make([]cas.Op, h.Limits.MaxCommitOps)
		for i := range ops {
			ops[i] = cas.Put(fmt.Sprintf("k%03d", i), 0, []byte("v"))
		}
		vs, err := c.Commit(context.Background(), ops)
		if err != nil {
			t.Fatalf("commit of %d ops (the limit): %v", len(ops), err)
		}
		for i := range ops {
			wantItem(t, h, s, ops[i].Key, "v", vs[i])
		}
	}},
}
