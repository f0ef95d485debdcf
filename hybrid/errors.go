package hybrid

import "errors"

var (
	// ErrLeaseLost reports a lease lost before its holder released it: it
	// expired, was revoked, or its session or connection ended. Every
	// Locker's lost lease has a Context whose cause matches it
	// (context.Cause), adapter errors wrap it, and Update retries an
	// attempt whose lease was lost with a fresh lease.
	ErrLeaseLost = errors.New("hybrid: lease lost")

	// ErrLeaseReleased is the cause of a lease's Context after its holder
	// released it.
	ErrLeaseReleased = errors.New("hybrid: lease released")

	// ErrLeaseExpiring reports that less than the safety margin of the
	// lease remained when the write was about to start; the write was not
	// sent, and the update is retried with a fresh lease.
	ErrLeaseExpiring = errors.New("hybrid: lease about to expire")

	// ErrNotFenced reports a store that cannot check fencing tokens: a
	// lease alone does not make a write safe.
	ErrNotFenced = errors.New("hybrid: store does not check fencing tokens")
)
