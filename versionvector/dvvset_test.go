package versionvector

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/occkit/occkit/cas"
	"pgregory.net/rapid"
)

// TestSetScenarios walks through the cases the DVVSet exists for, with the
// exact siblings expected after each step.
func TestSetScenarios(t *testing.T) {
	type step struct {
		// op is "put r ctx v" (ctx: "-" for none, or the name of a saved
		// read), "read name" (save the current join as name), or
		// "discard name".
		op   string
		want []string // siblings after the step, in Values order
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{"read then write replaces", []step{
			{"put a - v1", []string{"v1"}},
			{"read r1", []string{"v1"}},
			{"put a r1 v2", []string{"v2"}},
		}},
		{"blind writes are siblings", []step{
			{"put a - v1", []string{"v1"}},
			{"put a - v2", []string{"v1", "v2"}},
			{"put b - v3", []string{"v1", "v2", "v3"}},
			{"read r", []string{"v1", "v2", "v3"}},
			{"put b r v4", []string{"v4"}},
		}},
		{"two clients read the same, write concurrently", []step{
			{"put a - v1", []string{"v1"}},
			{"read r", []string{"v1"}},
			{"put a r x", []string{"x"}},
			{"put a r y", []string{"x", "y"}},
		}},
		{"repeated stale context adds only its own writes", []step{
			{"put a - v1", []string{"v1"}},
			{"read old", []string{"v1"}},
			{"put a - v2", []string{"v1", "v2"}},
			{"read fresh", []string{"v1", "v2"}},
			{"put a fresh v3", []string{"v3"}},
			// A client still holding "old" has seen v1 only: its
			// writes are concurrent with v3 and with each other, but
			// never bring v1 or v2 back.
			{"put a old s1", []string{"v3", "s1"}},
			{"put a old s2", []string{"v3", "s1", "s2"}},
			{"put a old s3", []string{"v3", "s1", "s2", "s3"}},
			{"read all", []string{"v3", "s1", "s2", "s3"}},
			{"put a all done", []string{"done"}},
			{"put a old late", []string{"done", "late"}},
		}},
		{"context from another replica", []step{
			{"put a - v1", []string{"v1"}},
			{"read r", []string{"v1"}},
			{"put b r v2", []string{"v2"}},
			{"put b - v3", []string{"v2", "v3"}},
		}},
		{"discard without writing", []step{
			{"put a - v1", []string{"v1"}},
			{"put b - v2", []string{"v1", "v2"}},
			{"read r", []string{"v1", "v2"}},
			{"put a - v3", []string{"v1", "v3", "v2"}},
			{"discard r", []string{"v3"}},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var s Set[string]
			reads := map[string]Vector{}
			for _, st := range tt.steps {
				f := strings.Fields(st.op)
				switch f[0] {
				case "put":
					s = s.Update(reads[f[2]], f[1], f[3])
				case "read":
					reads[f[1]] = s.Join()
				case "discard":
					s = s.Discard(reads[f[1]])
				}
				if got := s.Values(); !slices.Equal(got, st.want) {
					t.Fatalf("after %q: siblings %v, want %v (set %v)", st.op, got, st.want, s)
				}
				if s.Len() != len(st.want) {
					t.Fatalf("after %q: Len() = %d, want %d", st.op, s.Len(), len(st.want))
				}
			}
		})
	}
}

func TestSetSyncScenarios(t *testing.T) {
	// Region eu and region us both start from v1.
	eu := NewSet("eu", "v1")
	us := eu
	r := eu.Join()
	eu = eu.Update(r, "eu", "eu-edit")
	us = us.Update(r, "us", "us-edit")
	m := eu.Sync(us)
	if got, want := m.Values(), []string{"eu-edit", "us-edit"}; !slices.Equal(got, want) {
		t.Fatalf("synced siblings %v, want %v", got, want)
	}
	if !sameSet(m, us.Sync(eu)) {
		t.Fatalf("sync not commutative: %v vs %v", m, us.Sync(eu))
	}
	// eu resolves after seeing both; us has not heard yet and writes again
	// on top of its own value only.
	eu = m.Update(m.Join(), "eu", "merged")
	us = us.Update(us.Join(), "us", "us-edit-2")
	m = eu.Sync(us)
	if got, want := m.Values(), []string{"merged", "us-edit-2"}; !slices.Equal(got, want) {
		t.Fatalf("after second round: siblings %v, want %v (set %v)", got, want, m)
	}
	// Syncing a stale copy changes nothing.
	if !sameSet(m.Sync(NewSet("eu", "v1")), m) {
		t.Fatalf("syncing an old copy changed the set")
	}
}

func TestSetUpdateOverflowPanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("Update with a context at 2⁶⁴−1 did not panic")
		}
	}()
	Set[string]{}.Update(Vector{"a": math.MaxUint64}, "a", "x")
}

func TestSetPrune(t *testing.T) {
	s := NewSet("old", "v1")
	s = s.Update(s.Join(), "a", "v2")    // supersedes old's value
	s = s.Update(nil, "gone", "sibling") // gone still holds a sibling
	p := s.Prune("old", "gone")
	if got, want := p.Join(), (Vector{"a": 1, "gone": 1}); !maps.Equal(got, want) {
		t.Errorf("pruned join %v, want %v", got, want)
	}
	if got, want := p.Values(), []string{"v2", "sibling"}; !slices.Equal(got, want) {
		t.Errorf("pruned siblings %v, want %v", got, want)
	}
	if len(s.Join()) != 3 {
		t.Error("Prune modified its receiver")
	}
}

func TestSetString(t *testing.T) {
	s := NewSet("eu", "x").Update(nil, "eu", "y").Update(nil, "us", "z")
	s = s.Discard(Vector{"eu": 1})
	if got, want := s.String(), "{eu:2[2] us:1[1]}"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
}

// sameSet is structural equality, values included.
func sameSet(a, b Set[string]) bool {
	return slices.EqualFunc(a.entries, b.entries, func(x, y entry[string]) bool {
		return x.id == y.id && x.n == y.n && slices.Equal(x.vals, y.vals)
	})
}

// --- The model: the DVVSet must keep exactly the writes that no known
// write has seen. ---

var modelReplicas = []string{"a", "b", "c"}

// dvvModel runs random writes, reads, discards and syncs over three replicas
// (each a Set, as three stores would hold one key) and checks after every
// step that each replica's siblings are exactly the live writes of a
// straightforward model that tracks, for every write, the writes its writer
// had seen:
//
//	known(r) = writes replica r has heard of (written there, synced in, or
//	           seen by a context used there)
//	dead(r)  = writes some context used at r (or synced into r) had seen
//	live(r)  = known(r) − dead(r)
type dvvModel struct {
	sets  []Set[string]
	known []map[string]bool
	dead  []map[string]bool
	dot   map[string]struct {
		id string
		n  uint64
	}
	reads []modelRead
	next  int
}

type modelRead struct {
	cc   Vector
	seen map[string]bool
}

func newDVVModel() *dvvModel {
	m := &dvvModel{dot: map[string]struct {
		id string
		n  uint64
	}{}}
	for range modelReplicas {
		m.sets = append(m.sets, Set[string]{})
		m.known = append(m.known, map[string]bool{})
		m.dead = append(m.dead, map[string]bool{})
	}
	// The zero context: a reader that has seen nothing.
	m.reads = append(m.reads, modelRead{seen: map[string]bool{}})
	return m
}

func (m *dvvModel) drawRead(t *rapid.T) modelRead {
	return m.reads[rapid.IntRange(0, len(m.reads)-1).Draw(t, "read")]
}

func (m *dvvModel) Write(t *rapid.T) {
	i := rapid.IntRange(0, len(modelReplicas)-1).Draw(t, "replica")
	rd := m.drawRead(t)
	w := fmt.Sprintf("w%d", m.next)
	m.next++
	// The model's own counter: one more than the largest dot of this
	// replica known here or in the context.
	id := modelReplicas[i]
	var n uint64
	for x := range m.known[i] {
		if d := m.dot[x]; d.id == id {
			n = max(n, d.n)
		}
	}
	for x := range rd.seen {
		if d := m.dot[x]; d.id == id {
			n = max(n, d.n)
		}
	}
	m.dot[w] = struct {
		id string
		n  uint64
	}{id, n + 1}
	before := m.sets[i]
	m.sets[i] = m.sets[i].Update(rd.cc, id, w)
	for x := range rd.seen {
		m.known[i][x] = true
		m.dead[i][x] = true
	}
	m.known[i][w] = true
	// Update dominates its context and what the replica knew.
	j := m.sets[i].Join()
	if Compare(j, rd.cc) != After || Compare(j, before.Join()) != After {
		t.Fatalf("join %v after a write with context %v on %v does not dominate both", j, rd.cc, before)
	}
}

func (m *dvvModel) Read(t *rapid.T) {
	i := rapid.IntRange(0, len(modelReplicas)-1).Draw(t, "replica")
	m.reads = append(m.reads, modelRead{cc: m.sets[i].Join(), seen: maps.Clone(m.known[i])})
}

func (m *dvvModel) Discard(t *rapid.T) {
	i := rapid.IntRange(0, len(modelReplicas)-1).Draw(t, "replica")
	rd := m.drawRead(t)
	m.sets[i] = m.sets[i].Discard(rd.cc)
	for x := range rd.seen {
		m.known[i][x] = true
		m.dead[i][x] = true
	}
}

func (m *dvvModel) Sync(t *rapid.T) {
	i := rapid.IntRange(0, len(modelReplicas)-1).Draw(t, "from")
	j := rapid.IntRange(0, len(modelReplicas)-1).Draw(t, "to")
	a, b := m.sets[i], m.sets[j]
	ab, ba := a.Sync(b), b.Sync(a)
	if !sameSet(ab, ba) {
		t.Fatalf("sync not commutative: %v ⊔ %v = %v, reversed %v", a, b, ab, ba)
	}
	if !sameSet(ab.Sync(a), ab) || !sameSet(ab.Sync(b), ab) {
		t.Fatalf("sync not idempotent: %v ⊔ %v = %v", a, b, ab)
	}
	if !maps.Equal(ab.Join(), Merge(a.Join(), b.Join())) {
		t.Fatalf("join of sync %v is not the merge of joins %v, %v", ab.Join(), a.Join(), b.Join())
	}
	if k := rapid.IntRange(0, len(modelReplicas)-1).Draw(t, "third"); k != i && k != j {
		c := m.sets[k]
		if l, r := ab.Sync(c), a.Sync(b.Sync(c)); !sameSet(l, r) {
			t.Fatalf("sync not associative: (%v ⊔ %v) ⊔ %v = %v, a ⊔ (b ⊔ c) = %v", a, b, c, l, r)
		}
	}
	m.sets[i], m.sets[j] = ab, ab
	for _, k := range []int{i, j} {
		maps.Copy(m.known[k], m.known[i])
		maps.Copy(m.known[k], m.known[j])
		maps.Copy(m.dead[k], m.dead[i])
		maps.Copy(m.dead[k], m.dead[j])
	}
}

func (m *dvvModel) Check(t *rapid.T) {
	for i, s := range m.sets {
		var want []string
		for w := range m.known[i] {
			if !m.dead[i][w] {
				want = append(want, w)
			}
		}
		slices.SortFunc(want, func(x, y string) int {
			dx, dy := m.dot[x], m.dot[y]
			if c := strings.Compare(dx.id, dy.id); c != 0 {
				return c
			}
			return int(dx.n) - int(dy.n)
		})
		if got := s.Values(); !slices.Equal(got, want) {
			t.Fatalf("replica %s: siblings %v, want exactly the unseen writes %v (set %v)", modelReplicas[i], got, want, s)
		}
		wantJoin := Vector{}
		for w := range m.known[i] {
			d := m.dot[w]
			wantJoin[d.id] = max(wantJoin[d.id], d.n)
		}
		if got := s.Join(); !maps.Equal(got, wantJoin) {
			t.Fatalf("replica %s: join %v, want %v", modelReplicas[i], got, wantJoin)
		}
		checkInvariants(t, s)
		// The stored form decodes to the same set.
		c := SetCodec(cas.JSON[string]())
		b, err := c.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		var back Set[string]
		if err := c.Unmarshal(b, &back); err != nil || !sameSet(back, s) {
			t.Fatalf("set %v encodes to %x, decodes to %v, %v", s, b, back, err)
		}
	}
}

// checkInvariants checks what every Set must satisfy: IDs sorted and
// unique, counters ≥ 1, no more values than dots.
func checkInvariants[T any](t interface{ Fatalf(string, ...any) }, s Set[T]) {
	for k, e := range s.entries {
		if k > 0 && s.entries[k-1].id >= e.id {
			t.Fatalf("entries not sorted: %q then %q", s.entries[k-1].id, e.id)
		}
		if e.n == 0 || uint64(len(e.vals)) > e.n {
			t.Fatalf("entry %q: counter %d with %d values", e.id, e.n, len(e.vals))
		}
	}
}

func TestSetModel(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		t.Repeat(rapid.StateMachineActions(newDVVModel()))
	})
}

// TestSetUpdateDominatesContext checks Update alone on arbitrary sets and
// contexts: its join descends from both, the new value is a sibling, every
// value the context covers is gone and every other one stays.
func TestSetUpdateDominatesContext(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		var s Set[string]
		for i := range rapid.IntRange(0, 6).Draw(t, "writes") {
			cc := genVector().Draw(t, "history context")
			s = s.Update(cc, rapid.SampledFrom(lawIDs).Draw(t, "writer"), fmt.Sprint("old", i))
		}
		cc := genVector().Draw(t, "context")
		id := rapid.SampledFrom(lawIDs).Draw(t, "replica")
		u := s.Update(cc, id, "new")
		checkInvariants(t, u)
		j := u.Join()
		if Compare(j, cc) != After || Compare(j, s.Join()) != After {
			t.Fatalf("join %v does not dominate context %v and old join %v", j, cc, s.Join())
		}
		if !slices.Contains(u.Values(), "new") {
			t.Fatalf("new value missing from %v", u.Values())
		}
		// Each old sibling survives exactly when its dot is beyond cc.
		for _, e := range s.entries {
			for k, v := range e.vals {
				dot := e.low() + uint64(k) + 1
				if survived := slices.Contains(u.Values(), v); survived != (dot > cc[e.id]) {
					t.Fatalf("sibling %v with dot (%s,%d), context %v: survived=%v", v, e.id, dot, cc, survived)
				}
			}
		}
	})
}
