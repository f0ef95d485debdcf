// Package leases has what the adapters' lockers share: the set of leases
// a Locker granted and must end when it is closed (Set), and the periodic
// check of a lock that lives in a database session (Every).
package leases

import (
	"context"
	"sync"
)

// Set holds the leases a Locker granted that have not ended, so that its
// Close can end them, and says when the Locker is closed. Make one with
// NewSet. A Set is safe for concurrent use.
type Set[L comparable] struct {
	closing context.Context
	close   context.CancelCauseFunc

	mu   sync.Mutex
	held map[L]struct{} // nil once closed
}

// NewSet returns an empty, open set.
func NewSet[L comparable]() *Set[L] {
	s := &Set[L]{held: map[L]struct{}{}}
	s.closing, s.close = context.WithCancelCause(context.Background())
	return s
}

// Add records a granted lease. Once the set is closed it records nothing
// and returns false: the caller gives the grant back and fails.
func (s *Set[L]) Add(l L) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.held == nil {
		return false
	}
	s.held[l] = struct{}{}
	return true
}

// Remove forgets a lease that ended (released, lost, run out).
func (s *Set[L]) Remove(l L) {
	s.mu.Lock()
	delete(s.held, l)
	s.mu.Unlock()
}

// Closing returns a context that Close cancels, with its cause: an
// Acquire that waits ends its wait with it.
func (s *Set[L]) Closing() context.Context { return s.closing }

// Close closes the set and returns the leases it held, for the caller to
// end; closing again returns none.
func (s *Set[L]) Close(cause error) []L {
	s.mu.Lock()
	held := s.held
	s.held = nil
	s.mu.Unlock()
	s.close(cause)
	out := make([]L, 0, len(held))
	for l := range held {
		out = append(out, l)
	}
	return out
}
