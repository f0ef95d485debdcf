package hybrid

import "context"

// Locker hands out leases on keys: at most one live lease per key at a time,
// each with a fencing token larger than every earlier grant of that key.
// Implementations are safe for concurrent use.
type Locker interface {
	// Acquire waits until it holds a lease on key, or ctx ends.
	Acquire(ctx context.Context, key string) (Lease, error)
}

// Lease is one grant of a Locker. A lease is worth nothing unless its token
// is checked by the write it protects (cas.FencedStore): a holder can be
// paused past the lease's expiry without knowing it.
type Lease interface {
	// Token is the fencing token of this grant: it grows with every grant
	// of the same key.
	Token() uint64
	// Context is cancelled when the lease is lost (expired, revoked or
	// released).
	Context() context.Context
	// Release gives up this grant only: releasing a grant that has already
	// expired does not touch a newer holder's grant.
	Release(ctx context.Context) error
}
