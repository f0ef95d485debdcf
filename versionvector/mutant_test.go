package versionvector

import (
	"testing"
)

// The laws tested in vector_test.go must be able to fail: each broken merge
// and compare below must be caught by them on a few hundred generated
// vectors, while the real ones pass the same inputs.

const mutantExamples = 300

func TestMergeLawsCatchBrokenMerges(t *testing.T) {
	mutants := map[string]mergeFunc{
		"minimum instead of maximum": func(a, b Vector) Vector {
			out := Vector{}
			for id := range Merge(a, b) {
				out[id] = min(a[id], b[id])
			}
			return out
		},
		"left side wins": func(a, b Vector) Vector {
			out := b.Clone()
			for id, n := range a {
				out[id] = n
			}
			return out
		},
		"forgets replicas only the right side knows": func(a, b Vector) Vector {
			out := a.Clone()
			for id, n := range b {
				if _, ok := a[id]; ok && n > out[id] {
					out[id] = n
				}
			}
			return out
		},
		"sum instead of maximum": func(a, b Vector) Vector {
			out := a.Clone()
			for id, n := range b {
				out[id] += n
			}
			return out
		},
		"modifies its left argument": func(a, b Vector) Vector {
			for id, n := range b {
				if n > a[id] {
					a[id] = n
				}
			}
			return a.Clone()
		},
	}
	if err := firstLawViolation(Merge); err != nil {
		t.Fatalf("the real Merge fails the laws: %v", err)
	}
	for name, m := range mutants {
		t.Run(name, func(t *testing.T) {
			err := firstLawViolation(m)
			if err == nil {
				t.Fatalf("the merge laws did not catch %q", name)
			}
			t.Logf("caught: %v", err)
		})
	}
}

func firstLawViolation(m mergeFunc) error {
	g := genVector()
	for i := range mutantExamples {
		a, b, c := g.Example(3*i), g.Example(3*i+1), g.Example(3*i+2)
		if err := mergeLaws(m, a, b, c); err != nil {
			return err
		}
	}
	return nil
}

func TestCompareLawsCatchBrokenCompares(t *testing.T) {
	mutants := map[string]compareFunc{
		"ignores replicas only the right side knows": func(a, b Vector) Ordering {
			trimmed := Vector{}
			for id, n := range b {
				if _, ok := a[id]; ok {
					trimmed[id] = n
				}
			}
			return Compare(a, trimmed)
		},
		"concurrent reported as before": func(a, b Vector) Ordering {
			if o := Compare(a, b); o != Concurrent {
				return o
			}
			return Before
		},
		"explicit zero counts as an event": func(a, b Vector) Ordering {
			if len(a) == len(b) {
				return Compare(a, b)
			}
			if len(a) < len(b) {
				if o := Compare(a, b); o == Equal {
					return Before
				}
			}
			return Compare(a, b)
		},
	}
	for name, c := range mutants {
		t.Run(name, func(t *testing.T) {
			g := genVector()
			for i := range mutantExamples {
				if err := compareLaws(c, g.Example(2*i), g.Example(2*i+1)); err != nil {
					t.Logf("caught: %v", err)
					return
				}
			}
			t.Fatalf("the compare laws did not catch %q", name)
		})
	}
	g := genVector()
	for i := range mutantExamples {
		if err := compareLaws(Compare, g.Example(2*i), g.Example(2*i+1)); err != nil {
			t.Fatalf("the real Compare fails the laws: %v", err)
		}
	}
}
