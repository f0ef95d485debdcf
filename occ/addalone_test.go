package occ

import (
	"context"
	"hash/maphash"
	"testing"

	"github.com/occkit/occkit/adapters/memcas"
	"github.com/occkit/occkit/cas"
)

// TestAddAloneTakesNoLine: a delta of a key that no other delta is in
// flight for goes alone: it makes no line (a line is a map entry made and
// dropped, and allocations), so it costs what the store's Add and the
// retry loop do (WithTurns(false)).
func TestAddAloneTakesNoLine(t *testing.T) {
	ctx := context.Background()
	s := memcas.New()
	add := func(opts ...Option) float64 {
		return testing.AllocsPerRun(200, func() {
			if _, _, err := Add(ctx, s, "k", 1, cas.AtLeast(0), opts...); err != nil {
				t.Fatal(err)
			}
		})
	}
	alone, direct := add(), add(WithTurns(false))
	if alone > direct {
		t.Fatalf("a delta alone: %.0f allocations, %.0f without turns; want no more", alone, direct)
	}
	if n := deltasInFlight[maphash.String(lineSeed, "k")%deltaSlots].n.Load(); n != 0 {
		t.Fatalf("k's slot counts %d deltas in flight after they all returned", n)
	}
}
