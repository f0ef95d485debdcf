package occ

import (
	"fmt"
	"math"
	"sync/atomic"
)

// Budget caps retries to a fraction of first attempts across every call
// that shares it, as gRPC's retry throttling and Envoy's retry budgets do:
// when many writers collide on the same keys, retries cannot multiply the
// load on the backend.
//
// Every call's first attempt deposits ratio tokens, up to a reserve of
// burst; every retry withdraws one token, and a retry that finds less than
// one is refused (the call gives up with ErrBudgetExhausted). Over any run,
// retries ≤ burst + ratio × first attempts. A Budget is safe for concurrent
// use; its zero value is not usable, call NewBudget.
type Budget struct {
	ratio    int64 // micro-tokens deposited per first attempt
	capacity int64 // micro-tokens
	tokens   atomic.Int64
	rejected atomic.Int64
	granted  atomic.Int64
}

const (
	microTokens = 1_000_000
	// maxBurst keeps capacity + one deposit far below math.MaxInt64.
	maxBurst = 1_000_000_000_000
)

// NewBudget returns a full budget allowing ratio retries per first attempt
// (0.1 allows retries up to 10% of calls) with a reserve of burst retries.
// ratio must be in [0, 1000] and burst ≥ 1; a burst above 10¹² is taken as
// 10¹².
func NewBudget(ratio float64, burst int) (*Budget, error) {
	if math.IsNaN(ratio) || ratio < 0 || ratio > 1000 {
		return nil, fmt.Errorf("occ: budget ratio %v out of range [0, 1000]", ratio)
	}
	if burst < 1 {
		return nil, fmt.Errorf("occ: budget burst %d must be at least 1", burst)
	}
	b := &Budget{ratio: int64(ratio * microTokens), capacity: int64(min(burst, maxBurst)) * microTokens}
	b.tokens.Store(b.capacity)
	return b, nil
}

func (b *Budget) deposit() {
	if b.ratio == 0 {
		return
	}
	for {
		t := b.tokens.Load()
		if t >= b.capacity {
			return
		}
		if b.tokens.CompareAndSwap(t, min(t+b.ratio, b.capacity)) {
			return
		}
	}
}

func (b *Budget) withdraw() bool {
	for {
		t := b.tokens.Load()
		if t < microTokens {
			b.rejected.Add(1)
			return false
		}
		if b.tokens.CompareAndSwap(t, t-microTokens) {
			b.granted.Add(1)
			return true
		}
	}
}

// BudgetStats are a Budget's counters since it was made.
type BudgetStats struct {
	// Granted and Rejected count retries the budget allowed and refused.
	Granted, Rejected int64
	// Available is the number of retries the budget would allow now.
	Available float64
}

// Stats returns the budget's counters.
func (b *Budget) Stats() BudgetStats {
	return BudgetStats{
		Granted:   b.granted.Load(),
		Rejected:  b.rejected.Load(),
		Available: float64(b.tokens.Load()) / microTokens,
	}
}
