package hybrid

import (
	"context"
	"time"
)

// Locker hands out leases on keys: at most one live lease per key at a time,
// each with a fencing token larger than every earlier grant of that key.
// Implementations are safe for concurrent use, refuse a nil context with an
// error matching cas.ErrNilContext (they never panic on one), and pass
// hybrid/lockertest. A Locker that holds resources of its own (a session,
// background goroutines) has a Close method and says so; one without Close
// holds none beyond its leases.
type Locker interface {
	// Acquire waits until it holds a lease on key, or ctx ends (the error
	// then matches ctx.Err()).
	Acquire(ctx context.Context, key string) (Lease, error)
}

// Lease is one grant of a Locker. A lease is worth nothing unless its token
// is checked by the write it protects (cas.FencedStore): a holder can be
// paused past the lease's expiry without knowing it.
type Lease interface {
	// Token is the fencing token of this grant: it grows with every grant
	// of the same key.
	Token() uint64
	// Context is cancelled when the lease ends: when it is lost (expired,
	// revoked, its session or connection gone), with a cause matching
	// ErrLeaseLost, or when it is released, with a cause matching
	// ErrLeaseReleased.
	Context() context.Context
	// Release gives up this grant only: releasing a grant that has already
	// been lost does not touch a newer holder's grant (it returns nil or
	// an error matching ErrLeaseLost), and releasing it again does nothing
	// and returns nil. A nil ctx is refused (cas.ErrNilContext) and leaves
	// the lease held.
	Release(ctx context.Context) error
}

// ExpiringLease is a Lease that knows when it expires unless renewed: the
// local, etcd and Redis leases are; a PostgreSQL session lock, which lasts
// as long as its connection, is not. Update checks the time left of an
// ExpiringLease against a safety margin before it sends its write; a lease
// that does not say when it expires gets no such check (its loss is still
// seen through its Context, and the fencing token still decides).
type ExpiringLease interface {
	Lease
	// Expires returns when the lease expires unless renewed, as its holder
	// last learned it. A holder that was paused learns late that it
	// passed: the fenced write, not this time, is what makes a lost lease
	// harmless.
	Expires() time.Time
}
