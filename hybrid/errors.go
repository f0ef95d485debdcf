package hybrid

import "errors"

var (
	// ErrLeaseLost reports a lease lost before its holder released it: it
	// expired, was revoked, or its session or connection ended. Every
	// Locker's lost lease has a Context whose cause matches it
	// (context.Cause), adapter errors wrap it, and Update retries an
	// attempt whose lease was lost with a fresh lease (unless the locker
	// was closed: ErrLockerClosed).
	ErrLeaseLost = errors.New("hybrid: lease lost")

	// ErrLeaseReleased is the cause of a lease's Context after its holder
	// released it.
	ErrLeaseReleased = errors.New("hybrid: lease released")

	// ErrLeaseExpiring reports that less than the safety margin of the
	// lease remained when the write was about to start; the write was not
	// sent, and the update is retried with a fresh lease.
	ErrLeaseExpiring = errors.New("hybrid: lease about to expire")

	// ErrLockerClosed reports a Locker that was closed: its Acquire fails,
	// and the leases its Close ended are lost. A locker's errors for it
	// match ErrLeaseLost too (a lease its Close ended is lost like any
	// other), but Update and Txn do not retry them: a closed locker grants
	// no fresh lease, so the call ends at once with the error.
	ErrLockerClosed = errors.New("hybrid: locker closed")

	// ErrNotFenced reports a store that cannot check fencing tokens: a
	// lease alone does not make a write safe.
	ErrNotFenced = errors.New("hybrid: store does not check fencing tokens")
)
