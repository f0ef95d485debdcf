package hybrid

import "errors"

var (
	// ErrLeaseLost reports that the lease protecting an update was lost
	// (expired or revoked) before the write; the update is retried with a
	// fresh lease.
	ErrLeaseLost = errors.New("hybrid: lease lost")

	// ErrLeaseExpiring reports that less than the safety margin of the
	// lease remained when the write was about to start; the write was not
	// sent, and the update is retried with a fresh lease.
	ErrLeaseExpiring = errors.New("hybrid: lease about to expire")

	// ErrNotFenced reports a store that cannot check fencing tokens: a
	// lease alone does not make a write safe.
	ErrNotFenced = errors.New("hybrid: store does not check fencing tokens")
)
